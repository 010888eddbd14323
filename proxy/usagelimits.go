package proxy

import (
	"bytes"
	"cmp"
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/proxy/jsonscan"
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

// usageLimits is the body of GET /backend-api/wham/usage.
type usageLimits struct {
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
// fuller window used up until then. limitedOf is an account's family
// limits.
func poolFamilies(rows []rotation.AccountStatus, limitedOf func(id string) map[string]time.Time, now time.Time) []additionalLimit {
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
		limits := limitedOf(r.Account.ID)
		for j := range r.Quota.Families {
			f := &r.Quota.Families[j]
			c := best{fam: f, q: r.Quota, used: fuller(f, r.Quota.ObservedAt, now)}
			if until := limits[f.ID]; until.After(now) {
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

// answerUsageLimits answers Codex's usage-limits request from the pool.
// It never asks an upstream: /status must answer even when every account
// waits, and the quota every answer carried is already in the runtime state.
func (s *Server) answerUsageLimits(ctx *fasthttp.RequestCtx) {
	u, _ := usageLimitsOf(s.deps.Selector, s.deps.Clock.Now())
	b, err := json.Marshal(u)
	if err != nil { // plain structs of strings and numbers: cannot happen
		panic(err)
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// usageLimitsOf is the pool's usage limits at now: the plan and windows of
// the account Selector.Next would pick; when none can serve, those of the
// account Selector.Explain says comes back first (the pinned one under a
// pin), with, when it waits for a usage limit, its fuller window shown
// used up until the moment it comes back. shown is the index of the
// account whose limits these are as they stand, 0 when none's are.
func usageLimitsOf(sel *rotation.Selector, now time.Time) (u usageLimits, shown int) {
	rows := sel.Status()
	limitedOf := func(id string) map[string]time.Time { return sel.Runtime().Snapshot(id).FamilyLimits }
	if i, _ := sel.Next(); i > 0 && i <= len(rows) && rows[i-1].State == "available" {
		r := &rows[i-1]
		return usageLimits{PlanType: planOf(r), RateLimit: windowsOf(r.Quota, now, &limitStatus{Allowed: true}),
			ResetCredits: poolResetCredits(rows), Credits: poolCredits(rows), Additional: poolFamilies(rows, limitedOf, now)}, i
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
	out := usageLimits{PlanType: planUnknown, RateLimit: st, ResetCredits: poolResetCredits(rows),
		Credits: poolCredits(rows), Additional: poolFamilies(rows, limitedOf, now)}
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

// What an answer tells Codex of its limits (docs/codex.md): the x-codex-*
// headers of an HTTP answer and the codex.rate_limits events ahead of its
// output describe the pool as /status does (usageLimitsOf), not the
// account that served it: Codex stops sending when the limits it was last
// shown are spent, and must not while another account can serve.

// showPoolLimits rewrites what the answer ans of the account of ch tells
// of the limits, when it tells any, to the pool's: its x-codex-* window
// headers, and the codex.rate_limits events it holds back. When the pool
// shows that very account (the one the next request would get), the
// answer goes as it came, and the pool's view is not made. learned says
// the held-back events' own quota is already recorded for the account,
// so the relay need not read it again.
func (s *Server) showPoolLimits(ch *rotation.Choice, ans *answer) (learned bool) {
	h := &ans.resp.Header
	told := len(h.Peek(primaryHeaders.used)) > 0 || len(h.Peek(secondaryHeaders.used)) > 0 ||
		len(h.Peek(creditsHeaders.has)) > 0
	events := bytes.Contains(ans.pending, []byte(`"codex.rate_limits"`))
	if !told && !events {
		return false
	}
	now := s.deps.Clock.Now()
	if events {
		// The account's own quota first: the pool's view is made with it.
		learnRateLimits(ans.pending, func(q *rotation.Quota) { s.runtime().SetQuota(ch.Account.ID, *q) }, now)
	}
	// The serving account's own limits are the pool's when the next
	// request would go to it too, and no other account adds credits or
	// families of its own to what the pool shows.
	alone := !s.othersMetered(ch.Account.ID)
	if next, _ := s.deps.Selector.Next(); next == ch.Index && alone {
		return events // the serving account is the pool's view: nothing to rewrite
	}
	u, shown := usageLimitsOf(s.deps.Selector, now)
	if shown == ch.Index && alone {
		return events
	}
	if told {
		delMeterHeaders(h)
		setQuotaHeaders(h, now, quotaOf(u, now))
	}
	if events {
		held := ans.pending
		ans.pending = rewriteRateLimits(held, u)
		releaseHeld(held)
	}
	return events
}

// othersMetered reports whether a live account other than id has told
// credits or limit families of its own, which the pool's view sums or
// shows.
func (s *Server) othersMetered(id string) bool {
	for _, a := range s.deps.Selector.Pool().Accounts {
		if a.ID != id && a.Enabled && s.runtime().Metered(a.ID) {
			return true
		}
	}
	return false
}

// delMeterHeaders deletes what h tells of the account's meter: its main
// windows, every other family's headers and its credits; the plan and
// the active limit stay.
func delMeterHeaders(h *fasthttp.ResponseHeader) {
	for _, names := range []*windowHeaders{&primaryHeaders, &secondaryHeaders} {
		for _, k := range []string{names.used, names.minutes, names.resetAt, names.resetAfter} {
			h.Del(k)
		}
	}
	var prefixes []string
	for k := range h.All() {
		if prefix, ok := familyHeader(k); ok {
			prefixes = append(prefixes, prefix)
		}
	}
	for _, p := range prefixes {
		for _, slot := range []string{"-primary", "-secondary"} {
			for _, k := range []string{"-used-percent", "-window-minutes", "-reset-at", "-reset-after-seconds"} {
				h.Del(p + slot + k)
			}
		}
		h.Del(p + "-limit-name")
	}
	h.Del(creditsHeaders.has)
	h.Del(creditsHeaders.unlimited)
	h.Del(creditsHeaders.balance)
}

// learnRateLimits hands set the quota of every codex.rate_limits event in
// the SSE bytes b.
func learnRateLimits(b []byte, set func(*rotation.Quota), now time.Time) {
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok && jsonscan.Get(data, "type").Str == "codex.rate_limits" {
			if q := quotaFromEvent(now, data); q != nil {
				set(q)
			}
		}
	}
}

// quotaOf is u as a quota, as setQuotaHeaders writes one.
func quotaOf(u usageLimits, now time.Time) *rotation.Quota {
	q := &rotation.Quota{ObservedAt: now}
	if u.PlanType != planUnknown {
		q.PlanType = u.PlanType
	}
	win := func(w *limitWindow) *rotation.Window {
		if w == nil {
			return nil
		}
		return &rotation.Window{UsedPercent: float64(w.UsedPercent), WindowMinutes: w.LimitWindowSeconds / 60, ResetsAt: time.Unix(w.ResetAt, 0)}
	}
	if u.RateLimit != nil {
		q.Primary, q.Secondary = win(u.RateLimit.Primary), win(u.RateLimit.Secondary)
	}
	for _, a := range u.Additional {
		f := rotation.Family{ID: a.MeteredFeature, LimitName: a.LimitName}
		if a.RateLimit != nil {
			f.Primary, f.Secondary = win(a.RateLimit.Primary), win(a.RateLimit.Secondary)
		}
		q.Families = append(q.Families, f)
	}
	if c := u.Credits; c != nil {
		q.Credits = &rotation.Credits{HasCredits: c.HasCredits, Unlimited: c.Unlimited}
		if c.Balance != nil {
			q.Credits.Balance = *c.Balance
		}
	}
	return q
}

// eventLimits is a codex.rate_limits event's rate_limits, as the backend
// sends it.
type eventLimits struct {
	Allowed      bool         `json:"allowed"`
	LimitReached bool         `json:"limit_reached"`
	Primary      *eventWindow `json:"primary,omitempty"`
	Secondary    *eventWindow `json:"secondary,omitempty"`
}

type eventWindow struct {
	UsedPercent       float64 `json:"used_percent"`
	WindowMinutes     int     `json:"window_minutes"`
	ResetAfterSeconds int     `json:"reset_after_seconds"`
	ResetAt           int64   `json:"reset_at"`
}

// rewriteRateLimits is the held-back SSE bytes b with every
// codex.rate_limits event's rate_limits (and plan_type) those of u; the
// rest of each event, and every other event, as it came.
func rewriteRateLimits(b []byte, u usageLimits) []byte {
	eventOf := func(rl *limitStatus) []byte {
		ev := eventLimits{}
		if rl != nil {
			ev.Allowed, ev.LimitReached = rl.Allowed, rl.LimitReached
			w := func(x *limitWindow) *eventWindow {
				if x == nil {
					return nil
				}
				return &eventWindow{float64(x.UsedPercent), x.LimitWindowSeconds / 60, x.ResetAfterSeconds, x.ResetAt}
			}
			ev.Primary, ev.Secondary = w(rl.Primary), w(rl.Secondary)
		}
		limits, _ := json.Marshal(ev)
		return limits
	}
	main := eventOf(u.RateLimit)
	var credits []byte
	if u.Credits != nil {
		credits, _ = json.Marshal(u.Credits)
	}
	out := make([]byte, 0, len(b)+256)
	for len(b) > 0 {
		line, rest, _ := bytes.Cut(b, []byte{'\n'})
		b = rest
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok && jsonscan.Get(data, "type").Str == "codex.rate_limits" {
			limits := main
			if fam := rotation.NormalizeFamily(cmp.Or(jsonscan.Get(data, "metered_limit_name").Str, jsonscan.Get(data, "limit_name").Str)); fam != rotation.MainFamily {
				limits = nil // a family the pool does not show: left as the account told it
				for i := range u.Additional {
					if u.Additional[i].MeteredFeature == fam {
						limits = eventOf(u.Additional[i].RateLimit)
					}
				}
			}
			edited := data
			if limits != nil {
				edited, _ = sjson.SetRawBytes(edited, "rate_limits", limits)
			}
			if credits != nil {
				edited, _ = sjson.SetRawBytes(edited, "credits", credits)
			}
			if u.PlanType != planUnknown {
				edited, _ = sjson.SetBytes(edited, "plan_type", u.PlanType)
			}
			if edited != nil {
				line = append([]byte("data: "), edited...)
			}
		}
		out = append(append(out, line...), '\n')
	}
	return out
}
