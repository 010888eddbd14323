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

// summary is what a sweep found for one workload, each array in the
// order of Policies.
type summary struct {
	weeks       int
	heldBlocked int // weeks rotor blocked no longer than the best baseline
	heldMoved   int // weeks rotor moved no more conversations than least-used
	blocked     [4]time.Duration
	moved       [4]int
	expired     [4]float64 // mean share of the weekly quota
}

// summarise replays w with n seeds from seed first (0 is the file's) and
// demand times its conversations an hour.
func summarise(w *Workload, first, n int, demand float64) (summary, error) {
	base := *w
	base.Generator.ConversationsPerHour *= demand
	s := summary{weeks: n}
	for i := range n {
		v := base
		v.Generator.Seed = w.Generator.Seed + uint64(first+i)*seedStep
		res, err := ReplayAll(&v)
		if err != nil {
			return s, err
		}
		for p, r := range res {
			s.blocked[p] += r.Blocked
			s.moved[p] += r.Moved
			s.expired[p] += r.WeeklyExpired / float64(n)
		}
		if res[0].Blocked <= bestBaseline(res) {
			s.heldBlocked++
		}
		if res[0].Moved <= resultOf(res, PolicyLeastUsed).Moved {
			s.heldMoved++
		}
	}
	return s, nil
}

// sweep prints one line of a summary table for w (see summarise): in how
// many weeks rotor blocked no longer than the best baseline and moved no
// more conversations than least-used, each policy's sums, and the mean
// share of weekly quota each let expire.
func sweep(out io.Writer, w *Workload, first, n int, demand float64) error {
	s, err := summarise(w, first, n, demand)
	if err != nil {
		return err
	}
	minutes := func(d time.Duration) int { return int(d / time.Minute) }
	fmt.Fprintf(out, "| %s | %d of %d | %d of %d | %d / %d / %d / %d | %d / %d / %d / %d | %.0f%% / %.0f%% / %.0f%% / %.0f%% |\n",
		w.Name, s.heldBlocked, n, s.heldMoved, n, minutes(s.blocked[0]), minutes(s.blocked[1]), minutes(s.blocked[2]), minutes(s.blocked[3]),
		s.moved[0], s.moved[1], s.moved[2], s.moved[3], 100*s.expired[0], 100*s.expired[1], 100*s.expired[2], 100*s.expired[3])
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
