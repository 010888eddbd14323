// Command rotor-sim replays week-long workloads through rotor's real
// selection (rotation.Selector, built by rotation.Open on a fake clock)
// and through three baseline policies, and prints one markdown table per
// workload: requests served, minutes blocked, conversations moved (make
// sim; docs/selection.md "Spending what expires first"; docs/PERFORMANCE.md shows
// the tables).
//
// # The window model
//
// Each account has two usage windows, as ChatGPT's Codex backend reports
// them in its x-codex-primary-* and x-codex-secondary-* headers: one of
// five hours and one of a week, each with a capacity in tokens set by the
// account's plan (the workload's plans).
//
//   - A window starts at the first request after it was last reset, not at
//     a fixed time: an account nobody uses has no window running, and its
//     quota is not running out. A workload may start an account with
//     windows already running (used before the replay), which the selector
//     learns as rotor's usage read at serve start would (docs/selection.md).
//   - Each request served charges its tokens (from the workload) to both
//     windows: the share of a window's capacity it uses is tokens divided
//     by capacity, so one request costs a Plus account a larger share than
//     a Pro one.
//   - A window whose used tokens reach its capacity is full: the account
//     refuses every request (a 429 usage limit carrying the reset time)
//     until that window resets. The request that crosses the capacity is
//     still served.
//   - A window resets when its time is up (five hours or a week after it
//     started): its use goes back to zero, and what was left of its
//     capacity is lost. The next request starts it again.
//   - docs/selection.md: a workload's Model is metered by a limit family of its
//     own (its own five-hour and weekly windows, a share of the plan's);
//     the conversations that use it fill only those, and a full one
//     refuses only them. An account may hold credits (a balance in
//     tokens): once a window of the family that meters a request is
//     full, the backend keeps answering and spends them (the request
//     that crosses the balance is still served), and refuses only when
//     the balance is gone.
//
// # What the selector is fed
//
// Exactly what the proxy feeds it. After every attempt, the account's
// windows as its answer's headers would report them (Runtime.SetQuota: a
// whole used percent, the window's minutes, its reset time); after a
// served request, Runtime.Record with rotation.Served; after a refused
// one, Runtime.Record with rotation.Limited and the reset time, and the
// request tries the next account, at most four in all (the proxy's
// --max-attempts). The 429 names the family that metered the request
// (rotation.Limit.Family), the answers carry every family's windows and
// the credits (rotation.Quota.Families, .Credits), and the selector runs
// with --credits last-resort. Each turn carries its conversation's
// affinity key and model (rotation.Request.AffinityKey, .Model), and a served turn binds the conversation
// to its account (Selector.Bind), as proxy/forward.go does.
//
// # The baselines
//
// Round-robin, fill-first and least-used pick from the same accounts
// under the same window model, reading the same runtime state (they skip
// accounts known to be rate-limited, as rotor does) and keeping the same
// conversation affinity: only the placement of a conversation that has no
// account (or whose account cannot serve) differs.
//
// # The numbers
//
// Requests served counts the workload's requests that some account
// answered; a request none could answer is lost (the workload does not
// retry it). Minutes blocked is how long people could not work: from each
// lost request until the first moment any account could serve again (the
// wait Codex CLI shows its user), counted for each person only while they
// were working (in a session, or finishing a conversation started in
// one), so a team of four blocked for an hour counts four hours and a
// night counts nothing. Conversations moved counts turns served by
// another account than their conversation's previous turn (each costs the
// prompt cache and docs/codex.md's edits). Weekly quota expired is the share of
// the pool's weekly capacity that weekly resets during the replay threw
// away unused; windows still running at the end count as kept.
//
// # The offline bound (docs/PERFORMANCE.md)
//
// For each week, minutes blocked that no schedule can go below, even one
// that knows every request in advance: a relaxation of the real problem,
// computed per limit family (offlineBound in bound.go, whose comment has
// the argument). It holds for every work-conserving schedule, one that
// refuses a request only when every account refuses it. In short: the
// requests outside the blocked time are all served, so the blocked time
// carries at least the demand the pooled weekly windows cannot hold
// (what each running window had left, one whole window more, one
// crossing request each); between two stretches of blocked time some
// account fills a whole five-hour window, except a few times per weekly
// window; a stretch with a refused request at t lasts until a full window
// resets, and a five-hour window running at t started at a request after
// t − 5h, so no earlier than five hours after the first request since
// t − 5h (a weekly window started in the replay resets after it); and
// within a cluster of requests (none five hours from the one before) an
// account's five-hour windows start at its requests, five hours apart or
// more, so what a cluster asks beyond their capacity is refused in it. The least
// working time of stretches so placed that carry the excess, relaxed by a
// Lagrange multiplier and found by a dynamic program over the requests,
// is the bound (the weekly excess over the week and its prefixes, or the
// five-hour excess summed over the clusters, whichever is larger).
// TestOfflineBoundNeverExceedsTheOptimum and
// TestOfflineBoundUnderFiveHourPressureNeverExceedsTheOptimum check it
// against an exhaustive search on small days, and
// TestOfflineBoundOfAWeekWorkedOutByHand and
// TestOfflineBoundOfAFiveHourDayWorkedOutByHand against figures worked
// out by hand.
//
// # Workloads
//
// testdata/sim/*.json: the pool (plans, accounts, windows already
// running) and the generator (coding-week/1) with its seed; see Workload
// and Generator. The same file always gives the same requests, and the
// same tables. With -seeds N the command replays each workload with N
// seeds instead (the file's own first, or from -first-seed on) and prints
// a summary: how often rotor's policy held, and every policy's sums;
// -demand scales the conversations an hour (which also draws other
// weeks).
//
// # The weeks of docs/PERFORMANCE.md
//
// After the published weeks, make sim replays the weeks of the week
// generator (testdata/sim/weeks/weeks.json, see Weeks) for every
// workload, bounds each, and prints per policy: (minutes blocked + 60) /
// (bound + 60), median and worst week (ratioSlack says why the hour);
// weeks it blocked more than the best baseline; minutes blocked and
// conversations moved, summed; credits spent; then rotor's policy against
// docs/PERFORMANCE.md's targets.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// options are the command's flags.
type options struct {
	dir    string
	only   string
	seeds  int
	first  int
	demand float64
	weeks  string
}

func main() {
	var o options
	flag.StringVar(&o.dir, "dir", "testdata/sim", "the folder of workload files (*.json)")
	flag.StringVar(&o.only, "workload", "", "replay only the workload of this name")
	flag.IntVar(&o.seeds, "seeds", 0, "instead of the tables, replay each workload with this many seeds (its own first) and summarise")
	flag.IntVar(&o.first, "first-seed", 0, "with -seeds: start at this seed of each workload (0, the default, is its file's own): a later start replays weeks the policy was not tuned on")
	flag.Float64Var(&o.demand, "demand", 1, "with -seeds: scale every workload's conversations an hour by this")
	flag.StringVar(&o.weeks, "weeks", "", "the week generator's file (docs/PERFORMANCE.md); default DIR/weeks/weeks.json, \"none\" for none")
	flag.Parse()
	if err := run(os.Stdout, &o); err != nil {
		fmt.Fprintln(os.Stderr, "rotor-sim:", err)
		os.Exit(1)
	}
}

// run replays every workload of o.dir (or the one named o.only) and
// prints its table to out, or with o.seeds the summary of the sweep.
func run(out io.Writer, o *options) error {
	ws, err := loadAll(o.dir, o.only)
	if err != nil {
		return err
	}
	if o.seeds > 0 {
		sweepHeader(out, o.first, o.seeds, o.demand)
		for _, w := range ws {
			if err := sweep(out, w, o.first, o.seeds, o.demand); err != nil {
				return fmt.Errorf("%s: %w", w.Name, err)
			}
		}
		return nil
	}
	for i, w := range ws {
		results, err := ReplayAll(w)
		if err != nil {
			return fmt.Errorf("%s: %w", w.Name, err)
		}
		if i > 0 {
			fmt.Fprintln(out)
		}
		writeTable(out, w, results)
	}
	return judgeAll(out, o, ws)
}

// judgeAll prints docs/PERFORMANCE.md's tables: every workload of ws over the weeks
// of o.weeks's generator.
func judgeAll(out io.Writer, o *options, ws []*Workload) error {
	path := o.weeks
	switch path {
	case "none":
		return nil
	case "":
		path = filepath.Join(o.dir, "weeks", "weeks.json")
	}
	g, err := LoadWeeks(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n### Against the offline bound\n")
	for _, w := range ws {
		weeks, err := judgeWeeks(w, g)
		if err != nil {
			return fmt.Errorf("%s: %w", w.Name, err)
		}
		fmt.Fprintln(out)
		writeJudged(out, w, g, weeks)
	}
	return nil
}

// loadAll reads the workloads of dir in the order of their file names,
// or only the one named only.
func loadAll(dir, only string) ([]*Workload, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	slices.Sort(paths)
	var ws []*Workload
	for _, p := range paths {
		w, err := LoadWorkload(p)
		if err != nil {
			return nil, err
		}
		if only == "" || w.Name == only {
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 {
		return nil, fmt.Errorf("no workload %q in %s", only, dir)
	}
	return ws, nil
}

// ReplayAll replays w through every policy, in the order of Policies.
func ReplayAll(w *Workload) ([]Result, error) { return replayWeek(w, w.expand()) }

// replayWeek replays wk, w expanded, through every policy.
func replayWeek(w *Workload, wk *week) ([]Result, error) {
	out := make([]Result, 0, len(Policies))
	for _, p := range Policies {
		r, err := Replay(w, wk, p)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}
