package proxy

import (
	"bytes"
	"encoding/json"
	"math"
	"time"

	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"

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
	// sum of what the accounts' backends last reported (SPEC §14, §15);
	// left out while no account's are known.
	ResetCredits *resetCredits `json:"rate_limit_reset_credits,omitempty"`
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
	if i, _ := sel.Next(); i > 0 && i <= len(rows) && rows[i-1].State == "available" {
		r := &rows[i-1]
		return usageLimits{PlanType: planOf(r), RateLimit: windowsOf(r.Quota, now, &limitStatus{Allowed: true}),
			ResetCredits: poolResetCredits(rows)}, i
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
	out := usageLimits{PlanType: planUnknown, RateLimit: st, ResetCredits: poolResetCredits(rows)}
	q := ref.SoonestQuota
	if back != nil {
		out.PlanType, q = planOf(back), back.Quota
	}
	windowsOf(q, now, st)
	st.LimitReached = st.LimitReached && !ref.ResetAt.IsZero()
	if st.LimitReached {
		out.ReachedType = &limitReachedType{Type: "rate_limit_reached"}
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
	var p, s *rotation.Window
	if q != nil {
		p, s = current(q.Primary, q.ObservedAt, now), current(q.Secondary, q.ObservedAt, now)
	}
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

// What an answer tells Codex of its limits (SPEC §14): the x-codex-*
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
	told := len(h.Peek(primaryHeaders.used)) > 0 || len(h.Peek(secondaryHeaders.used)) > 0
	events := bytes.Contains(ans.pending, []byte(`"codex.rate_limits"`))
	if !told && !events {
		return false
	}
	now := s.deps.Clock.Now()
	if events {
		// The account's own quota first: the pool's view is made with it.
		learnRateLimits(ans.pending, func(q *rotation.Quota) { s.runtime().SetQuota(ch.Account.ID, *q) }, now)
	}
	if next, _ := s.deps.Selector.Next(); next == ch.Index {
		return events // the serving account is the pool's view: nothing to rewrite
	}
	u, shown := usageLimitsOf(s.deps.Selector, now)
	if shown == ch.Index {
		return events
	}
	if told {
		for _, names := range []*windowHeaders{&primaryHeaders, &secondaryHeaders} {
			for _, k := range []string{names.used, names.minutes, names.resetAt, names.resetAfter} {
				h.Del(k)
			}
		}
		setQuotaHeaders(h, now, quotaOf(u, now))
	}
	if events {
		held := ans.pending
		ans.pending = rewriteRateLimits(held, u)
		releaseHeld(held)
	}
	return events
}

// learnRateLimits hands set the quota of every codex.rate_limits event in
// the SSE bytes b.
func learnRateLimits(b []byte, set func(*rotation.Quota), now time.Time) {
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok && viewField(data, "type").Str == "codex.rate_limits" {
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
	ev := eventLimits{}
	if rl := u.RateLimit; rl != nil {
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
	out := make([]byte, 0, len(b)+256)
	for len(b) > 0 {
		line, rest, _ := bytes.Cut(b, []byte{'\n'})
		b = rest
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok && viewField(data, "type").Str == "codex.rate_limits" {
			if edited, err := sjson.SetRawBytes(data, "rate_limits", limits); err == nil {
				if u.PlanType != planUnknown {
					edited, _ = sjson.SetBytes(edited, "plan_type", u.PlanType)
				}
				line = append([]byte("data: "), edited...)
			}
		}
		out = append(append(out, line...), '\n')
	}
	return out
}
