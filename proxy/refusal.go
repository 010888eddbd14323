package proxy

import (
	"cmp"
	"fmt"
	"strconv"
	"time"

	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/backend"
	"github.com/rotorproxy/rotor/rotation"
)

// exhausted answers a request no account could serve: the unsupported
// parameter when only an API-key account could have, entitlement when
// every attempt lacked it, the pin's refusal when a pin forbids rotating,
// else the pool-exhausted payload.
func (s *Server) exhausted(w responder, r *request, ref *rotation.Refusal) {
	switch {
	case r.chat.Unsupported != "" && len(r.attempted) == 0:
		s.refuse(w, r, rerr.Spec{Code: rerr.UnsupportedParameter,
			Message: fmt.Sprintf("%q cannot be served by a ChatGPT account and no API-key account can serve now; add one with \"rotor add-key\" or drop the parameter", r.chat.Unsupported),
			Extra:   []rerr.Field{{Key: "param", Value: r.chat.Unsupported}}}, nil)
	case len(r.verdicts) > 0 && allEntitlement(r.verdicts):
		s.refuse(w, r, rerr.Spec{Code: rerr.EntitlementError,
			Message: "no account in the pool has access to this (the upstream said it is not included in the plan)",
			Extra:   []rerr.Field{{Key: "upstream_status", Value: 404}}}, nil)
	case ref.Pinned:
		s.refuse(w, r, pinnedSpec(ref, skipsByIndex(ref)), nil)
	default:
		s.poolExhausted(w, r, ref)
	}
}

// skipsByIndex are the refusal's skip reasons by account index, for the
// payload's account_skip_reasons.
func skipsByIndex(ref *rotation.Refusal) map[string]string {
	skips := make(map[string]string, len(ref.SkipReasons))
	for i, why := range ref.SkipReasons {
		if why != "" {
			skips[strconv.Itoa(i)] = why
		}
	}
	return skips
}

// untried reports whether a usable account was left untried: the attempt
// budget ran out (or a pin forbids it), not the pool.
func untried(ref *rotation.Refusal) bool {
	for _, why := range ref.SkipReasons {
		if why == "" {
			return true
		}
	}
	return false
}

// pinnedSpec is the refusal of a pinned account that cannot serve.
func pinnedSpec(ref *rotation.Refusal, skips map[string]string) rerr.Spec {
	var reason, resetAt any
	if ref.PinReason != "" {
		reason = ref.PinReason
	}
	if !ref.ResetAt.IsZero() {
		resetAt = ref.ResetAt.UTC().Format(time.RFC3339)
	}
	cat := ""
	if ref.PinReason == rotation.SkipRateLimited || ref.PinReason == rotation.SkipCreditsHeldBack {
		cat = rerr.CategoryRateLimit
	}
	return rerr.Spec{Code: rerr.PinnedUnavailable, Category: cat,
		Message: fmt.Sprintf("the pinned account %d cannot serve now (%s); run \"rotor rotation status\" to see when it comes back, or \"rotor unpin\" to rotate again",
			ref.PinnedIndex, cmp.Or(ref.PinReason, "unknown")),
		RetryAfter: ref.RetryAfter,
		Extra: []rerr.Field{
			{Key: "pinned_account_index", Value: ref.PinnedIndex},
			{Key: "pin_source", Value: ref.PinSource},
			{Key: "reason", Value: reason},
			{Key: "retry_after_ms", Value: ref.RetryAfter.Milliseconds()},
			{Key: "reset_at", Value: resetAt},
			{Key: "account_skip_reasons", Value: skips},
		}}
}

// poolExhausted answers with docs/selection.md's pool-exhausted payload.
func (s *Server) poolExhausted(w responder, r *request, ref *rotation.Refusal) {
	now := s.deps.Clock.Now()
	if !ref.AllRateLimited && !ref.ResetAt.IsZero() && s.onlyLimitsLeft(r, ref) {
		ref.AllRateLimited = true
	}
	reason := exhaustionReason(r.verdicts, ref)
	retryAfter, left := ref.RetryAfter, untried(ref)
	if left {
		// Only this request's attempt budget (--max-attempts) is spent: an
		// account can serve right now, so the earliest recovery is now.
		retryAfter = 0
	}
	msg := fmt.Sprintf("no account can serve this request now (%s); run \"rotor rotation status\" for details", reason)
	cat := ""
	switch {
	case reason == "no-account":
		// Waiting does not help: the pool needs an account. No
		// Retry-After, so SDKs do not retry it.
		cat, retryAfter = rerr.CategoryConfiguration, 0
		msg = "rotor has no enabled account: add one with \"rotor login\", \"rotor import codex\" or \"rotor add-key\" (or \"rotor enable <index>\")"
	case reason == "network-error" && r.netErr != nil:
		msg = fmt.Sprintf("cannot reach the upstream %s (%v) and no account on another endpoint can serve; check your network", r.unreachable[len(r.unreachable)-1], r.netErr)
	}
	spec := rerr.Spec{Code: rerr.PoolExhausted, RetryAfter: retryAfter, Category: cat,
		Message: msg,
		Extra: []rerr.Field{
			{Key: "reason", Value: reason},
			{Key: "retry_after_ms", Value: retryAfter.Milliseconds()},
			{Key: "hint", Value: `run "rotor rotation status"`},
			{Key: "account_skip_reasons", Value: skipsByIndex(ref)},
		}}
	var headers func(HeaderSetter)
	if reason == "rate-limit" {
		headers = rateLimited(&spec, ref, now, left)
	}
	s.refuse(w, r, spec, headers)
}

// onlyLimitsLeft reports whether every account that could serve r waits
// for a usage-limit reset, counting out, besides the disabled and the
// flagged, those r found without the entitlement (their plan lacks it: no
// wait changes that). Such a request is a usage limit, as if those
// accounts were not in the pool: 429, with when to come back; an
// entitlement refusal met on the way must not hide it.
func (s *Server) onlyLimitsLeft(r *request, ref *rotation.Refusal) bool {
	pool := s.deps.Selector.Pool()
	limited := false
	for i, why := range ref.SkipReasons {
		switch why {
		case rotation.SkipRateLimited, rotation.SkipCreditsHeldBack:
			limited = true
		case rotation.SkipDisabled, rotation.SkipFlagged:
		case rotation.SkipAlreadyAttempted:
			a := pool.At(i)
			if a == nil || !lacksEntitlement(r, a.ID) {
				return false
			}
		default:
			return false
		}
	}
	return limited
}

// lacksEntitlement reports whether account id answered r that its plan
// does not include it.
func lacksEntitlement(r *request, id string) bool {
	for i, at := range r.attempted {
		if at == id && i < len(r.verdicts) && r.verdicts[i] == verdictEntitlement {
			return true
		}
	}
	return false
}

// rateLimited dresses spec as a usage limit. Codex CLI reads type
// usage_limit_reached and resets_at to tell its user when to come back;
// the status is 429 only when every account waits for a reset, 503 when
// the attempt budget ran out first. It returns the x-codex-* headers of
// the account waited on, when every account waits.
func rateLimited(spec *rerr.Spec, ref *rotation.Refusal, now time.Time, untried bool) func(HeaderSetter) {
	var headers func(HeaderSetter)
	spec.Type, spec.Category = rerr.TypeUsageLimit, rerr.CategoryRateLimit
	if ref.AllRateLimited {
		spec.Status = 429
		headers = func(h HeaderSetter) { backend.SetQuotaHeaders(h, now, ref.SoonestQuota) }
		spec.Message = fmt.Sprintf("every account has reached its usage limit; the first one resets at %s", ref.ResetAt.UTC().Format(time.RFC3339))
		if ref.Family != "" && ref.Family != rotation.MainFamily {
			spec.Message = fmt.Sprintf("every account has reached its usage limit for this model (limit %s); the first one resets at %s",
				ref.Family, ref.ResetAt.UTC().Format(time.RFC3339))
			spec.Extra = append(spec.Extra, rerr.Field{Key: "limit", Value: ref.Family})
		}
		if rotation.WorkspaceLimit(ref.LimitReason) {
			spec.Message += fmt.Sprintf(" (%s: only the workspace's owner can lift it; rotor reads the account's usage every few minutes and serves again once it is lifted)", ref.LimitReason)
		}
		if ref.LimitReason != "" {
			spec.Extra = append(spec.Extra, rerr.Field{Key: "rate_limit_reached_type", Value: ref.LimitReason})
		}
		if ref.CreditsHeldBack {
			spec.Message += "; accounts that hold credits were held back (rotor serve --credits never)"
			spec.Extra = append(spec.Extra, rerr.Field{Key: "credits_held_back", Value: true})
		}
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
	return headers
}

func allEntitlement(outs []verdict) bool {
	for _, o := range outs {
		if o != verdictEntitlement {
			return false
		}
	}
	return true
}

// exhaustionReason names why the pool is exhausted: rate-limit when every
// live account waits for a usage-limit reset, else the last failure this
// request met, else what most skipped accounts are waiting for.
func exhaustionReason(outs []verdict, ref *rotation.Refusal) string {
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

// streamError is the error event of a stream that fails after its first
// byte, in docs/selection.md's error shape.
func streamError(rid, code, message string) []byte {
	status := 500
	if failedStreamVerdict(code) == verdictUsageLimit {
		status = 429
	}
	return rerr.Build(rerr.Spec{Code: code, Status: status, Message: message, RequestID: rid}).Body
}
