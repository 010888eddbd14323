package rotation

import (
	"math"
	"slices"
	"time"

	"github.com/rotorproxy/rotor/accounts"
)

// What the recent rates foretell (docs/dashboard.md, docs/selection.md): each usable account's
// quota windows are run forward at their recent rates (rate.go) to find
// when the account cannot serve, and the pool is blocked when every usable
// account cannot at once. Each account keeps its own rate: the forecast
// says where the pool heads if use goes on as it has, not how rotor would
// spread the load once an account is out.

// Account outlooks at the recent rates.
const (
	// OutlookRunsOut: a window fills before it resets, at RunsOutAt.
	OutlookRunsOut = "runs-out"
	// OutlookLasts: no window fills before it resets within the horizon.
	OutlookLasts = "lasts"
	// OutlookUnknown: no window of the account has a recent rate.
	OutlookUnknown = "unknown"
)

// Pool outlooks at the recent rates.
const (
	// PoolBlocked: every usable account is out at once from At (Until,
	// when one of them is back; zero when none is in view).
	PoolBlocked = "blocked"
	// PoolNotBefore: the accounts with a recent rate are all out at once
	// from At, so the pool is blocked no sooner; Unknown may hold out longer.
	PoolNotBefore = "not-before"
	// PoolNotBlocked: never every account out at once within the horizon.
	PoolNotBlocked = "not-blocked"
	// PoolUnknown: no usable account has a recent rate.
	PoolUnknown = "unknown"
)

// defaultHorizon is how far the forecast looks when no window says its
// length: a week, the longest window of a ChatGPT plan.
const defaultHorizon = 7 * 24 * time.Hour

// maxCycles bounds the windows run forward per window, whatever its length.
const maxCycles = 512

// RunsOut names the account that runs out next at the recent rates: the
// first of its windows to fill before it resets (Index 0: none does within
// the horizon).
type RunsOut struct {
	Index  int
	Window string // "primary" or "secondary"
	At     time.Time
}

// PoolOutlook is when the pool as a whole would be blocked at the recent
// rates, looking Horizon ahead (the longest window).
type PoolOutlook struct {
	Verdict   string // a Pool* constant
	At, Until time.Time
	Horizon   time.Duration
	// Unknown are the usable accounts (indexes) without a recent rate.
	Unknown []int
}

// outage is a stretch [from, to) in which an account cannot serve; a zero
// to never ends in view.
type outage struct{ from, to time.Time }

// endsBy reports whether o ends by t (an open-ended o never does).
func (o outage) endsBy(t time.Time) bool { return !o.to.IsZero() && !o.to.After(t) }

var windowNames = [2]string{"primary", "secondary"}

// foresee fills fc's outlooks at the recent rates: each account's rates
// and when it runs out, the account that runs out next and the pool's.
// states are the accounts' states, as fc.Accounts.
func foresee(fc *Forecast, states []AccountState) {
	now := fc.At
	fc.Pool.Horizon = horizonOf(fc, states)
	end := now.Add(fc.Pool.Horizon)
	var known [][]outage
	usable := 0
	for i := range fc.Accounts {
		f, st := &fc.Accounts[i], &states[i]
		if st.Quota != nil {
			f.PrimaryRate, f.SecondaryRate = st.Quota.RecentRates(now)
		}
		if f.Verdict == ForecastUnavailable {
			continue // out until a person acts: not part of the pool's outlook
		}
		usable++
		outs, ok := accountOutlook(f, st, now, end)
		if !ok {
			fc.Pool.Unknown = append(fc.Pool.Unknown, f.Index)
			continue
		}
		known = append(known, union(outs))
		if !f.RunsOutAt.IsZero() && (fc.RunsOutNext.Index == 0 || f.RunsOutAt.Before(fc.RunsOutNext.At)) {
			fc.RunsOutNext = RunsOut{Index: f.Index, Window: f.RunsOutWindow, At: f.RunsOutAt}
		}
	}
	p := &fc.Pool
	switch {
	case usable == 0:
		p.Verdict, p.At = PoolBlocked, now // nothing serves until a person acts
	case len(known) == 0:
		p.Verdict = PoolUnknown
	default:
		at, until, blocked := firstBlocked(known, now, end)
		switch {
		case !blocked:
			p.Verdict = PoolNotBlocked // the unknown accounts can only add room
		case len(p.Unknown) == 0:
			p.Verdict, p.At, p.Until = PoolBlocked, at, until
		case at.After(now):
			p.Verdict, p.At = PoolNotBefore, at
		default:
			p.Verdict = PoolUnknown // "not before now" says nothing
		}
	}
}

// horizonOf is the longest window of the usable accounts, else
// defaultHorizon.
func horizonOf(fc *Forecast, states []AccountState) time.Duration {
	longest := time.Duration(0)
	for i := range fc.Accounts {
		q := states[i].Quota
		if q == nil || fc.Accounts[i].Verdict == ForecastUnavailable {
			continue
		}
		for _, w := range [2]*Window{q.Primary, q.Secondary} {
			if w != nil {
				longest = max(longest, time.Duration(w.WindowMinutes)*time.Minute)
			}
		}
	}
	if longest == 0 {
		return defaultHorizon
	}
	return longest
}

// accountOutlook runs one usable account forward to end at its recent
// rates: the stretches it cannot serve, and f's Outlook and RunsOut*. ok
// is false when no window of the account has a recent rate. An account
// without quota windows (an API key) only waits out its current delay.
func accountOutlook(f *AccountForecast, st *AccountState, now, end time.Time) (outs []outage, ok bool) {
	if f.Verdict == ForecastDelayed && f.Reason != ReasonQuotaDeferred && !f.ReadyAt.IsZero() {
		outs = append(outs, outage{now, f.ReadyAt})
	}
	q := st.Quota
	if q == nil {
		if f.Account.Kind == accounts.KindChatGPT {
			f.Outlook = OutlookUnknown // never observed: its windows are not known yet
			return nil, false
		}
		return outs, true
	}
	for i, name := range windowNames {
		w := q.window(i)
		if w == nil {
			continue
		}
		rate, known := q.rate(i, now)
		wo, fill := windowOutlook(w, rate, known, q.ObservedAt, now, end)
		outs = append(outs, wo...)
		ok = ok || known
		if !fill.IsZero() && (f.RunsOutAt.IsZero() || fill.Before(f.RunsOutAt)) {
			f.RunsOutAt, f.RunsOutWindow = fill, name
		}
	}
	switch {
	case !ok:
		f.Outlook = OutlookUnknown
	case f.RunsOutAt.IsZero():
		f.Outlook = OutlookLasts
	default:
		f.Outlook = OutlookRunsOut
	}
	return outs, ok
}

// windowOutlook runs window w forward to end at rate (percent per hour;
// known false: no rate, so only a window already full is out): the
// stretches it is full, and fill, when it first fills before it resets
// (zero if it does not by end). Usage goes on from the observation at
// observed; each later window starts empty at the reset before it (a
// window starts at its first use, which at a steady rate is at once).
func windowOutlook(w *Window, rate float64, known bool, observed, now, end time.Time) (outs []outage, fill time.Time) {
	reset := w.ResetsAt
	if !reset.IsZero() && !reset.After(now) {
		return nil, time.Time{} // it reset since: empty, and its rate starts over
	}
	switch {
	case w.UsedPercent >= 100:
		outs = append(outs, outage{now, reset})
	case known:
		at := later(observed.Add(hours((100-w.UsedPercent)/rate)), now)
		if (reset.IsZero() || at.Before(reset)) && at.Before(end) {
			fill = at
			outs = append(outs, outage{at, reset})
		}
	}
	length := time.Duration(w.WindowMinutes) * time.Minute
	if !known || reset.IsZero() || length <= 0 {
		return outs, fill
	}
	fillIn := hours(100 / rate)
	if fillIn >= length {
		return outs, fill // a whole window lasts: only the current one can fill
	}
	for n, start := 0, reset; n < maxCycles && start.Add(fillIn).Before(end); n, start = n+1, start.Add(length) {
		if fill.IsZero() {
			fill = start.Add(fillIn)
		}
		outs = append(outs, outage{start.Add(fillIn), start.Add(length)})
	}
	return outs, fill
}

// hours is h hours as a duration.
// A rate slow enough makes more hours than a Duration holds; converted
// as is, they would overflow into the past and read "full now".
func hours(h float64) time.Duration { return Span(h, time.Hour) }

// Span is v units as a Duration, as far as one goes either way when it
// cannot hold them (an upstream's "Inf", centuries, a rate near zero),
// where a plain conversion would overflow and change sign; NaN is 0.
func Span(v float64, unit time.Duration) time.Duration {
	d := v * float64(unit)
	switch {
	case math.IsNaN(d):
		return 0
	case d >= math.MaxInt64:
		return math.MaxInt64
	case d <= math.MinInt64:
		return math.MinInt64
	}
	return time.Duration(d)
}

// union sorts outs and joins those that overlap or touch, so that the end
// of one is when the account can serve again.
func union(outs []outage) []outage {
	slices.SortFunc(outs, func(a, b outage) int { return a.from.Compare(b.from) })
	var out []outage
	for _, o := range outs {
		n := len(out)
		if n == 0 || (!out[n-1].to.IsZero() && out[n-1].to.Before(o.from)) {
			out = append(out, o) // a gap: the account serves in between
			continue
		}
		if last := &out[n-1]; !last.to.IsZero() && (o.to.IsZero() || o.to.After(last.to)) {
			last.to = o.to
		}
	}
	return out
}

// firstBlocked is the first instant in [now, end) at which every account
// is out (each a union of outages), and until when: the first of their
// outages then to end (zero if none ends).
func firstBlocked(accts [][]outage, now, end time.Time) (at, until time.Time, ok bool) {
	// All are out at once first at now or where one of them goes out.
	cands := []time.Time{now}
	for _, outs := range accts {
		for _, o := range outs {
			if o.from.After(now) && o.from.Before(end) {
				cands = append(cands, o.from)
			}
		}
	}
	slices.SortFunc(cands, time.Time.Compare)
	for _, t := range cands {
		until, all := time.Time{}, true
		for _, outs := range accts {
			i := slices.IndexFunc(outs, func(o outage) bool { return !o.from.After(t) && !o.endsBy(t) })
			if i < 0 {
				all = false
				break
			}
			if to := outs[i].to; !to.IsZero() && (until.IsZero() || to.Before(until)) {
				until = to
			}
		}
		if all {
			return t, until, true
		}
	}
	return time.Time{}, time.Time{}, false
}
