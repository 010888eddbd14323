package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// ratioSlack is added to minutes blocked and to the bound before they are
// divided (docs/PERFORMANCE.md's ratio to the bound): (blocked + 60) / (bound + 60).
// The rule was chosen before any result was read. The bound is zero in
// many weeks (it saw only what the weekly windows cannot hold; since it
// sees five-hour windows too, in fewer), where a
// plain ratio is undefined, and where it is a few minutes a plain ratio
// would call ten minutes blocked "5×". An hour is the scale below which a
// difference is one interruption, not a policy's: with it the ratio is 1
// when both are zero, stays defined everywhere, and tends to the plain
// ratio when both are hours. The same rule compares rotor with the best
// baseline (docs/PERFORMANCE.md's "never more than 1.1× it").
const ratioSlack = 60.0

// ratio is (a + 60 min) / (b + 60 min).
func ratio(a, b time.Duration) float64 {
	return (a.Minutes() + ratioSlack) / (b.Minutes() + ratioSlack)
}

// weekOutcome is one generated week: every policy's result, its bound,
// its bound with no account holding credits, and whether it had credits
// and a model of its own. mirror is rotor's result on the same week with
// the pool's accounts listed the other way round.
type weekOutcome struct {
	res                  []Result
	mirror               Result
	bound, boundNoCredit time.Duration
	credits, model       bool
}

// mirrored is w with its accounts listed the other way round: the same
// accounts, windows, credits and requests, only their order (and so their
// ids) changed. No policy can know which order is the "right" one, so
// what a week's outcome does under it is how much of a week-by-week
// comparison is not the policy's (docs/PERFORMANCE.md).
func mirrored(w *Workload) *Workload {
	v := *w
	v.Accounts = slices.Clone(w.Accounts)
	slices.Reverse(v.Accounts)
	return &v
}

// judgeWeeks replays g's weeks of w through every policy and bounds them.
func judgeWeeks(w *Workload, g *Weeks) ([]weekOutcome, error) {
	out := make([]weekOutcome, 0, g.Weeks)
	for i := range g.Weeks {
		d := g.Week(w, i)
		res, err := replayWeek(d.w, d.wk)
		if err != nil {
			return nil, err
		}
		o := weekOutcome{res: res, model: d.w.Model != nil,
			credits: slices.ContainsFunc(d.w.Accounts, func(a AccountSpec) bool { return a.Credits > 0 })}
		if o.bound, err = weekBound(d.w, d.wk); err != nil {
			return nil, err
		}
		if o.boundNoCredit, err = weekBoundWithoutCredits(d.w, d.wk); err != nil {
			return nil, err
		}
		if o.mirror, err = Replay(mirrored(d.w), d.wk, PolicyRotor); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// writeJudged prints w's weeks as docs/PERFORMANCE.md asks: per policy the ratio of
// minutes blocked to the bound (median, worst week), the weeks it blocked
// more than the best baseline, conversations moved and credits spent;
// then rotor's policy against docs/PERFORMANCE.md's targets.
func writeJudged(out io.Writer, w *Workload, g *Weeks, weeks []weekOutcome) {
	n := len(weeks)
	zero, withCredits, withModel := 0, 0, 0
	for _, o := range weeks {
		if o.bound == 0 {
			zero++
		}
		if o.credits {
			withCredits++
		}
		if o.model {
			withModel++
		}
	}
	fmt.Fprintf(out, "#### %s, %d weeks (%s)\n\n", w.Name, n, g.Kind)
	fmt.Fprintf(out, "%d weeks with a credits account, %d with a model of its own family; the bound is 0 in %d.\n\n", withCredits, withModel, zero)
	fmt.Fprintln(out, "| policy | (blocked+60)/(bound+60), median | worst | weeks worse than the best baseline | minutes blocked, summed | conversations moved, summed | credits spent: M tokens (weeks) |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|")
	for p, name := range Policies {
		var ratios []float64
		worse, moved, spentWeeks := 0, 0, 0
		var blocked time.Duration
		spent := 0.0
		for _, o := range weeks {
			r := o.res[p]
			ratios = append(ratios, ratio(r.Blocked, o.bound))
			if r.Blocked > bestBaseline(o.res) {
				worse++
			}
			blocked += r.Blocked
			moved += r.Moved
			if r.Credits > 0 {
				spent += r.Credits
				spentWeeks++
			}
		}
		slices.Sort(ratios)
		fmt.Fprintf(out, "| %s | %.2f | %.2f | %d | %d | %d | %.1f (%d) |\n", name, median(ratios), ratios[len(ratios)-1],
			worse, int(blocked/time.Minute), moved, spent/1e6, spentWeeks)
	}
	v, m := verdictOf(weeks), mirrorOf(weeks)
	fmt.Fprintf(out, "\nrotor with the pool's accounts listed the other way round (the same week; only the order changes): blocks no more than rotor in %d of %d weeks, "+
		"rotor no more than it in %d, the same in %d; no worse than the best baseline in %d weeks (rotor: %d).\n",
		m.mirrorHeld, n, m.rotorHeld, m.same, m.againstBest, v.held)
	var alone []string
	for p, name := range Policies[1:] {
		held := 0
		for _, o := range weeks {
			if o.res[0].Blocked <= o.res[p+1].Blocked {
				held++
			}
		}
		alone = append(alone, fmt.Sprintf("%s %d of %d", name, held, n))
	}
	fmt.Fprintf(out, "\nrotor against each baseline alone, weeks no worse: %s.\n", strings.Join(alone, ", "))
	fmt.Fprintf(out, "\nrotor (--credits last-resort) against the targets: no worse than the best baseline in %d of %d weeks (%.0f%%, target ≥ 90%%): %s; "+
		"worst week %.2f× the best baseline by the same rule (target ≤ 1.1): %s; credits spent in %d weeks, %d of them where the bound without credits is 0 (target 0): %s; "+
		"moved %d conversations, least-used %d: %s.\n",
		v.held, n, 100*float64(v.held)/float64(n), yes(float64(v.held) >= 0.9*float64(n)),
		v.worst, yes(v.worst <= 1.1), v.spentWeeks, v.spentNeedless, yes(v.spentNeedless == 0),
		v.moved, v.leastUsedMoved, yes(v.moved <= v.leastUsedMoved))
}

// verdict is rotor's policy over a workload's weeks, against docs/PERFORMANCE.md.
type verdict struct {
	held                      int     // weeks it blocked no more than the best baseline
	worst                     float64 // its worst ratio to the best baseline
	spentWeeks, spentNeedless int     // weeks it spent credits; of them, where the bound without credits is 0
	moved, leastUsedMoved     int
}

func verdictOf(weeks []weekOutcome) verdict {
	var v verdict
	for _, o := range weeks {
		rotor, best := o.res[0], bestBaseline(o.res)
		if rotor.Blocked <= best {
			v.held++
		}
		v.worst = max(v.worst, ratio(rotor.Blocked, best))
		if rotor.Credits > 0 {
			v.spentWeeks++
			if o.boundNoCredit == 0 {
				v.spentNeedless++
			}
		}
		v.moved += rotor.Moved
		v.leastUsedMoved += resultOf(o.res, PolicyLeastUsed).Moved
	}
	return v
}

// mirrorCount is rotor against itself on the mirrored pool, week by week.
type mirrorCount struct {
	mirrorHeld, rotorHeld, same int // mirror ≤ rotor, rotor ≤ mirror, equal
	againstBest                 int // weeks the mirror blocked no more than the best baseline
}

func mirrorOf(weeks []weekOutcome) mirrorCount {
	var m mirrorCount
	for _, o := range weeks {
		rotor, mirror := o.res[0].Blocked, o.mirror.Blocked
		if mirror <= rotor {
			m.mirrorHeld++
		}
		if rotor <= mirror {
			m.rotorHeld++
		}
		if rotor == mirror {
			m.same++
		}
		if mirror <= bestBaseline(o.res) {
			m.againstBest++
		}
	}
	return m
}

func yes(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
