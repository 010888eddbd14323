package proxy

import (
	"bytes"
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/rotation"
)

// outcome is what one upstream attempt came to: a row of SPEC §4's failover
// table.
type outcome int

const (
	outOK outcome = iota
	outUsageLimit
	outEntitlement
	outUnauthorized
	outTokenInvalidated
	outDeactivated
	outBlocked
	outServerError
	outNetworkError
	outUnreachable
	outOverloaded
	outClientError
	outCount
)

// rule is what the failover table says for an outcome: what the account
// gets (account, and a flag in accounts.json for a dead token or
// workspace), whether the request moves on to the next account (rotate),
// and otherwise what the client is told (respond). reason is the
// pool-exhausted reason the outcome stands for.
type rule struct {
	name    string
	reason  string
	account rotation.Outcome
	flag    string // accounts.Flag* to set, "" for none
	disable bool   // with flag: also disable the account
	rotate  bool
	respond func(c *call, index int, res *result) rerr.Spec // index: the account's, as the user numbers it
}

// failover is SPEC §4's failover table, one row per outcome.
var failover = [outCount]rule{
	outOK:           {name: "ok", account: rotation.Served},
	outUsageLimit:   {name: "usage-limit", reason: "rate-limit", account: rotation.Limited, rotate: true},
	outEntitlement:  {name: "entitlement", reason: "entitlement", rotate: true},
	outUnauthorized: {name: "auth-failure", reason: "auth-failure", account: rotation.AuthRejected, rotate: true},
	outTokenInvalidated: {name: "token-invalidated", account: rotation.TokenRevoked, flag: accounts.FlagTokenInvalid,
		respond: func(c *call, index int, res *result) rerr.Spec {
			return rerr.Spec{Code: rerr.TokenInvalidated,
				Message: fmt.Sprintf("the token of account %d was invalidated upstream; it is flagged and will not be used until you log in again (\"rotor login\" or \"rotor import codex\")", index),
				Extra:   []rerr.Field{{Key: "account_index", Value: index}}}
		}},
	outDeactivated: {name: "deactivated", reason: "auth-failure", flag: accounts.FlagDeactivated, disable: true, rotate: true},
	outBlocked: {name: "blocked",
		respond: func(c *call, index int, res *result) rerr.Spec {
			return rerr.Spec{Code: rerr.UpstreamBlocked,
				Message: "the upstream answered with a challenge page (Cloudflare); this is not the account's fault: check your network, VPN or proxy",
				Extra:   []rerr.Field{{Key: "upstream_status", Value: res.status}}}
		}},
	outServerError:  {name: "server-error", reason: "server-error", account: rotation.ServerFault, rotate: true},
	outNetworkError: {name: "network-error", reason: "network-error", account: rotation.NetworkFault, rotate: true},
	// The endpoint is marked down instead (forward): no account behind it
	// is tried, and none is blamed.
	outUnreachable: {name: "unreachable", reason: "network-error", rotate: true},
	outOverloaded: {name: "overloaded",
		respond: func(c *call, index int, res *result) rerr.Spec {
			return rerr.Spec{Code: rerr.ProxyOverloaded, RetryAfter: overloadedRetry,
				Message: "rotor is at its own connection limit; no account is at fault, try again shortly",
				Extra:   []rerr.Field{{Key: "retry_after_ms", Value: overloadedRetry.Milliseconds()}}}
		}},
	outClientError: {name: "client-error", account: rotation.Answered,
		respond: func(c *call, index int, res *result) rerr.Spec {
			return upstreamSpec(res)
		}},
}

// judge applies rule's "account gets" column to the account of ch. A 2xx
// is judged when its answer ends (relay), not here.
func (s *Server) judge(r *rule, ch *rotation.Choice, res *result) {
	if r.account != rotation.Served {
		s.rt().Record(ch.Account.ID, r.account, res.status, res.resetAt)
	}
	if r.flag != "" {
		s.flag(ch.Account.ID, r.flag, r.disable)
	}
}

// overloadedRetry is the wait suggested when rotor's own limits are reached.
const overloadedRetry = time.Second

func (s *Server) rt() *rotation.Runtime { return s.deps.Selector.Runtime() }

// flag records a flag in accounts.json and installs the new pool at once,
// so this process stops using the account before its watcher notices.
func (s *Server) flag(id, reason string, disable bool) {
	if s.deps.Flagger == nil {
		return
	}
	p, err := s.deps.Flagger.Flag(id, reason, disable)
	if err != nil {
		s.deps.Log.Warn().Err(err).Str("account_id", id).Msg("cannot flag account")
		return
	}
	s.deps.Selector.SetPool(p)
}

// classify reads an upstream answer into an outcome. body is at most the
// first 64 KiB of a non-2xx body.
func classify(status int, h *fasthttp.ResponseHeader, body []byte) outcome {
	switch {
	case status >= 200 && status < 300:
		return outOK
	case status == 429:
		return outUsageLimit
	case status == 404:
		codes := errorCodes(body)
		switch {
		case containsAny(codes, "usage_limit", "rate_limit_exceeded"):
			return outUsageLimit
		case containsAny(codes, "usage_not_included") ||
			containsAny(strings.ToLower(string(body)), "not included in your plan", "subscription does not include"):
			return outEntitlement
		}
		return outClientError
	case status == 401:
		if invalidated(body) {
			return outTokenInvalidated
		}
		return outUnauthorized
	case status == 402:
		return outDeactivated
	case status == 403:
		if bytes.Equal(h.Peek("cf-mitigated"), []byte("challenge")) || htmlBody(h, body) {
			return outBlocked
		}
		if containsAny(strings.ToLower(string(body)), "deactivated") {
			return outDeactivated
		}
		return outClientError
	case status >= 500:
		return outServerError
	}
	return outClientError
}

// errorCodes joins the fields upstreams put their error code in, lowercased.
func errorCodes(body []byte) string {
	var b strings.Builder
	for _, path := range []string{"error.code", "error.type", "detail.code", "code", "type"} {
		if v := gjson.GetBytes(body, path); v.Type == gjson.String {
			b.WriteString(strings.ToLower(v.Str))
			b.WriteByte(' ')
		}
	}
	return b.String()
}

func invalidated(body []byte) bool {
	codes := errorCodes(body)
	if containsAny(codes, "token_invalidated", "token_revoked", "invalidated") {
		return true
	}
	msg := strings.ToLower(gjson.GetBytes(body, "error.message").String())
	return containsAny(msg, "invalidated", "revoked")
}

func htmlBody(h *fasthttp.ResponseHeader, body []byte) bool {
	if bytes.HasPrefix(h.ContentType(), []byte("text/html")) {
		return true
	}
	t := bytes.TrimSpace(body)
	return len(t) > 0 && t[0] == '<'
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// resetTime reads when a usage limit ends, from the first signal present:
// retry-after-ms, retry-after (seconds or HTTP date), the body's resets_at,
// resets_in_seconds or retry_after_ms, then the x-codex-*-reset-at headers
// of a full window. Zero means unknown (the caller applies the default).
func resetTime(now time.Time, h *fasthttp.ResponseHeader, body []byte) time.Time {
	if v := h.Peek("retry-after-ms"); len(v) > 0 {
		if ms, err := strconv.ParseFloat(string(v), 64); err == nil && ms > 0 {
			return now.Add(time.Duration(ms * float64(time.Millisecond)))
		}
	}
	if v := h.Peek("Retry-After"); len(v) > 0 {
		if sec, err := strconv.ParseFloat(string(v), 64); err == nil && sec > 0 {
			return now.Add(time.Duration(sec * float64(time.Second)))
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
			return now.Add(time.Duration(v.Float() * float64(time.Second)))
		}
		if v := gjson.GetBytes(body, prefix+"retry_after_ms"); v.Exists() && v.Float() > 0 {
			return now.Add(time.Duration(v.Float() * float64(time.Millisecond)))
		}
	}
	if q := parseQuota(now, h); q != nil {
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

// upstreamSpec normalizes an upstream error the client should see as is:
// the upstream's status and code, its message, and where it came from.
func upstreamSpec(res *result) rerr.Spec {
	body := res.body
	code := gjson.GetBytes(body, "error.code").String()
	if code == "" {
		code = gjson.GetBytes(body, "detail.code").String()
	}
	if code == "" {
		code = "upstream_error"
	}
	msg := ""
	for _, path := range []string{"error.message", "message", "detail"} {
		if v := gjson.GetBytes(body, path); v.Type == gjson.String && v.Str != "" {
			msg = v.Str
			break
		}
	}
	if msg == "" {
		msg = strings.ToValidUTF8(string(body[:min(len(body), 1024)]), "")
	}
	if msg == "" {
		msg = fmt.Sprintf("upstream answered %d", res.status)
	}
	extra := []rerr.Field{{Key: "upstream_status", Value: res.status}, {Key: "upstream_request_id", Value: res.upstreamID}}
	if p := gjson.GetBytes(body, "error.param"); p.Type == gjson.String {
		extra = append(extra, rerr.Field{Key: "param", Value: p.Str})
	}
	return rerr.Spec{
		Code:    code,
		Status:  res.status,
		Type:    gjson.GetBytes(body, "error.type").String(),
		Message: msg,
		Extra:   extra,
	}
}

// exhausted answers a request no account could serve: entitlement when
// every attempt lacked it, the pin's refusal when a pin forbids rotating,
// else the pool-exhausted payload.
func (s *Server) exhausted(c *call, ref *rotation.Refusal) {
	now := s.deps.Clock.Now()
	skips := make(map[string]string, len(ref.SkipReasons))
	untried := false
	for i, r := range ref.SkipReasons {
		if r == "" {
			untried = true // usable, only not tried: the attempt budget ran out, or a pin forbids it
			continue
		}
		skips[strconv.Itoa(i)] = r
	}
	if len(c.outcomes) > 0 && allEntitlement(c.outcomes) {
		s.fail(c.ctx, c.rid, rerr.Spec{Code: rerr.EntitlementError,
			Message: "no account in the pool has access to this (the upstream said it is not included in the plan)",
			Extra:   []rerr.Field{{Key: "upstream_status", Value: 404}}}, c)
		return
	}
	retryMS := ref.RetryAfter.Milliseconds()
	if ref.Pinned {
		var reason any
		if ref.PinReason != "" {
			reason = ref.PinReason
		}
		var resetAt any
		if !ref.ResetAt.IsZero() {
			resetAt = ref.ResetAt.UTC().Format(time.RFC3339)
		}
		cat := ""
		if ref.PinReason == rotation.SkipRateLimited {
			cat = rerr.CategoryRateLimit
		}
		s.fail(c.ctx, c.rid, rerr.Spec{Code: rerr.PinnedUnavailable, Category: cat,
			Message: fmt.Sprintf("the pinned account %d cannot serve now (%s); run \"rotor rotation status\" to see when it comes back, or \"rotor unpin\" to rotate again",
				ref.PinnedIndex, cmp.Or(ref.PinReason, "unknown")),
			RetryAfter: ref.RetryAfter,
			Extra: []rerr.Field{
				{Key: "pinned_account_index", Value: ref.PinnedIndex},
				{Key: "pin_source", Value: ref.PinSource},
				{Key: "reason", Value: reason},
				{Key: "retry_after_ms", Value: retryMS},
				{Key: "reset_at", Value: resetAt},
				{Key: "account_skip_reasons", Value: skips},
			}}, c)
		return
	}
	reason := exhaustionReason(c.outcomes, ref)
	retryAfter := ref.RetryAfter
	if untried {
		// Only this request's attempt budget (--max-attempts) is spent: an
		// account can serve right now, so the earliest recovery is now.
		retryAfter, retryMS = 0, 0
	}
	msg := fmt.Sprintf("no account can serve this request now (%s); run \"rotor rotation status\" for details", reason)
	cat := ""
	switch {
	case reason == "no-account":
		// Waiting does not help: the pool needs an account. No
		// Retry-After, so SDKs do not retry it.
		cat, retryAfter, retryMS = rerr.CategoryConfiguration, 0, 0
		msg = "rotor has no enabled account: add one with \"rotor login\", \"rotor import codex\" or \"rotor add-key\" (or \"rotor enable <index>\")"
	case reason == "network-error" && c.netErr != nil:
		msg = fmt.Sprintf("cannot reach the upstream %s (%v) and no account on another endpoint can serve; check your network", c.unreachable[len(c.unreachable)-1], c.netErr)
	}
	spec := rerr.Spec{Code: rerr.PoolExhausted, RetryAfter: retryAfter, Category: cat,
		Message: msg,
		Extra: []rerr.Field{
			{Key: "reason", Value: reason},
			{Key: "retry_after_ms", Value: retryMS},
			{Key: "hint", Value: `run "rotor rotation status"`},
			{Key: "account_skip_reasons", Value: skips},
		}}
	if reason == "rate-limit" {
		// Codex CLI reads type usage_limit_reached and resets_at to tell its
		// user when to come back; the status is 429 only when every account
		// waits for a reset, 503 when the attempt budget ran out first.
		spec.Type, spec.Category = rerr.TypeUsageLimit, rerr.CategoryRateLimit
		if ref.AllRateLimited {
			spec.Status = 429
			setQuotaHeaders(&c.ctx.Response.Header, now, ref.SoonestQuota)
			spec.Message = fmt.Sprintf("every account has reached its usage limit; the first one resets at %s", ref.ResetAt.UTC().Format(time.RFC3339))
		} else {
			spec.Message = "the accounts tried have reached their usage limit; try again, or run \"rotor rotation status\""
		}
		resetAt := ref.ResetAt
		if untried || resetAt.IsZero() {
			resetAt = now // an account can serve at once: come back now
		}
		in := int64(resetAt.Sub(now).Seconds() + 0.999)
		spec.Extra = append(spec.Extra,
			rerr.Field{Key: "resets_at", Value: resetAt.Unix()},
			rerr.Field{Key: "resets_in_seconds", Value: max(in, 0)})
	}
	s.fail(c.ctx, c.rid, spec, c)
}

func allEntitlement(outs []outcome) bool {
	for _, o := range outs {
		if o != outEntitlement {
			return false
		}
	}
	return true
}

// exhaustionReason names why the pool is exhausted: rate-limit when every
// live account waits for a usage-limit reset, else the last failure this
// request met, else what most skipped accounts are waiting for.
func exhaustionReason(outs []outcome, ref *rotation.Refusal) string {
	if ref.AllRateLimited && !ref.ResetAt.IsZero() {
		return "rate-limit"
	}
	for i := len(outs) - 1; i >= 0; i-- {
		if r := failover[outs[i]].reason; r != "" {
			return r
		}
	}
	counts := map[string]int{}
	for _, r := range ref.SkipReasons {
		if k := skipToReason[r]; k != "" {
			counts[k]++
		}
	}
	best, n := "no-account", 0
	for _, k := range []string{"rate-limit", "server-error", "network-error", "auth-failure"} {
		if counts[k] > n {
			best, n = k, counts[k]
		}
	}
	return best
}

var skipToReason = map[string]string{
	rotation.SkipRateLimited:                            "rate-limit",
	rotation.SkipCircuitOpen:                            "server-error",
	"cooling-down:" + rotation.CooldownServerError:      "server-error",
	"cooling-down:" + rotation.CooldownNetworkError:     "network-error",
	"cooling-down:" + rotation.CooldownAuthFailure:      "auth-failure",
	"cooling-down:" + rotation.CooldownTokenInvalidated: "auth-failure",
}
