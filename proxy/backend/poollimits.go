package backend

import (
	"bytes"
	"cmp"
	"encoding/json"
	"time"

	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/proxy/jsonscan"
	"github.com/rotorproxy/rotor/rotation"
)

// What an answer tells Codex of its limits (docs/codex.md): the x-codex-*
// headers of an HTTP answer and the codex.rate_limits events ahead of its
// output describe the pool as /status does (LimitsOf), not the
// account that served it: Codex stops sending when the limits it was last
// shown are spent, and must not while another account can serve.

// ShowPool rewrites what an answer of the account of ch tells of the
// limits, when it tells any, to the pool's, as sel shows them: its
// x-codex-* window headers h, and the codex.rate_limits events in held,
// the SSE bytes it holds back. When the pool shows that very account
// (the one the next request would get), the answer goes as it came, and
// the pool's view is not made. It returns the held bytes to send when
// they were rewritten, and learned: the held-back events' own quota is
// recorded for the account.
func ShowPool(sel *rotation.Selector, clk clock.Clock, ch *rotation.Choice, h *fasthttp.ResponseHeader, held []byte) (out []byte, rewritten, learned bool) {
	told := tellsMeter(h)
	events := holdsRateLimits(held)
	if !told && !events {
		return nil, false, false
	}
	now := clk.Now()
	rt := sel.Runtime()
	if events {
		// The account's own quota first: the pool's view is made with it.
		learnRateLimits(held, func(q *rotation.Quota) { rt.SetQuota(ch.Account.ID, *q) }, now)
	}
	// The serving account's own limits are the pool's when the next
	// request would go to it too, and no other account adds credits or
	// families of its own to what the pool shows.
	alone := !othersMetered(sel, ch.Account.ID)
	if next, _ := sel.Next(); next == ch.Index && alone {
		return nil, false, events // the serving account is the pool's view: nothing to rewrite
	}
	u, shown := LimitsOf(sel, now)
	if shown == ch.Index && alone {
		return nil, false, events
	}
	if told {
		delMeterHeaders(h)
		SetQuotaHeaders(h, now, u.quota(now))
	}
	if events {
		return u.rewrite(held), true, events
	}
	return nil, false, events
}

// othersMetered reports whether a live account of sel's pool other than
// id has told credits or limit families of its own, which the pool's
// view sums or shows.
func othersMetered(sel *rotation.Selector, id string) bool {
	rt := sel.Runtime()
	for _, a := range sel.Pool().Accounts {
		if a.ID != id && a.Enabled && rt.Metered(a.ID) {
			return true
		}
	}
	return false
}

// holdsRateLimits reports whether the SSE bytes b may hold a
// codex.rate_limits event; false is certain.
func holdsRateLimits(b []byte) bool { return bytes.Contains(b, []byte(`"codex.rate_limits"`)) }

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

// quota is u as a quota, as SetQuotaHeaders writes one.
func (u *Limits) quota(now time.Time) *rotation.Quota {
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

// rewrite is the held-back SSE bytes b with every codex.rate_limits
// event's rate_limits (and plan_type) those of u; the rest of each
// event, and every other event, as it came.
func (u *Limits) rewrite(b []byte) []byte {
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
