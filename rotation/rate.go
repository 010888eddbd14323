package rotation

import "time"

// Rates of use (docs/dashboard.md, docs/selection.md). The forecast says when an account runs out
// at the rate it has been using its quota lately, so each window's recent
// observations are kept beside the snapshot they led to: the rate is the
// rise of the used percentage between the newest observation and one about
// a rate span earlier. The history lives in Quota, so it travels through
// state.json with the snapshot it belongs to and merges the way the
// snapshot does (the newer observation wins, whole): every process and
// every command sees the same rate.
//
// The span is a fifth of the window: the last hour of a 5-hour window, the
// last day and a half of a weekly one. A weekly window fills at the pace of
// whole days, nights included, so its last hour would say little; and the
// backend reports whole percentages, so a short span on a long window would
// mostly read zero.
const (
	// rateSpanShare: the span is 1/rateSpanShare of the window.
	rateSpanShare = 5
	// defaultRateSpan is the span of a window whose length is unknown: that
	// of a 5-hour window.
	defaultRateSpan = time.Hour
	// rateSteps is how many samples a span holds at most: a new sample is
	// kept only a twelfth of a span after the last one (5 minutes for a
	// 5-hour window, as often as the usage reader looks), and a rate needs
	// that much time between its two ends, so that answers a second apart
	// cannot make a whole percentage a huge rate.
	rateSteps = 12
	// maxSamples bounds a window's history whatever the clock does.
	maxSamples = 16
	// resetSlack is how far apart two reset times of the same window may
	// be: one computed from reset-after seconds moves with the clock of the
	// answer. A new window resets at least its length later.
	resetSlack = 2 * time.Minute
	// usedSlack is how far the used percentage may fall within a window:
	// the headers and the usage read round differently. A bigger fall is
	// a reset (an early one keeps nothing of the old window).
	usedSlack = 1.0
)

// Sample is one observation of a window's use.
type Sample struct {
	At   time.Time `json:"at"`
	Used float64   `json:"used"`
}

// QuotaHistory is the recent observations of each window of a Quota,
// oldest first, all within the window that Quota reports.
type QuotaHistory struct {
	Primary   []Sample `json:"primary,omitempty"`
	Secondary []Sample `json:"secondary,omitempty"`
}

// window returns q's primary (0) or secondary (1) window.
func (q *Quota) window(i int) *Window {
	if i == 0 {
		return q.Primary
	}
	return q.Secondary
}

// samples returns the history of window i.
func (h *QuotaHistory) samples(i int) []Sample {
	if h == nil {
		return nil
	}
	if i == 0 {
		return h.Primary
	}
	return h.Secondary
}

// rateSpan is how far back a window's rate looks.
func rateSpan(w *Window) time.Duration {
	if w.WindowMinutes <= 0 {
		return defaultRateSpan
	}
	return time.Duration(w.WindowMinutes) * time.Minute / rateSpanShare
}

// learnHistory is the history of q, the snapshot that follows prev: for
// each window of q, prev's history when q continues prev's window, with
// q's observation added. A window that reset starts over. Histories are
// shared between snapshots, never changed in place.
func learnHistory(prev, q *Quota) *QuotaHistory {
	var h QuotaHistory
	for i, out := range [2]*[]Sample{&h.Primary, &h.Secondary} {
		w := q.window(i)
		if w == nil {
			continue
		}
		var old []Sample
		if prev != nil && sameWindow(prev.window(i), w, q.ObservedAt) {
			old = prev.History.samples(i)
		}
		*out = addSample(old, Sample{At: q.ObservedAt, Used: w.UsedPercent}, rateSpan(w))
	}
	switch {
	case h.Primary == nil && h.Secondary == nil:
		return nil
	case prev != nil && prev.History != nil && sameSamples(h.Primary, prev.History.Primary) && sameSamples(h.Secondary, prev.History.Secondary):
		return prev.History // most answers add no sample: share, do not allocate
	}
	return &h
}

// sameSamples reports whether a and b are the same slice.
func sameSamples(a, b []Sample) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// sameWindow reports whether w, observed at at, is the window prev was:
// same length and reset time (within slack), prev's reset not passed, and
// the use not fallen. Unknown lengths and reset times do not tell.
func sameWindow(prev, w *Window, at time.Time) bool {
	switch {
	case prev == nil:
		return false
	case prev.WindowMinutes > 0 && w.WindowMinutes > 0 && prev.WindowMinutes != w.WindowMinutes:
		return false
	case !prev.ResetsAt.IsZero() && !prev.ResetsAt.After(at):
		return false // it reset in between
	case !prev.ResetsAt.IsZero() && !w.ResetsAt.IsZero() && prev.ResetsAt.Sub(w.ResetsAt).Abs() > resetSlack:
		return false
	}
	return w.UsedPercent >= prev.UsedPercent-usedSlack
}

// addSample returns h with s added, when s is a step after h's last
// sample; the samples a span older than s that the rate no longer needs
// are dropped, so a history holds about rateSteps+1 samples.
func addSample(h []Sample, s Sample, span time.Duration) []Sample {
	if n := len(h); n > 0 && s.At.Sub(h[n-1].At) < span/rateSteps {
		return h // the snapshot's own figures are the newer point
	}
	from := 0
	for from+1 < len(h) && !h[from+1].At.After(s.At.Add(-span)) {
		from++
	}
	h = h[from:]
	if len(h) >= maxSamples {
		h = h[len(h)-maxSamples+1:]
	}
	return append(append(make([]Sample, 0, len(h)+1), h...), s)
}

// rate is window i's recent rate of use at now, in percent of the window
// per hour: from the sample about a span before the snapshot (else the
// oldest) to the snapshot. It is unknown (ok false), never guessed as
// zero, when the window has reset since, when the snapshot is older than
// a span (not recent), when the two ends are less than a step apart (one
// observation), and when the use did not rise (no use).
func (q *Quota) rate(i int, now time.Time) (perHour float64, ok bool) {
	w := q.window(i)
	if w == nil || (!w.ResetsAt.IsZero() && !w.ResetsAt.After(now)) {
		return 0, false
	}
	span := rateSpan(w)
	h := q.History.samples(i)
	if len(h) == 0 || now.Sub(q.ObservedAt) > span {
		return 0, false
	}
	base := h[0]
	for _, s := range h[1:] {
		if !s.At.After(q.ObservedAt.Add(-span)) {
			base = s
		}
	}
	dt := q.ObservedAt.Sub(base.At)
	if dt < span/rateSteps || w.UsedPercent <= base.Used {
		return 0, false
	}
	return (w.UsedPercent - base.Used) / dt.Hours(), true
}

// RecentRates are q's windows' recent rates of use at now, in percent of
// the window per hour; nil where unknown (see rate). q may be nil.
func (q *Quota) RecentRates(now time.Time) (primary, secondary *float64) {
	if q == nil {
		return nil, nil
	}
	out := [2]*float64{}
	for i := range out {
		if r, ok := q.rate(i, now); ok {
			out[i] = &r
		}
	}
	return out[0], out[1]
}
