package backend

import (
	"cmp"
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/rotorproxy/rotor/rotation"
)

// Codex CLI shows its usage limits in /status from the ChatGPT backend's
// GET {chatgpt_base_url}/wham/usage (or /api/codex/usage), which it
// decodes into its RateLimitStatusPayload (codex-rs/backend-client). Linked
// to rotor, Codex asks rotor instead, and rotor answers for the pool as if
// it were one account: the account the next request would get, or, when
// none can serve, the one that comes back first.
//
// The types below are that payload's part rotor fills. Codex requires
// plan_type, allowed and limit_reached, and every field of a window
// (integers: its i32 fields refuse a fraction); everything else is
// optional there and left out here.

// Limits is the body of GET /backend-api/wham/usage: the pool's usage
// limits, in the backend's shape.
type Limits struct {
	// PlanType is the plan of the account shown, as the backend names it
	// (plus, pro, team, ...), or planUnknown.
	PlanType  string       `json:"plan_type"`
	RateLimit *limitStatus `json:"rate_limit"`
	// ReachedType is set only when the pool waits for a usage limit.
	ReachedType *limitReachedType `json:"rate_limit_reached_type,omitempty"`
	// ResetCredits are the pool's banked rate-limit reset credits: the
	// sum of what the accounts' backends last reported (docs/codex.md, docs/selection.md);
	// left out while no account's are known.
	ResetCredits *resetCredits `json:"rate_limit_reset_credits,omitempty"`
	// Credits are the pool's credits (docs/selection.md): has_credits when any
	// live account holds them, the balance the sum of those that report
	// one; left out while no account's are known.
	Credits *creditStatus `json:"credits,omitempty"`
	// Additional are the pool's limits of each family that meters some
	// models on its own (docs/selection.md), each as /status shows the main one.
	Additional []additionalLimit `json:"additional_rate_limits,omitempty"`
}

// creditStatus is the backend's CreditStatusDetails.
type creditStatus struct {
	HasCredits bool    `json:"has_credits"`
	Unlimited  bool    `json:"unlimited"`
	Balance    *string `json:"balance"`
}

// additionalLimit is the backend's AdditionalRateLimitDetails: Codex
// requires both names.
type additionalLimit struct {
	LimitName      string       `json:"limit_name"`
	MeteredFeature string       `json:"metered_feature"`
	RateLimit      *limitStatus `json:"rate_limit"`
}

// live reports whether r's account is in the pool's service.
func live(r *rotation.AccountStatus) bool {
	return r.State != rotation.SkipDisabled && r.State != rotation.SkipFlagged
}

// poolCredits are the credits of rows' live accounts, nil when none's
// are known.
func poolCredits(rows []rotation.AccountStatus) *creditStatus {
	var out *creditStatus
	sum, summed := 0.0, false
	for i := range rows {
		r := &rows[i]
		if r.Quota == nil || r.Quota.Credits == nil || !live(r) {
			continue
		}
		if out == nil {
			out = &creditStatus{}
		}
		c := r.Quota.Credits
		out.HasCredits = out.HasCredits || c.Holds()
		out.Unlimited = out.Unlimited || c.Unlimited
		if amt, ok := c.Amount(); ok {
			sum, summed = sum+amt, true
		}
	}
	if out != nil && summed {
		b := strconv.FormatFloat(sum, 'f', 2, 64)
		out.Balance = &b
	}
	return out
}

// poolFamilies are the pool's limits of every family other than the
// main one that a live account of rows reports: the family as the
// account with the most room for it shows it, of those it does not
// limit; when it limits them all, the one that comes back first, its
// fuller window used up until then.
func poolFamilies(rows []rotation.AccountStatus, now time.Time) []additionalLimit {
	type best struct {
		fam   *rotation.Family
		q     *rotation.Quota
		until time.Time // zero: available
		used  float64
	}
	var order []string
	byID := map[string]*best{}
	for i := range rows {
		r := &rows[i]
		if r.Quota == nil || len(r.Quota.Families) == 0 || !live(r) {
			continue
		}
		for j := range r.Quota.Families {
			f := &r.Quota.Families[j]
			c := best{fam: f, q: r.Quota, used: fuller(f, r.Quota.ObservedAt, now)}
			if until := r.FamilyLimits[f.ID]; until.After(now) {
				c.until = until
			}
			if r.State != "available" && c.until.IsZero() {
				c.until = r.Until // waits for all its models: circuit, cooldown
			}
			b := byID[f.ID]
			switch {
			case b == nil:
				order = append(order, f.ID)
				byID[f.ID] = &c
			case c.until.IsZero() && (!b.until.IsZero() || c.used < b.used),
				!c.until.IsZero() && !b.until.IsZero() && c.until.Before(b.until):
				*b = c
			}
		}
	}
	out := make([]additionalLimit, 0, len(order))
	for _, id := range order {
		b := byID[id]
		st := &limitStatus{Allowed: b.until.IsZero(), LimitReached: !b.until.IsZero()}
		st.Primary = wireWindow(current(b.fam.Primary, b.q.ObservedAt, now), now)
		st.Secondary = wireWindow(current(b.fam.Secondary, b.q.ObservedAt, now), now)
		if st.LimitReached {
			spendWindows(st, b.fam.Primary, b.fam.Secondary, b.q.ObservedAt, b.until, now)
		}
		out = append(out, additionalLimit{LimitName: cmp.Or(b.fam.LimitName, id), MeteredFeature: id, RateLimit: st})
	}
	return out
}

// fuller is the used share of f's fuller window as it stands at now.
func fuller(f *rotation.Family, observed, now time.Time) float64 {
	used := 0.0
	for _, w := range []*rotation.Window{f.Primary, f.Secondary} {
		if c := current(w, observed, now); c != nil {
			used = max(used, c.UsedPercent)
		}
	}
	return used
}

// resetCredits is the backend's rate_limit_reset_credits.
type resetCredits struct {
	AvailableCount int `json:"available_count"`
}

// poolResetCredits sums the reset credits rows' live accounts reported;
// nil when none did.
func poolResetCredits(rows []rotation.AccountStatus) *resetCredits {
	var sum *resetCredits
	for i := range rows {
		r := &rows[i]
		if r.Quota == nil || r.Quota.ResetCredits == nil || r.State == rotation.SkipDisabled || r.State == rotation.SkipFlagged {
			continue
		}
		if sum == nil {
			sum = &resetCredits{}
		}
		sum.AvailableCount += *r.Quota.ResetCredits
	}
	return sum
}

// limitStatus is the backend's RateLimitStatusDetails.
type limitStatus struct {
	// Allowed says whether a request would be served now.
	Allowed bool `json:"allowed"`
	// LimitReached says the pool waits for a usage limit to reset.
	LimitReached bool         `json:"limit_reached"`
	Primary      *limitWindow `json:"primary_window"`
	Secondary    *limitWindow `json:"secondary_window"`
}

// limitWindow is the backend's RateLimitWindowSnapshot.
type limitWindow struct {
	UsedPercent        int   `json:"used_percent"`
	LimitWindowSeconds int   `json:"limit_window_seconds"`
	ResetAfterSeconds  int   `json:"reset_after_seconds"`
	ResetAt            int64 `json:"reset_at"` // unix seconds
}

// limitReachedType is the backend's RateLimitReachedType.
type limitReachedType struct {
	Type string `json:"type"`
}

// planUnknown is the plan Codex reads as unknown, for an account whose plan
// rotor never learned (an API key, or no answer seen yet).
const planUnknown = "unknown"

// Body is u as the backend's JSON body.
func (u *Limits) Body() []byte {
	b, err := json.Marshal(u)
	if err != nil { // plain structs of strings and numbers: cannot happen
		panic(err)
	}
	return b
}

// LimitsOf is the pool's usage limits at now, as sel sees them: the plan and windows of
// the account Selector.Next would pick; when none can serve, those of the
// account Selector.Explain says comes back first (the pinned one under a
// pin), with, when it waits for a usage limit, its fuller window shown
// used up until the moment it comes back. shown is the index of the
// account whose limits these are as they stand, 0 when none's are.
func LimitsOf(sel *rotation.Selector, now time.Time) (u Limits, shown int) {
	rows := sel.Status()
	if i, _ := sel.Next(); i > 0 && i <= len(rows) && rows[i-1].State == "available" {
		r := &rows[i-1]
		return Limits{PlanType: planOf(r), RateLimit: windowsOf(r.Quota, now, &limitStatus{Allowed: true}),
			ResetCredits: poolResetCredits(rows), Credits: poolCredits(rows), Additional: poolFamilies(rows, now)}, i
	}
	// Next names a process-pinned account even when it cannot serve; the
	// refusal says why and until when, as the proxy itself would answer.
	ref := sel.Explain(&rotation.Request{})
	st := &limitStatus{LimitReached: ref.AllRateLimited}
	var back *rotation.AccountStatus
	switch {
	case ref.Pinned:
		st.LimitReached = ref.PinReason == rotation.SkipRateLimited
		if ref.PinnedIndex > 0 && ref.PinnedIndex <= len(rows) {
			back = &rows[ref.PinnedIndex-1]
		}
	case !ref.ResetAt.IsZero():
		back = comesBackAt(rows, ref.ResetAt)
	}
	out := Limits{PlanType: planUnknown, RateLimit: st, ResetCredits: poolResetCredits(rows),
		Credits: poolCredits(rows), Additional: poolFamilies(rows, now)}
	q := ref.SoonestQuota
	if back != nil {
		out.PlanType, q = planOf(back), back.Quota
	}
	windowsOf(q, now, st)
	st.LimitReached = st.LimitReached && !ref.ResetAt.IsZero()
	if st.LimitReached {
		out.ReachedType = &limitReachedType{Type: cmp.Or(ref.LimitReason, "rate_limit_reached")}
		spend(st, q, ref.ResetAt, now)
	}
	return out, 0
}

// comesBackAt is the row of the live account whose wait ends at, nil if
// none does (the pool changed in between).
func comesBackAt(rows []rotation.AccountStatus, at time.Time) *rotation.AccountStatus {
	for i := range rows {
		if rows[i].State != rotation.SkipDisabled && rows[i].State != rotation.SkipFlagged && rows[i].Until.Equal(at) {
			return &rows[i]
		}
	}
	return nil
}

// planOf is the plan of r's account: the one its last answer named, else
// the one its sign-in named, else planUnknown.
func planOf(r *rotation.AccountStatus) string {
	if r.Quota != nil && r.Quota.PlanType != "" {
		return r.Quota.PlanType
	}
	if r.Account.PlanType != "" {
		return r.Account.PlanType
	}
	return planUnknown
}

// windowsOf fills st's windows from q as they stand at now, and returns st.
func windowsOf(q *rotation.Quota, now time.Time, st *limitStatus) *limitStatus {
	if q == nil {
		return st
	}
	st.Primary = wireWindow(current(q.Primary, q.ObservedAt, now), now)
	st.Secondary = wireWindow(current(q.Secondary, q.ObservedAt, now), now)
	return st
}

// spend shows the pool waiting for a usage limit that resets at: the fuller
// of q's windows as it stands at now (the primary on a tie, or a primary of
// unknown length when q has none) is used up until then. The other window
// stays as last seen: the account waits for one window, not both.
func spend(st *limitStatus, q *rotation.Quota, at, now time.Time) {
	if q == nil {
		spendWindows(st, nil, nil, time.Time{}, at, now)
		return
	}
	spendWindows(st, q.Primary, q.Secondary, q.ObservedAt, at, now)
}

// spendWindows is spend for the windows primary and secondary, last seen
// at observed.
func spendWindows(st *limitStatus, primary, secondary *rotation.Window, observed, at, now time.Time) {
	p, s := current(primary, observed, now), current(secondary, observed, now)
	w, slot := p, &st.Primary
	if s != nil && (p == nil || s.UsedPercent > p.UsedPercent) {
		w, slot = s, &st.Secondary
	}
	full := rotation.Window{UsedPercent: 100, ResetsAt: at}
	if w != nil {
		full.WindowMinutes = w.WindowMinutes
	}
	*slot = wireWindow(&full, now)
}

// current is w, last seen at observed, as it stands at now. A window whose
// reset rotor never heard of ends within its length of being seen. One
// that has reset since has started again empty, and the new one ends no
// sooner than its length from now (it starts with the next request).
func current(w *rotation.Window, observed, now time.Time) *rotation.Window {
	if w == nil {
		return nil
	}
	c := *w
	length := time.Duration(c.WindowMinutes) * time.Minute
	if c.ResetsAt.IsZero() && length > 0 && !observed.IsZero() {
		c.ResetsAt = observed.Add(length)
	}
	if !c.ResetsAt.IsZero() && !c.ResetsAt.After(now) {
		c.UsedPercent, c.ResetsAt = 0, time.Time{}
		if length > 0 {
			c.ResetsAt = now.Add(length)
		}
	}
	return &c
}

// wireWindow is w in the backend's shape; nil when w is nil or its reset
// is unknown, which Codex cannot read.
func wireWindow(w *rotation.Window, now time.Time) *limitWindow {
	if w == nil || w.ResetsAt.IsZero() {
		return nil
	}
	return &limitWindow{
		UsedPercent:        int(math.Round(min(max(w.UsedPercent, 0), 100))),
		LimitWindowSeconds: max(w.WindowMinutes, 0) * 60,
		ResetAfterSeconds:  max(int(math.Ceil(w.ResetsAt.Sub(now).Seconds())), 0),
		ResetAt:            w.ResetsAt.Unix(),
	}
}
