package main

import (
	"errors"
	"math"
	"sort"
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
//  4. A stretch lasts until a reset, and resets cannot come early. At a
//     refused request t every account has a full window. A five-hour
//     window running at t started at a request (its first use) after
//     t − 5h, so it resets no earlier than the first request after
//     t − 5h, plus five hours; a weekly window started in the replay
//     resets after its end; a window running at the start resets when it
//     said. So the stretch lasts at least until the earliest of these,
//     F(t), holds every request before F(t) (all refused), and costs the
//     working time from t to F(t) (or to its last refused request, if
//     later). It bites where a day's first windows block: they started
//     at its first request or later, and the stretch lasts until five
//     hours after it.
//  5. Five-hour windows cap what a cluster of requests can be served.
//     Split the requests where five hours or more pass without one: no
//     five-hour window started before a cluster serves in it (but one
//     running at the start). Within a cluster from c, the windows of an
//     account serving requests before e started at requests in [c, e),
//     each at least five hours after the one before, so no more of them
//     than the greedy count of such starts; each serves its capacity and
//     one crossing request, and no account more than its weekly windows
//     before e (step 1), plus credits. What the cluster asks before e
//     beyond that is refused there, in stretches whose blocked time
//     (steps 2 to 4, cut at e) falls in the cluster: clusters are
//     disjoint, so their bounds add up.
//
// The bound of steps 1 to 4 is the least working time of any pattern of
// stretches carrying E, relaxed by a Lagrange multiplier: for every
// λ ≥ 0 the least of (cost − λ·tokens carried) over the patterns, found
// by a dynamic program over the requests, plus λ·E, is at most that least
// time; the bound is the largest over λ. It takes the largest over the
// prefixes of the week that end at a weekly reset (quota that expires
// there is lost to what comes after) and the whole week; step 5's sum over
// the clusters (each its largest over the ends e worth trying) is another
// bound, and the larger counts. Over the families, only the largest
// counts (their blocked times overlap in the union).
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
	// fiveHourRunning: a five-hour window was running at the start, with
	// fiveHourRoom left until fiveHourResetsAt.
	fiveHourRunning  bool
	fiveHourRoom     float64
	fiveHourResetsAt time.Time
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
	st := newStretches(in)
	// The prefixes: up to each weekly reset within the replay, and the
	// whole replay.
	ends := []time.Time{in.end}
	for _, a := range in.accts {
		if a.running && a.resetsAt.After(in.start) && a.resetsAt.Before(in.end) {
			ends = append(ends, a.resetsAt)
		}
	}
	var best float64 // minutes
	for _, e := range ends {
		n := st.before(e)
		demand := st.prefix[n]
		capacity := 0.0
		for i := range in.accts {
			a := &in.accts[i]
			capacity += weeklyBefore(a, e, st.maxTok) + creditsOf(a, st.maxTok)
		}
		if excess := demand - capacity; excess > 0 {
			best = max(best, st.leastCarrying(0, n, e, excess))
		}
	}
	best = max(best, st.fiveHourBound())
	return time.Duration(best * float64(time.Minute)), nil
}

// stretches is one family's requests as the dynamic program reads them.
type stretches struct {
	in     *boundInput
	maxTok float64
	// prefix holds the requests' running sums of tokens (prefix[i]: the
	// tokens of the requests before i), work their working minutes since
	// the start.
	prefix, work []float64
	// reset[i] is the earliest a stretch with a refused request at i can
	// end (step 4 of the package doc), resetWork its working minutes.
	reset     []time.Time
	resetWork []float64
	gap       float64 // the smallest five-hour capacity
	free      int     // the gaps that need not carry one
}

func newStretches(in *boundInput) *stretches {
	n := len(in.reqs)
	st := &stretches{in: in, prefix: make([]float64, n+1), reset: make([]time.Time, n), resetWork: make([]float64, n),
		gap: math.Inf(1)}
	for i, q := range in.reqs {
		st.prefix[i+1] = st.prefix[i] + q.tokens
		st.maxTok = max(st.maxTok, q.tokens)
	}
	for _, a := range in.accts {
		st.gap = min(st.gap, a.fiveHour)
		st.free++
		if a.running && a.resetsAt.After(in.start) && a.resetsAt.Before(in.end) {
			st.free += 2
		}
	}
	st.work = workBefore(in)
	first := 0 // the first request after t − 5h
	for i, q := range in.reqs {
		for in.reqs[first].at.Add(fiveHours).Compare(q.at) <= 0 {
			first++
		}
		// A five-hour window running at q started at a request after
		// q − 5h; a weekly window started in the replay resets after its
		// end; a window running at the start resets when it said.
		r := earlier(in.reqs[first].at.Add(fiveHours), in.end)
		for _, a := range in.accts {
			if a.running && a.resetsAt.After(q.at) {
				r = earlier(r, a.resetsAt)
			}
			if a.fiveHourRunning && a.fiveHourResetsAt.After(q.at) {
				r = earlier(r, a.fiveHourResetsAt)
			}
		}
		st.reset[i] = r
		st.resetWork[i] = workAt(in, r)
	}
	return st
}

// before is the number of requests before e.
func (st *stretches) before(e time.Time) int {
	return sort.Search(len(st.in.reqs), func(i int) bool { return !st.in.reqs[i].at.Before(e) })
}

// fiveHourBound is step 5 of the package doc: over each cluster of
// requests (none of them five hours or more from the one before), the
// blocked time that the demand beyond what the five-hour windows can
// serve in it forces, summed.
func (st *stretches) fiveHourBound() float64 {
	reqs := st.in.reqs
	total := 0.0
	for p := 0; p < len(reqs); {
		q := p + 1
		for q < len(reqs) && reqs[q].at.Sub(reqs[q-1].at) < fiveHours {
			q++
		}
		c, next := reqs[p].at, st.in.end
		if q < len(reqs) {
			next = reqs[q].at
		}
		// The ends worth trying: before each window start the greedy
		// count adds (the demand only grows until then), each weekly reset
		// within the cluster, and the next cluster.
		ends := []time.Time{next}
		for i, s := p, c; i < q; i++ {
			if !reqs[i].at.Before(s.Add(fiveHours)) {
				s = reqs[i].at
				ends = append(ends, s)
			}
		}
		for _, a := range st.in.accts {
			if a.running && a.resetsAt.After(c) && a.resetsAt.Before(next) {
				ends = append(ends, a.resetsAt)
			}
		}
		best := 0.0
		for _, e := range ends {
			m := st.before(e)
			windows := 0.0 // five-hour windows that can start in [c, e)
			var s time.Time
			for i := p; i < m; i++ {
				if windows == 0 || !reqs[i].at.Before(s.Add(fiveHours)) {
					s = reqs[i].at
					windows++
				}
			}
			capacity := 0.0
			for i := range st.in.accts {
				a := &st.in.accts[i]
				five := windows * (a.fiveHour + st.maxTok)
				if a.fiveHourRunning && a.fiveHourResetsAt.After(c) {
					five += a.fiveHourRoom + st.maxTok
				}
				capacity += min(five, weeklyBefore(a, e, st.maxTok)) + creditsOf(a, st.maxTok)
			}
			if excess := st.prefix[m] - st.prefix[p] - capacity; excess > 0 {
				best = max(best, st.leastCarrying(p, m, e, excess))
			}
		}
		total += best
		p = q
	}
	return total
}

// leastCarrying is a lower bound on the working minutes before e of
// stretches of the requests from p to m (those before e) that carry at
// least excess tokens: the Lagrangian dual, maximised over λ by
// golden-section search (it is concave in λ; any λ gives a bound).
func (st *stretches) leastCarrying(p, m int, e time.Time, excess float64) float64 {
	n := m - p
	prefix := make([]float64, n+1)
	work, reset, until := st.work[p:m], make([]float64, n), make([]int, n)
	least, ew := math.Inf(1), workAt(st.in, e)
	for i := range n {
		prefix[i+1] = st.prefix[p+i+1] - st.prefix[p]
		least = min(least, prefix[i+1]-prefix[i])
		reset[i] = min(st.resetWork[p+i], ew)
		// until[i]: the last request before the stretch can end.
		r := earlier(st.reset[p+i], e)
		until[i] = st.before(r) - 1 - p
	}
	dual := func(lambda float64) float64 {
		return patterns(prefix, work, reset, until, st.gap, st.free, lambda) + lambda*excess
	}
	// Past hi every request is worth its stretch: the dual only falls.
	lo, hi := 0.0, 2*(ew-work[0]+1)/least
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
// minutes since the start; a stretch that starts at request i runs at
// least until the working minute reset[i], and so holds every request up
// to until[i].
func patterns(prefix, work, reset []float64, until []int, gap float64, free int, lambda float64) float64 {
	n := len(work)
	// done[g][j]: the least value of a pattern whose last stretch ends at
	// request j or before, with g of the free gaps used. open[g]: the
	// least of start value − work + λ·prefix over the stretches that may
	// end at the request being read or later; later[g][j]: those that
	// may from j on; direct[g][j]: patterns whose last stretch ends at j,
	// the earliest it can, and lasts until its reset.
	done, later, direct := make([][]float64, free+1), make([][]float64, free+1), make([][]float64, free+1)
	open := make([]float64, free+1)
	for g := range done {
		done[g], later[g], direct[g] = make([]float64, n), make([]float64, n+1), make([]float64, n)
		for j := range n {
			later[g][j], direct[g][j] = math.Inf(1), math.Inf(1)
		}
		later[g][n] = math.Inf(1)
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
			u := until[i]
			v := start - work[i] + lambda*prefix[i]
			direct[g][u] = min(direct[g][u], v+reset[i]-lambda*prefix[u+1])
			later[g][u+1] = min(later[g][u+1], v)
			open[g] = min(open[g], later[g][i])
			end := min(work[i]-lambda*prefix[i+1]+open[g], direct[g][i])
			if i > 0 {
				end = min(end, done[g][i-1])
			}
			done[g][i] = end
			best = min(best, end)
		}
	}
	return best
}

// weeklyBefore is the most a's windows can serve from the start of the
// replay until e (e at most a week later): what its running weekly
// window had left until its reset, then a whole window (a window starts
// at its first use, so at most one more starts in a week); each window
// may be crossed by one request (the backend serves the request that
// crosses the capacity).
func weeklyBefore(a *boundAccount, e time.Time, maxTok float64) float64 {
	if !a.running {
		return a.weekly + maxTok
	}
	c := 0.0
	if a.room > 0 {
		c += a.room + maxTok
	}
	if a.resetsAt.Before(e) {
		c += a.weekly + maxTok
	}
	return c
}

// creditsOf is the most a can serve on credits: its balance, crossed by
// one request.
func creditsOf(a *boundAccount, maxTok float64) float64 {
	if a.credits > 0 {
		return a.credits + maxTok
	}
	return 0
}

// workBefore is, for each request of in, the working time (person
// minutes) from the start of the replay to it.
func workBefore(in *boundInput) []float64 {
	out := make([]float64, len(in.reqs))
	for i, q := range in.reqs {
		out[i] = workAt(in, q.at)
	}
	return out
}

// workAt is the working time (person minutes) from the start of the
// replay to t.
func workAt(in *boundInput, t time.Time) float64 {
	var d time.Duration
	for _, spans := range in.working {
		d += within(spans, in.start, t)
	}
	return d.Minutes()
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
				if r := spec.FiveHour; r != nil {
					a.fiveHourRunning, a.fiveHourRoom = true, max(1-r.UsedPercent/100, 0)*plan.FiveHourTokens
					a.fiveHourResetsAt = w.Start.Add(time.Duration(r.ResetsInMinutes) * time.Minute)
				}
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
