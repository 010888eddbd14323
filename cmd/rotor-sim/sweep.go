package main

import (
	"fmt"
	"io"
	"time"
)

// seedStep spaces the seeds of a sweep: seed i of a workload is its
// file's seed plus i·seedStep, so seed 0 is the published week. The
// policy was tuned on seeds 0-15; -first-seed 16 replays weeks it was not.
const seedStep = 7919

// sweep replays w with n seeds from seed first (0 is the file's) and demand times its
// conversations an hour, and prints one line of a summary table: in how
// many weeks rotor blocked no longer than the best baseline and moved no
// more conversations than least-used, each policy's sums, and the mean
// share of weekly quota each let expire.
func sweep(out io.Writer, w *Workload, first, n int, demand float64) error {
	base := *w
	base.Generator.ConversationsPerHour *= demand
	var blocked [4]time.Duration
	var moved [4]int
	var expired [4]float64
	heldBlocked, heldMoved := 0, 0
	for i := range n {
		v := base
		v.Generator.Seed = w.Generator.Seed + uint64(first+i)*seedStep
		res, err := ReplayAll(&v)
		if err != nil {
			return err
		}
		for p, r := range res {
			blocked[p] += r.Blocked
			moved[p] += r.Moved
			expired[p] += r.WeeklyExpired / float64(n)
		}
		if res[0].Blocked <= bestBaseline(res) {
			heldBlocked++
		}
		if res[0].Moved <= resultOf(res, PolicyLeastUsed).Moved {
			heldMoved++
		}
	}
	minutes := func(d time.Duration) int { return int(d / time.Minute) }
	fmt.Fprintf(out, "| %s | %d of %d | %d of %d | %d / %d / %d / %d | %d / %d / %d / %d | %.0f%% / %.0f%% / %.0f%% / %.0f%% |\n",
		w.Name, heldBlocked, n, heldMoved, n, minutes(blocked[0]), minutes(blocked[1]), minutes(blocked[2]), minutes(blocked[3]),
		moved[0], moved[1], moved[2], moved[3], 100*expired[0], 100*expired[1], 100*expired[2], 100*expired[3])
	return nil
}

// sweepHeader is the head of the table sweep's lines make.
func sweepHeader(out io.Writer, first, n int, demand float64) {
	fmt.Fprintf(out, "#### %d weeks per workload (seeds %d-%d), demand ×%.2f\n\n", n, first, first+n-1, demand)
	fmt.Fprintln(out, "| workload | weeks rotor blocked at most the best baseline | weeks rotor moved at most least-used | minutes blocked, summed: rotor / round-robin / fill-first / least-used | conversations moved, summed | weekly quota expired, mean |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|")
}

// bestBaseline is the fewest minutes blocked among the baselines of res
// (every policy but rotor's, which ReplayAll puts first).
func bestBaseline(res []Result) time.Duration {
	best := res[1].Blocked
	for _, r := range res[2:] {
		best = min(best, r.Blocked)
	}
	return best
}

// resultOf is policy's result in res.
func resultOf(res []Result, policy string) Result {
	for _, r := range res {
		if r.Policy == policy {
			return r
		}
	}
	return Result{Policy: policy}
}
