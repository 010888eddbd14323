package backend

import (
	"bytes"
	"cmp"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/proxy/sse"
	"github.com/rotorproxy/rotor/rotation"
)

// ParseQuota reads what an answer's headers say of the account's meter
// (docs/accounts.md, docs/selection.md): the main windows (x-codex-primary-* / -secondary-*),
// every other limit family (x-<id>-primary-used-percent ... with
// x-<id>-limit-name), the credits (x-codex-credits-*) and the plan; nil
// when the answer carries none of it.
func ParseQuota(now time.Time, h *fasthttp.ResponseHeader) *rotation.Quota {
	return parseQuota(&lazyNow{t: now}, h)
}

// QuotaOf is ParseQuota at c's present, which it reads only for an
// answer that says something of the meter: an API key's says nothing,
// and every answer is asked.
func QuotaOf(c clock.Clock, h *fasthttp.ResponseHeader) *rotation.Quota {
	return parseQuota(&lazyNow{c: c}, h)
}

// lazyNow is the present, read from c the first time it is needed (t
// set: that time, fixed).
type lazyNow struct {
	c clock.Clock
	t time.Time
}

func (l *lazyNow) now() time.Time {
	if l.c != nil && l.t.IsZero() {
		l.t = l.c.Now()
	}
	return l.t
}

func parseQuota(now *lazyNow, h *fasthttp.ResponseHeader) *rotation.Quota {
	p := parseWindow(now, h, &primaryHeaders)
	sec := parseWindow(now, h, &secondaryHeaders)
	plan := string(h.Peek("x-codex-plan-type"))
	credits := parseCredits(h)
	var fams []rotation.Family
	for k := range h.All() {
		if id, ok := familyHeader(k); ok && len(fams) < maxHeaderFamilies {
			if f := parseFamily(now, h, id); f != nil {
				fams = append(fams, *f)
			}
		}
	}
	if p == nil && sec == nil && plan == "" && credits == nil && fams == nil {
		return nil
	}
	return &rotation.Quota{Primary: p, Secondary: sec, PlanType: plan, ObservedAt: now.now(), Credits: credits, Families: fams}
}

// maxHeaderFamilies bounds the families read from one answer.
const maxHeaderFamilies = 16

// familyHeader reports whether the header k is a limit family's
// x-<id>-primary-used-percent other than the main one's, and its prefix
// in lower case. It allocates only for such a header: it sees every
// header of every answer.
func familyHeader(k []byte) (prefix string, ok bool) {
	const suffix = "-primary-used-percent"
	n := len(k) - len(suffix)
	if n <= 2 || !bytes.EqualFold(k[n:], []byte(suffix)) || !bytes.EqualFold(k[:2], []byte("x-")) ||
		bytes.EqualFold(k[:n], []byte("x-codex")) {
		return "", false
	}
	return strings.ToLower(string(k[:n])), true
}

// windowHeaders names the headers of one quota window.
type windowHeaders struct{ used, minutes, resetAt, resetAfter string }

var (
	primaryHeaders   = windowHeaders{"x-codex-primary-used-percent", "x-codex-primary-window-minutes", "x-codex-primary-reset-at", "x-codex-primary-reset-after-seconds"}
	secondaryHeaders = windowHeaders{"x-codex-secondary-used-percent", "x-codex-secondary-window-minutes", "x-codex-secondary-reset-at", "x-codex-secondary-reset-after-seconds"}
)

func parseWindow(now *lazyNow, h *fasthttp.ResponseHeader, names *windowHeaders) *rotation.Window {
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
		w.ResetsAt = afterUnits(now.now(), v, time.Second)
	}
	return w
}

// parseFamily reads the family whose headers start with prefix.
func parseFamily(now *lazyNow, h *fasthttp.ResponseHeader, prefix string) *rotation.Family {
	names := func(slot string) *windowHeaders {
		return &windowHeaders{prefix + "-" + slot + "-used-percent", prefix + "-" + slot + "-window-minutes",
			prefix + "-" + slot + "-reset-at", prefix + "-" + slot + "-reset-after-seconds"}
	}
	f := &rotation.Family{ID: rotation.NormalizeFamily(prefix[2:]), LimitName: strings.TrimSpace(string(h.Peek(prefix + "-limit-name"))),
		Primary: parseWindow(now, h, names("primary")), Secondary: parseWindow(now, h, names("secondary"))}
	if f.Primary == nil && f.Secondary == nil {
		return nil
	}
	return f
}

// creditsHeaders names the headers of an account's credits.
var creditsHeaders = struct{ has, unlimited, balance string }{
	"x-codex-credits-has-credits", "x-codex-credits-unlimited", "x-codex-credits-balance"}

// parseCredits reads the x-codex-credits-* headers, as Codex does: both
// booleans must be there ("true"/"false"/"1"/"0"), else nil.
func parseCredits(h *fasthttp.ResponseHeader) *rotation.Credits {
	has, ok1 := parseBool(h.Peek(creditsHeaders.has))
	unlimited, ok2 := parseBool(h.Peek(creditsHeaders.unlimited))
	if !ok1 || !ok2 {
		return nil
	}
	return &rotation.Credits{HasCredits: has, Unlimited: unlimited, Balance: strings.TrimSpace(string(h.Peek(creditsHeaders.balance)))}
}

func parseBool(v []byte) (value, ok bool) {
	switch {
	case bytes.EqualFold(v, []byte("true")), string(v) == "1":
		return true, true
	case bytes.EqualFold(v, []byte("false")), string(v) == "0":
		return false, true
	}
	return false, false
}

// LimitOf reads a usage limit's answer: when it ends (resetTime), the
// family that metered the request (x-codex-active-limit; "" when the
// answer does not say), and the backend's reached type.
func LimitOf(now time.Time, h *fasthttp.ResponseHeader, body []byte) rotation.Limit {
	l := rotation.Limit{Until: resetTime(now, h, body), Reason: reachedType(h, body)}
	if v := strings.TrimSpace(string(h.Peek("x-codex-active-limit"))); v != "" {
		l.Family = rotation.NormalizeFamily(v)
	}
	return l
}

// resetTime reads when a usage limit ends, from the first signal present:
// retry-after-ms, retry-after (seconds or HTTP date), the body's resets_at,
// resets_in_seconds or retry_after_ms, then the x-codex-*-reset-at headers
// of a full window. Zero means unknown (the caller applies the default).
func resetTime(now time.Time, h *fasthttp.ResponseHeader, body []byte) time.Time {
	if v := h.Peek("retry-after-ms"); len(v) > 0 {
		if ms, err := strconv.ParseFloat(string(v), 64); err == nil && ms > 0 {
			return afterUnits(now, ms, time.Millisecond)
		}
	}
	if v := h.Peek("Retry-After"); len(v) > 0 {
		if sec, err := strconv.ParseFloat(string(v), 64); err == nil && sec > 0 {
			return afterUnits(now, sec, time.Second)
		}
		if t, err := fasthttp.ParseHTTPDate(v); err == nil && t.After(now) {
			return t
		}
	}
	for _, prefix := range []string{"error.", ""} {
		if v := gjson.GetBytes(body, prefix+"resets_at"); v.Exists() && v.Int() > 0 {
			return time.Unix(v.Int(), 0)
		}
		if v := gjson.GetBytes(body, prefix+"resets_in_seconds"); v.Exists() && v.Float() > 0 {
			return afterUnits(now, v.Float(), time.Second)
		}
		if v := gjson.GetBytes(body, prefix+"retry_after_ms"); v.Exists() && v.Float() > 0 {
			return afterUnits(now, v.Float(), time.Millisecond)
		}
	}
	if q := ParseQuota(now, h); q != nil {
		var latest time.Time
		for _, w := range []*rotation.Window{q.Primary, q.Secondary} {
			if w != nil && w.UsedPercent >= 100 && w.ResetsAt.After(latest) {
				latest = w.ResetsAt
			}
		}
		if !latest.IsZero() {
			return latest
		}
	}
	return time.Time{}
}

// reachedType is the backend's rate-limit reached type of an answer: its
// x-codex-rate-limit-reached-type header, else its body's.
func reachedType(h *fasthttp.ResponseHeader, body []byte) string {
	if v := strings.TrimSpace(string(h.Peek("x-codex-rate-limit-reached-type"))); v != "" {
		return v
	}
	for _, path := range []string{"error.rate_limit_reached_type.type", "rate_limit_reached_type.type", "error.rate_limit_reached_type"} {
		if v := gjson.GetBytes(body, path); v.Type == gjson.String && v.Str != "" {
			return v.Str
		}
	}
	return ""
}

// EventQuota is the account's quota a codex.rate_limits event reports,
// nil for any other event. It reads clk only for that one: it runs on
// every event of every stream.
func EventQuota(e sse.Event, clk clock.Clock) *rotation.Quota {
	if e.Type != "codex.rate_limits" {
		return nil
	}
	return quotaFromEvent(clk.Now(), e.Data)
}

// quotaFromEvent reads a codex.rate_limits SSE event's data: its windows
// are the main family's, or those of the family its metered_limit_name
// (or limit_name) names; its credits the account's.
func quotaFromEvent(now time.Time, data []byte) *rotation.Quota {
	rl := gjson.GetBytes(data, "rate_limits")
	credits := eventCredits(gjson.GetBytes(data, "credits"))
	if !rl.Exists() && credits == nil {
		return nil
	}
	q := &rotation.Quota{PlanType: gjson.GetBytes(data, "plan_type").String(), ObservedAt: now, Credits: credits}
	p, sec := eventWindowOf(now, rl.Get("primary")), eventWindowOf(now, rl.Get("secondary"))
	id := rotation.NormalizeFamily(cmp.Or(gjson.GetBytes(data, "metered_limit_name").Str, gjson.GetBytes(data, "limit_name").Str))
	if id == rotation.MainFamily {
		q.Primary, q.Secondary = p, sec
	} else if p != nil || sec != nil {
		q.Families = []rotation.Family{{ID: id, Primary: p, Secondary: sec}}
	}
	return q
}

// eventWindowOf reads one window of a codex.rate_limits event.
func eventWindowOf(now time.Time, w gjson.Result) *rotation.Window {
	if !w.IsObject() {
		return nil
	}
	win := &rotation.Window{UsedPercent: w.Get("used_percent").Float(), WindowMinutes: int(w.Get("window_minutes").Int())}
	if at := w.Get("reset_at").Int(); at > 0 {
		win.ResetsAt = time.Unix(at, 0)
	} else if after := w.Get("reset_after_seconds").Float(); after > 0 {
		win.ResetsAt = afterUnits(now, after, time.Second)
	}
	return win
}

// eventCredits reads a credits object (an event's, a usage read's); nil
// when c is not one.
func eventCredits(c gjson.Result) *rotation.Credits {
	if !c.IsObject() || !c.Get("has_credits").Exists() {
		return nil
	}
	out := &rotation.Credits{HasCredits: c.Get("has_credits").Bool(), Unlimited: c.Get("unlimited").Bool()}
	if b := c.Get("balance"); b.Type == gjson.String || b.Type == gjson.Number {
		out.Balance = strings.TrimSpace(b.String())
	}
	return out
}

// SetQuotaHeaders writes q back as the x-codex-* headers ParseQuota reads,
// as the Codex backend sends them, so that a client such as Codex CLI can
// show its own usage-limit banner for the account rotor waits on: the
// main windows, every other family's (with the model it meters) and the
// credits.
func SetQuotaHeaders(h HeaderSetter, now time.Time, q *rotation.Quota) {
	if q == nil {
		return
	}
	setWindowHeaders(h, now, q.Primary, &primaryHeaders)
	setWindowHeaders(h, now, q.Secondary, &secondaryHeaders)
	for i := range q.Families {
		f := &q.Families[i]
		prefix := "x-" + strings.ReplaceAll(f.ID, "_", "-")
		names := func(slot string) *windowHeaders {
			return &windowHeaders{prefix + slot + "-used-percent", prefix + slot + "-window-minutes",
				prefix + slot + "-reset-at", prefix + slot + "-reset-after-seconds"}
		}
		setWindowHeaders(h, now, f.Primary, names("-primary"))
		setWindowHeaders(h, now, f.Secondary, names("-secondary"))
		if f.LimitName != "" {
			h.Set(prefix+"-limit-name", f.LimitName)
		}
	}
	if c := q.Credits; c != nil {
		h.Set(creditsHeaders.has, strconv.FormatBool(c.HasCredits))
		h.Set(creditsHeaders.unlimited, strconv.FormatBool(c.Unlimited))
		if c.Balance != "" {
			h.Set(creditsHeaders.balance, c.Balance)
		}
	}
	if q.PlanType != "" {
		h.Set("x-codex-plan-type", q.PlanType)
	}
}

// setWindowHeaders writes w as the headers names, nothing for nil.
func setWindowHeaders(h HeaderSetter, now time.Time, w *rotation.Window, names *windowHeaders) {
	if w == nil {
		return
	}
	h.Set(names.used, strconv.FormatFloat(w.UsedPercent, 'f', -1, 64))
	if w.WindowMinutes > 0 {
		h.Set(names.minutes, strconv.Itoa(w.WindowMinutes))
	}
	if !w.ResetsAt.IsZero() {
		h.Set(names.resetAt, strconv.FormatInt(w.ResetsAt.Unix(), 10))
		h.Set(names.resetAfter, strconv.FormatInt(max(int64(w.ResetsAt.Sub(now).Seconds()), 0), 10))
	}
}

// tellsMeter reports whether h tells of the account's meter: its main
// windows or its credits.
func tellsMeter(h *fasthttp.ResponseHeader) bool {
	return len(h.Peek(primaryHeaders.used)) > 0 || len(h.Peek(secondaryHeaders.used)) > 0 ||
		len(h.Peek(creditsHeaders.has)) > 0
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

// afterUnits is now plus v units, as an upstream states a wait or a time
// to a reset: as far as a Duration goes when it cannot hold them (the
// runtime then caps it), unknown (zero) for NaN.
func afterUnits(now time.Time, v float64, unit time.Duration) time.Time {
	if math.IsNaN(v) {
		return time.Time{}
	}
	return now.Add(rotation.Span(v, unit))
}
