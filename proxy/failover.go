package proxy

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/sse"
	"github.com/rotorproxy/rotor/proxy/upstream"
	"github.com/rotorproxy/rotor/rotation"
)

// verdict is what one upstream attempt came to: a row of docs/selection.md's failover
// table.
type verdict int

const (
	verdictOK verdict = iota
	verdictUsageLimit
	verdictEntitlement
	verdictUnauthorized
	verdictTokenInvalidated
	verdictDeactivated
	verdictBlocked
	verdictServerError
	verdictNetworkError
	verdictUnreachable
	verdictOverloaded
	verdictClientError
	verdictForeignContent
	verdictBadRequest
	verdictCount
)

// rule is what the failover table says for a verdict: what the account
// gets (account, and a flag in accounts.json for a dead token or
// workspace), whether the request moves on to the next account (rotate),
// and otherwise what the client is told (respond). reason is the
// pool-exhausted reason the verdict stands for.
type rule struct {
	name    string
	reason  string
	account rotation.Outcome
	flag    string // accounts.Flag* to set, "" for none
	disable bool   // with flag: also disable the account
	rotate  bool
	respond func(index int, f *failure) rerr.Spec // index: the account's, as the user numbers it
}

// failover is docs/selection.md's failover table, one row per verdict.
var failover = [verdictCount]rule{
	verdictOK:           {name: "ok", account: rotation.Served},
	verdictUsageLimit:   {name: "usage-limit", reason: "rate-limit", account: rotation.Limited, rotate: true},
	verdictEntitlement:  {name: "entitlement", reason: "entitlement", rotate: true},
	verdictUnauthorized: {name: "auth-failure", reason: "auth-failure", account: rotation.AuthRejected, rotate: true},
	verdictTokenInvalidated: {name: "token-invalidated", account: rotation.TokenRevoked, flag: accounts.FlagTokenInvalid,
		respond: func(index int, f *failure) rerr.Spec {
			return rerr.Spec{Code: rerr.TokenInvalidated,
				Message: fmt.Sprintf("the token of account %d was invalidated upstream; it is flagged and will not be used until you log in again (\"rotor login\" or \"rotor import codex\")", index),
				Extra:   []rerr.Field{{Key: "account_index", Value: index}}}
		}},
	verdictDeactivated: {name: "deactivated", reason: "auth-failure", flag: accounts.FlagDeactivated, disable: true, rotate: true},
	verdictBlocked: {name: "blocked",
		respond: func(index int, f *failure) rerr.Spec {
			return rerr.Spec{Code: rerr.UpstreamBlocked,
				Message: "the upstream answered with a challenge page (Cloudflare); this is not the account's fault: check your network, VPN or proxy",
				Extra:   []rerr.Field{{Key: "upstream_status", Value: f.status}}}
		}},
	verdictServerError:  {name: "server-error", reason: "server-error", account: rotation.ServerFault, rotate: true},
	verdictNetworkError: {name: "network-error", reason: "network-error", account: rotation.NetworkFault, rotate: true},
	// The endpoint is marked down instead (forward): no account behind it
	// is tried, and none is blamed.
	verdictUnreachable: {name: "unreachable", reason: "network-error", rotate: true},
	verdictOverloaded: {name: "overloaded",
		respond: func(index int, f *failure) rerr.Spec {
			return rerr.Spec{Code: rerr.ProxyOverloaded, RetryAfter: overloadedRetry,
				Message: "rotor is at its own connection limit; no account is at fault, try again shortly",
				Extra:   []rerr.Field{{Key: "retry_after_ms", Value: overloadedRetry.Milliseconds()}}}
		}},
	verdictClientError: {name: "client-error", account: rotation.Answered,
		respond: func(index int, f *failure) rerr.Spec {
			return upstreamSpec(f)
		}},
	// Encrypted content the account cannot read (docs/codex.md): the
	// attempt is sent again once with every blob taken out (attempt);
	// refused even so, it is the client's error, and nobody's fault.
	verdictForeignContent: {name: "foreign-content",
		respond: func(index int, f *failure) rerr.Spec {
			return upstreamSpec(f)
		}},
	// rotor could not make the body this account's kind takes: the
	// client's request is at fault, not the account.
	verdictBadRequest: {name: "bad-request",
		respond: func(index int, f *failure) rerr.Spec {
			return rerr.Spec{Code: rerr.ProxyBadRequest, Message: f.message}
		}},
}

// chargeAccount applies rule's "account gets" column to the account of ch. A 2xx
// is judged when its answer ends (relay), not here.
func (s *Server) chargeAccount(r *rule, ch *rotation.Choice, f *failure) {
	if r.account != rotation.Served {
		s.runtime().Record(ch.Account.ID, r.account, f.status, f.limit)
	}
	if r.flag != "" {
		s.flag(ch.Account.ID, r.flag, r.disable)
	}
}

// overloadedRetry is the wait suggested when rotor's own limits are reached.
const overloadedRetry = time.Second

func (s *Server) runtime() *rotation.Runtime { return s.deps.Selector.Runtime() }

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

// classify reads an upstream answer into a verdict. body is at most the
// first 64 KiB of a non-2xx body.
func classify(status int, h *fasthttp.ResponseHeader, body []byte) verdict {
	switch {
	case status >= 200 && status < 300:
		return verdictOK
	case status == 429:
		if containsAny(errorCodes(body), "usage_not_included") {
			return verdictEntitlement // the plan lacks Codex: no wait will help
		}
		return verdictUsageLimit
	case status == 400 && foreignContent(errorCodes(body), errorMessage(body)):
		return verdictForeignContent
	case status == 404:
		codes := errorCodes(body)
		switch {
		case containsAny(codes, "usage_limit", "rate_limit_exceeded"):
			return verdictUsageLimit
		case containsAny(codes, "usage_not_included") ||
			containsAny(strings.ToLower(string(body)), "not included in your plan", "subscription does not include"):
			return verdictEntitlement
		}
		return verdictClientError
	case status == 401:
		if invalidated(body) {
			return verdictTokenInvalidated
		}
		return verdictUnauthorized
	case status == 402:
		return verdictDeactivated
	case status == 403:
		if bytes.Equal(h.Peek("cf-mitigated"), []byte("challenge")) || htmlBody(h, body) {
			return verdictBlocked
		}
		if containsAny(strings.ToLower(string(body)), "deactivated") {
			return verdictDeactivated
		}
		return verdictClientError
	case status >= 500:
		return verdictServerError
	}
	return verdictClientError
}

// classifyTransport reads an error of the upstream client (no response
// came; package upstream's typed errors) into a verdict: rotor's own limits are verdictOverloaded (nobody's
// fault), a failed connect, TLS handshake or a missing answer within the
// response timeout is verdictUnreachable (the endpoint's), anything else, such
// as a reset after the request was sent, is verdictNetworkError (the
// account's answer broke).
func classifyTransport(err error) verdict {
	var de *upstream.DialError
	switch {
	case errors.Is(err, upstream.ErrNoFreeConns):
		return verdictOverloaded
	case errors.As(err, &de):
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			return verdictOverloaded // rotor ran out of descriptors, not the network
		}
		return verdictUnreachable
	case tlsFailure(err), errors.Is(err, upstream.ErrResponseTimeout):
		return verdictUnreachable
	}
	return verdictNetworkError
}

func tlsFailure(err error) bool {
	var (
		rec   tls.RecordHeaderError
		alert tls.AlertError
		verr  *tls.CertificateVerificationError
		uae   x509.UnknownAuthorityError
		hne   x509.HostnameError
		cie   x509.CertificateInvalidError
	)
	return errors.As(err, &rec) || errors.As(err, &alert) || errors.As(err, &verr) ||
		errors.As(err, &uae) || errors.As(err, &hne) || errors.As(err, &cie)
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

// codeForeignContent is the backend's code for encrypted content the
// account cannot read; the same refusal also comes with code null and
// only its message to tell it (foreignContent).
const codeForeignContent = "invalid_encrypted_content"

// foreignContent reports whether an error's codes (lowercased) or
// message say the account could not read encrypted content another
// account minted.
func foreignContent(codes, message string) bool {
	if strings.Contains(codes, codeForeignContent) {
		return true
	}
	m := strings.ToLower(message)
	return strings.Contains(m, "encrypted content") && strings.Contains(m, "could not be verified")
}

// errorMessage is an error body's error.message.
func errorMessage(body []byte) string {
	return gjson.GetBytes(body, "error.message").Str
}

func invalidated(body []byte) bool {
	codes := errorCodes(body)
	if containsAny(codes, "token_invalidated", "token_revoked", "invalidated") {
		return true
	}
	msg := strings.ToLower(errorMessage(body))
	return containsAny(msg, "invalidated", "revoked")
}

func htmlBody(h *fasthttp.ResponseHeader, body []byte) bool {
	if bytes.HasPrefix(h.ContentType(), []byte("text/html")) {
		return true
	}
	t := bytes.TrimSpace(body)
	return len(t) > 0 && t[0] == '<'
}

// streamFailure is how a stream said it failed: its code, never empty
// for a failure, and the upstream's message.
type streamFailure struct{ code, message string }

// failureOf is how an event that ends the stream in failure
// (response.failed, error) says it failed; its code is "" for any other
// event. A failure with no code still has one, so it is never mistaken
// for success.
func failureOf(e sse.Event) streamFailure {
	code, msg, failed := e.Failure()
	if !failed {
		return streamFailure{}
	}
	// Copies: the event's bytes are a buffer the hold-back returns to its
	// pool, and another request's read may fill it while this failure is
	// still being answered.
	f := streamFailure{strings.Clone(code), strings.Clone(msg)}
	switch {
	case f.code != "":
	case foreignContent("", f.message):
		f.code = codeForeignContent // the refusal of another account's blob, with code null
	case e.Type == "error":
		f.code = "stream_error"
	default:
		f.code = "response_failed"
	}
	return f
}

// failedStreamVerdict classifies a stream that failed before any output
// by its code, as classify does an HTTP error: a refusal of what the
// request asked marks no account (docs/selection.md), nor does a plan without
// Codex; anything unknown is the upstream's fault.
func failedStreamVerdict(code string) verdict {
	if v, ok := streamFailures[code]; ok {
		return v
	}
	if containsAny(code, "usage_limit", "rate_limit", "insufficient_quota") {
		return verdictUsageLimit
	}
	return verdictServerError // server_error, server_is_overloaded, slow_down and the like
}

// streamFailures are the failure codes whose verdict is not the
// upstream's fault: the ChatGPT backend's, as Codex CLI reads them, and
// those the Responses API documents for response.failed that name
// something wrong with the request.
var streamFailures = map[string]verdict{
	codeForeignContent:        verdictForeignContent,
	"usage_not_included":      verdictEntitlement,
	"context_length_exceeded": verdictClientError,
	"invalid_prompt":          verdictClientError,

	"invalid_image": verdictClientError, "invalid_image_format": verdictClientError,
	"invalid_base64_image": verdictClientError, "invalid_image_url": verdictClientError,
	"image_too_large": verdictClientError, "image_too_small": verdictClientError,
	"image_parse_error": verdictClientError, "image_content_policy_violation": verdictClientError,
	"invalid_image_mode": verdictClientError, "image_file_too_large": verdictClientError,
	"unsupported_image_media_type": verdictClientError, "empty_image_file": verdictClientError,
	"failed_to_download_image": verdictClientError, "image_file_not_found": verdictClientError,
}

// errorBody is an error body in OpenAI's shape, as a failure carries it
// to upstreamSpec; typ and message are left out when empty.
func errorBody(typ, code, message string) []byte {
	type errorObject struct {
		Type    string `json:"type,omitempty"`
		Code    string `json:"code"`
		Message string `json:"message,omitempty"`
	}
	b, _ := json.Marshal(struct {
		Error errorObject `json:"error"`
	}{errorObject{typ, code, message}})
	return b
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// upstreamSpec normalizes an upstream error the client should see as is:
// the upstream's status and code, its message, and where it came from.
func upstreamSpec(f *failure) rerr.Spec {
	body := f.body
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
		msg = fmt.Sprintf("upstream answered %d", f.status)
	}
	extra := []rerr.Field{{Key: "upstream_status", Value: f.status}, {Key: "upstream_request_id", Value: f.upstreamID}}
	if p := gjson.GetBytes(body, "error.param"); p.Type == gjson.String {
		extra = append(extra, rerr.Field{Key: "param", Value: p.Str})
	}
	return rerr.Spec{
		Code:    code,
		Status:  f.status,
		Type:    gjson.GetBytes(body, "error.type").String(),
		Message: msg,
		Extra:   extra,
	}
}
