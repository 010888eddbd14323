package proxy

import (
	"math"
	"strconv"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/rotation"
)

// parseQuota reads the x-codex-primary-* / x-codex-secondary-* headers and
// x-codex-plan-type (SPEC §5); nil when the answer carries none.
func parseQuota(now time.Time, h *fasthttp.ResponseHeader) *rotation.Quota {
	p := parseWindow(now, h, &primaryHeaders)
	sec := parseWindow(now, h, &secondaryHeaders)
	plan := string(h.Peek("x-codex-plan-type"))
	if p == nil && sec == nil && plan == "" {
		return nil
	}
	return &rotation.Quota{Primary: p, Secondary: sec, PlanType: plan, ObservedAt: now}
}

// windowHeaders names the headers of one quota window.
type windowHeaders struct{ used, minutes, resetAt, resetAfter string }

var (
	primaryHeaders   = windowHeaders{"x-codex-primary-used-percent", "x-codex-primary-window-minutes", "x-codex-primary-reset-at", "x-codex-primary-reset-after-seconds"}
	secondaryHeaders = windowHeaders{"x-codex-secondary-used-percent", "x-codex-secondary-window-minutes", "x-codex-secondary-reset-at", "x-codex-secondary-reset-after-seconds"}
)

func parseWindow(now time.Time, h *fasthttp.ResponseHeader, names *windowHeaders) *rotation.Window {
	used := h.Peek(names.used)
	if len(used) == 0 {
		return nil
	}
	u, err := strconv.ParseFloat(string(used), 64)
	if err != nil {
		return nil
	}
	w := &rotation.Window{UsedPercent: u}
	if v, err := strconv.Atoi(string(h.Peek(names.minutes))); err == nil {
		w.WindowMinutes = v
	}
	if v, err := strconv.ParseInt(string(h.Peek(names.resetAt)), 10, 64); err == nil && v > 0 {
		w.ResetsAt = time.Unix(v, 0)
	} else if v, err := strconv.ParseFloat(string(h.Peek(names.resetAfter)), 64); err == nil {
		w.ResetsAt = afterUnits(now, v, time.Second)
	}
	return w
}

// quotaFromEvent reads a codex.rate_limits SSE event's data.
func quotaFromEvent(now time.Time, data []byte) *rotation.Quota {
	rl := gjson.GetBytes(data, "rate_limits")
	if !rl.Exists() {
		return nil
	}
	q := &rotation.Quota{PlanType: gjson.GetBytes(data, "plan_type").String(), ObservedAt: now}
	for _, k := range []string{"primary", "secondary"} {
		w := rl.Get(k)
		if !w.IsObject() {
			continue
		}
		win := &rotation.Window{UsedPercent: w.Get("used_percent").Float(), WindowMinutes: int(w.Get("window_minutes").Int())}
		if at := w.Get("reset_at").Int(); at > 0 {
			win.ResetsAt = time.Unix(at, 0)
		} else if after := w.Get("reset_after_seconds").Float(); after > 0 {
			win.ResetsAt = afterUnits(now, after, time.Second)
		}
		if k == "primary" {
			q.Primary = win
		} else {
			q.Secondary = win
		}
	}
	return q
}

// setQuotaHeaders writes q back as the x-codex-* headers parseQuota reads,
// as the Codex backend sends them, so that a client such as Codex CLI can
// show its own usage-limit banner for the account rotor waits on.
func setQuotaHeaders(h HeaderSetter, now time.Time, q *rotation.Quota) {
	if q == nil {
		return
	}
	for _, w := range []struct {
		win   *rotation.Window
		names *windowHeaders
	}{{q.Primary, &primaryHeaders}, {q.Secondary, &secondaryHeaders}} {
		if w.win == nil {
			continue
		}
		h.Set(w.names.used, strconv.FormatFloat(w.win.UsedPercent, 'f', -1, 64))
		if w.win.WindowMinutes > 0 {
			h.Set(w.names.minutes, strconv.Itoa(w.win.WindowMinutes))
		}
		if !w.win.ResetsAt.IsZero() {
			h.Set(w.names.resetAt, strconv.FormatInt(w.win.ResetsAt.Unix(), 10))
			h.Set(w.names.resetAfter, strconv.FormatInt(max(int64(w.win.ResetsAt.Sub(now).Seconds()), 0), 10))
		}
	}
	if q.PlanType != "" {
		h.Set("x-codex-plan-type", q.PlanType)
	}
}

// afterUnits is now plus v units, as an upstream states a wait or a time
// to a reset: as far as a Duration goes when it cannot hold them (the
// runtime then caps it), unknown (zero) for NaN.
func afterUnits(now time.Time, v float64, unit time.Duration) time.Time {
	if math.IsNaN(v) {
		return time.Time{}
	}
	return now.Add(rotation.Span(v, unit))
}
