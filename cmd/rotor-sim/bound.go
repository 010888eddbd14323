package main

import (
	"errors"
	"math"
	"time"
)

// The offline bound (docs/PERFORMANCE.md): minutes blocked that no schedule of a
// week can go below, even one that knows every request in advance. For
// one limit family, take any work-conserving schedule (a request is
// refused only when every account refuses it, as every proxy does) and
// its blocked time B, a union of stretches [a, f): a refused request at
// a, every account full until f, the first reset of a full window.
//
//  1. Every request outside B is served (one refused at t would put t in
//     B). So what B's requests carry is at least the excess E: the demand
//     before a time minus the most the accounts' weekly windows can serve
//     before it (what a running window had left, then one whole window,
//     each crossed by at most one request; a window starts at its first
//     use, so no more than one more starts in a week).
//  2. Between two stretches of B some account serves a whole five-hour
//     window: the account that became free at f had no full window then,
//     and is full again when the next stretch starts, so it filled a
//     five-hour window that started after f, or its weekly window filled
//     (once per weekly window), or f was a weekly reset. So all gaps but
//     a few (one per weekly window of each account, one per weekly reset
//     within the replay) carry at least the smallest five-hour capacity.
//  3. A stretch whose refused requests run from t_i to t_j costs at least
//     the working time from t_i to t_j (each working person, minute by
//     minute, as minutes blocked count them).
//
// The bound is the least working time of any such pattern of stretches
// carrying E, relaxed by a Lagrange multiplier: for every λ ≥ 0 the least
// of (cost − λ·tokens carried) over the patterns, found by a dynamic
// program over the requests, plus λ·E, is at most that least time; the
// bound is the largest over λ. It takes the largest over the prefixes of
// the week that end at a weekly reset (quota that expires there is lost
// to what comes after) and the whole week, and over the families (their
// blocked times overlap in the union, so only the largest counts).
//
// A policy that gives up while an account could serve (more accounts than
// attempts, all tried full) is not work-conserving; the replay counts
// those refusals (Result.GaveUp).

// boundAccount is what the bound needs of one account for one family.
type boundAccount struct {
	fiveHour, weekly float64 // capacities in tokens
	// room is what the weekly window running at the start had left, and
	// resetsAt its reset; running says there was one.
	running  bool
	room     float64
	resetsAt time.Time
	// fiveHourRunning: a five-hour window was running at the start.
	fiveHourRunning bool
	// credits is what the account can serve on credits, in tokens.
	credits float64
}

// boundInput is one family's share of a week: its requests in time
// order, who was working when, and its accounts.
type boundInput struct {
	start, end time.Time
	reqs       []request
	working    [][]span
	accts      []boundAccount
}

// errLongReplay: the bound counts one weekly window per account after its
// carried one, which holds for replays of a week or less.
var errLongReplay = errors.New("the offline bound needs a replay of at most 7 days")

// offlineBound is the bound of one family's week (see above).
func offlineBound(in *boundInput) (time.Duration, error) {
	if in.end.Sub(in.start) > oneWeek {
		return 0, errLongReplay
	}
	if len(in.reqs) == 0 {
		return 0, nil
	}
	maxTok := 0.0
	for _, q := range in.reqs {
		maxTok = max(maxTok, q.tokens)
	}
	// The prefixes: up to each weekly reset within the replay, and the
	// whole replay; the gaps that need not carry a five-hour window.
	ends := []time.Time{in.end}
	gap, free := math.Inf(1), 0
	for _, a := range in.accts {
		gap = min(gap, a.fiveHour)
		free++
		if a.running && a.resetsAt.After(in.start) && a.resetsAt.Before(in.end) {
			ends = append(ends, a.resetsAt)
			free += 2
		}
	}
	work := workBefore(in)
	var best float64 // minutes
	for _, e := range ends {
		n, demand, capacity := 0, 0.0, 0.0
		for _, q := range in.reqs {
			if q.at.Before(e) {
				n++
				demand += q.tokens
			}
		}
		for i := range in.accts {
			capacity += capacityBefore(&in.accts[i], e, maxTok)
		}
		if excess := demand - capacity; excess > 0 {
			best = max(best, leastCarrying(in.reqs[:n], work[:n], gap, free, excess))
		}
	}
	return time.Duration(best * float64(time.Minute)), nil
}

// leastCarrying is a lower bound on the working minutes of stretches of
// reqs that carry at least excess tokens, every gap between two of them
// carrying gap tokens or more but for free of them: the Lagrangian dual,
// maximised over λ by golden-section search (it is concave in λ).
func leastCarrying(reqs []request, work []float64, gap float64, free int, excess float64) float64 {
	prefix := make([]float64, len(reqs)+1)
	least := math.Inf(1)
	for i, q := range reqs {
		prefix[i+1] = prefix[i] + q.tokens
		least = min(least, q.tokens)
	}
	dual := func(lambda float64) float64 {
		return patterns(prefix, work, gap, free, lambda) + lambda*excess
	}
	// Past hi every request is worth its stretch: the dual only falls.
	lo, hi := 0.0, 2*(work[len(work)-1]-work[0]+1)/least
	const phi = 0.6180339887498949
	a, b := hi-phi*(hi-lo), lo+phi*(hi-lo)
	fa, fb := dual(a), dual(b)
	best := max(dual(lo), fa, fb)
	for range 60 {
		if fa < fb {
			lo, a, fa = a, b, fb
			b = lo + phi*(hi-lo)
			fb = dual(b)
		} else {
			hi, b, fb = b, a, fa
			a = hi - phi*(hi-lo)
			fa = dual(a)
		}
		best = max(best, fa, fb)
	}
	return max(best, 0)
}

// patterns is the least of (working minutes − λ·tokens) over the patterns
// of stretches of requests (see leastCarrying), none at all included.
// prefix holds the requests' running sums of tokens, work their working
// minutes since the start.
func patterns(prefix, work []float64, gap float64, free int, lambda float64) float64 {
	n := len(work)
	// done[g][j]: the least value of a pattern whose last stretch ends at
	// request j or before, with g of the free gaps used.
	done := make([][]float64, free+1)
	open := make([]float64, free+1) // least of start value − work + λ·prefix
	for g := range done {
		done[g] = make([]float64, n)
		open[g] = math.Inf(1)
	}
	best, h := 0.0, -1
	for i := range n {
		// h: the last request a stretch may end at for a gap up to i to
		// carry gap tokens.
		for h+1 < i && prefix[i]-prefix[h+2] >= gap {
			h++
		}
		for g := range done {
			start := 0.0 // the first stretch
			if h >= 0 {
				start = min(start, done[g][h])
			}
			if g > 0 && i > 0 {
				start = min(start, done[g-1][i-1])
			}
			open[g] = min(open[g], start-work[i]+lambda*prefix[i])
			end := work[i] - lambda*prefix[i+1] + open[g]
			if i > 0 {
				end = min(end, done[g][i-1])
			}
			done[g][i] = end
			best = min(best, end)
		}
	}
	return best
}

// capacityBefore is the most a can serve from the start of the replay
// until e (e at most a week later): what its running weekly window had
// left until its reset, then a whole window (a window starts at its first
// use, so at most one more starts in a week), and its credits; each
// window may be crossed by one request (the backend serves the request
// that crosses the capacity), as may the credits.
func capacityBefore(a *boundAccount, e time.Time, maxTok float64) float64 {
	c := a.credits
	if a.credits > 0 {
		c += maxTok
	}
	if !a.running {
		return c + a.weekly + maxTok
	}
	if a.room > 0 {
		c += a.room + maxTok
	}
	if a.resetsAt.Before(e) {
		c += a.weekly + maxTok
	}
	return c
}

// workBefore is, for each request of in, the working time (person
// minutes) from the start of the replay to it.
func workBefore(in *boundInput) []float64 {
	out := make([]float64, len(in.reqs))
	for i, q := range in.reqs {
		var d time.Duration
		for _, spans := range in.working {
			d += within(spans, in.start, q.at)
		}
		out[i] = d.Minutes()
	}
	return out
}

// weekBound is the offline bound of wk, w expanded: the largest of its
// families' bounds, each family with every account's whole credits (a
// relaxation: the families share them).
func weekBound(w *Workload, wk *week) (time.Duration, error) { return familiesBound(w, wk, true) }

// weekBoundWithoutCredits is weekBound with no account holding credits:
// the blocking credits are there to prevent (docs/PERFORMANCE.md: credits spent only
// in weeks where it is above zero).
func weekBoundWithoutCredits(w *Workload, wk *week) (time.Duration, error) {
	return familiesBound(w, wk, false)
}

func familiesBound(w *Workload, wk *week, credits bool) (time.Duration, error) {
	fams := 1
	if w.Model != nil {
		fams = 2
	}
	var best time.Duration
	for f := range fams {
		in := &boundInput{start: w.Start, end: w.End(), working: wk.working}
		for _, q := range wk.reqs {
			if q.fam == f {
				in.reqs = append(in.reqs, q)
			}
		}
		for _, spec := range w.Accounts {
			plan := w.Plans[spec.Plan]
			a := boundAccount{fiveHour: plan.FiveHourTokens, weekly: plan.WeeklyTokens}
			if credits {
				a.credits = spec.Credits
			}
			if f == 1 {
				// The model's family: windows of their own, none running.
				a.fiveHour, a.weekly = w.Model.Capacity*plan.FiveHourTokens, w.Model.Capacity*plan.WeeklyTokens
			} else {
				a.fiveHourRunning = spec.FiveHour != nil
				if r := spec.Weekly; r != nil {
					a.running, a.room = true, (1-r.UsedPercent/100)*plan.WeeklyTokens
					a.resetsAt = w.Start.Add(time.Duration(r.ResetsInMinutes) * time.Minute)
				}
			}
			in.accts = append(in.accts, a)
		}
		b, err := offlineBound(in)
		if err != nil {
			return 0, err
		}
		best = max(best, b)
	}
	return best, nil
}
