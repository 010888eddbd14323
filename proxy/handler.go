package proxy

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"runtime/debug"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/rotation"
)

// op is what a client asked for; each upstream adapter maps it to a URL.
type op int

const (
	opResponses op = iota
	opCompact
	opModels
)

type route struct {
	method string
	op     op
}

// routes is the proxy's whole surface (SPEC §4).
var routes = map[string]route{
	"/v1/responses":         {fasthttp.MethodPost, opResponses},
	"/responses":            {fasthttp.MethodPost, opResponses},
	"/v1/responses/compact": {fasthttp.MethodPost, opCompact},
	"/responses/compact":    {fasthttp.MethodPost, opCompact},
	"/v1/models":            {fasthttp.MethodGet, opModels},
	"/models":               {fasthttp.MethodGet, opModels},
}

// newRequestID returns an id for logs and payloads. It needs to be unique,
// not secret, so a fast PRNG does.
func newRequestID() string {
	var b [12]byte
	u1, u2 := rand.Uint64(), rand.Uint32()
	for i := range 8 {
		b[i] = byte(u1 >> (8 * i))
	}
	for i := range 4 {
		b[8+i] = byte(u2 >> (8 * i))
	}
	return "rotor_" + hex.EncodeToString(b[:])
}

// handle is the fasthttp handler: guard, authenticate, route, forward.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	rid := newRequestID()
	ctx.Response.Header.Set("x-request-id", rid)
	// fasthttp does not recover handler panics: one would end the process
	// and every stream in it. A bug becomes this request's 500 instead,
	// logged with its stack, never shown to the client.
	defer func() {
		if v := recover(); v != nil {
			s.deps.Log.Error().Str("request_id", rid).Str("panic", fmt.Sprint(v)).
				Bytes("stack", debug.Stack()).Msg("handler panic")
			ctx.Response.Reset()
			ctx.Response.Header.Set("x-request-id", rid)
			s.fail(ctx, rid, rerr.Spec{Code: rerr.ProxyError,
				Message: "rotor failed on this request (a bug); it is logged with request_id"}, nil)
		}
	}()
	if code := s.guard(&ctx.Request.Header); code != "" {
		s.fail(ctx, rid, rerr.Spec{Code: code, Message: guardMessages[code]}, nil)
		return
	}
	rt, ok := routes[string(ctx.Path())]
	if !ok || string(ctx.Method()) != rt.method {
		s.fail(ctx, rid, rerr.Spec{Code: rerr.ProxyNotFound,
			Message: "rotor serves POST /v1/responses, POST /v1/responses/compact and GET /v1/models"}, nil)
		return
	}
	s.forward(ctx, rid, rt.op)
}

var guardMessages = map[string]string{
	rerr.ProxyForbiddenHost: "rotor only answers loopback requests (Host, Origin and request target must be loopback)",
	rerr.ProxyUnauthorized:  "missing or wrong client key: send the key from proxy.json as Authorization: Bearer <key> or x-api-key (\"rotor env\" prints it)",
}

// guard applies the checks every request passes before routing: loopback
// Host, origin-form target, loopback Origin, then the client key. It returns
// the error code to answer with, "" to go on.
func (s *Server) guard(h *fasthttp.RequestHeader) string {
	uri := h.RequestURI()
	if len(uri) == 0 || uri[0] != '/' {
		return rerr.ProxyForbiddenHost // absolute-form or asterisk-form target
	}
	if !loopbackHostPort(h.Host()) {
		return rerr.ProxyForbiddenHost
	}
	if o := h.Peek("Origin"); len(o) > 0 && !loopbackOrigin(o) {
		return rerr.ProxyForbiddenHost
	}
	if !s.authorized(h) {
		return rerr.ProxyUnauthorized
	}
	return ""
}

// loopbackHostPort reports whether a Host header names a loopback literal
// or localhost, with any port.
func loopbackHostPort(hp []byte) bool {
	host := hp
	switch {
	case len(hp) > 0 && hp[0] == '[':
		end := bytes.IndexByte(hp, ']')
		if end < 0 {
			return false
		}
		host = hp[1:end]
	case bytes.Count(hp, []byte{':'}) == 1:
		host = hp[:bytes.IndexByte(hp, ':')]
	}
	return LoopbackHost(string(host))
}

func loopbackOrigin(o []byte) bool {
	u, err := url.Parse(string(o))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return LoopbackHost(u.Hostname())
}

// handleParseError answers requests fasthttp could not read. The guard still
// runs first, so an unknown caller learns nothing but 401.
func (s *Server) handleParseError(ctx *fasthttp.RequestCtx, err error) {
	rid := newRequestID()
	ctx.Response.Header.Set("x-request-id", rid)
	if code := s.guard(&ctx.Request.Header); code != "" {
		s.fail(ctx, rid, rerr.Spec{Code: code, Message: guardMessages[code]}, nil)
		return
	}
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		s.fail(ctx, rid, rerr.Spec{
			Code:    rerr.ProxyPayloadTooLarge,
			Message: "request body is larger than the proxy accepts (--max-body)",
			Extra:   []rerr.Field{{Key: "max_bytes", Value: s.cfg.MaxBody}},
		}, nil)
		return
	}
	s.fail(ctx, rid, rerr.Spec{Code: rerr.ProxyBadRequest, Message: "malformed HTTP request"}, nil)
}

// maxClientRetryWait is the longest wait rotor lets SDK clients sleep
// through on their own; past it, they are told not to retry.
const maxClientRetryWait = time.Minute

// fail writes a proxy-made error response and logs the request.
func (s *Server) fail(ctx *fasthttp.RequestCtx, rid string, spec rerr.Spec, c *call) {
	spec.RequestID = rid
	r := rerr.Build(spec)
	ctx.Response.ResetBody()
	ctx.SetStatusCode(r.Status)
	ctx.SetContentType("application/json")
	if ms := r.RetryAfterMS(); ms != "" {
		ctx.Response.Header.Set("retry-after-ms", ms)
		ctx.Response.Header.Set("Retry-After", r.RetryAfterSeconds())
		if r.RetryAfter > maxClientRetryWait {
			// The OpenAI SDKs sleep for retry-after-ms, uncapped, before
			// retrying: a wait of hours would hang the caller instead of
			// raising RateLimitError. They honor x-should-retry first.
			ctx.Response.Header.Set("x-should-retry", "false")
		}
	}
	ctx.SetBody(r.Body)
	ev := s.deps.Log.Info().Str("request_id", rid).Int("status", r.Status).Str("code", spec.Code)
	if c != nil && s.deps.Usage != nil {
		// Failed requests count too: "rotor report" shows errors by code.
		rec := rotation.Usage{Time: s.deps.Clock.Now().UTC(), RequestID: rid, Model: c.model,
			Status: r.Status, Code: spec.Code, DurMS: time.Since(c.start).Milliseconds()}
		if n := len(c.attempted); n > 0 {
			rec.AccountID = c.attempted[n-1]
		}
		s.deps.Usage.Append(rec)
	}
	if c != nil {
		ev = ev.Str("model", c.model).Int("attempts", len(c.attempted)).
			Int64("duration_ms", time.Since(c.start).Milliseconds())
		if c.lastIndex > 0 {
			ev = ev.Int("account", c.lastIndex)
		}
	}
	ev.Msg("request")
}

// call is one client request on its way through the failover loop.
type call struct {
	ctx         *fasthttp.RequestCtx
	rid         string
	op          op
	body        []byte
	model       string
	affinityKey string
	start       time.Time
	attempted   []string
	outcomes    []outcome
	lastIndex   int

	encoded bool // the body has a Content-Encoding: opaque to rotor

	// The body as ChatGPT accounts get it, made on first use (compat.go).
	chatgpt     []byte
	assemble    bool
	chatgptErr  error
	chatgptMade bool
}

func (c *call) chatgptBody() ([]byte, bool, error) {
	if !c.chatgptMade {
		c.chatgpt, c.assemble, c.chatgptErr = chatgptBody(c.body)
		c.chatgptMade = true
	}
	return c.chatgpt, c.assemble, c.chatgptErr
}

func (s *Server) forward(ctx *fasthttp.RequestCtx, rid string, o op) {
	c := &call{ctx: ctx, rid: rid, op: o, body: ctx.PostBody(), start: time.Now()}
	// A compressed body (Content-Encoding) is forwarded as it came, with
	// its header: rotor reads nothing in it and rewrites nothing.
	c.encoded = len(ctx.Request.Header.ContentEncoding()) > 0 &&
		!bytes.EqualFold(ctx.Request.Header.ContentEncoding(), []byte("identity"))
	body := c.body
	if c.encoded {
		body = nil
	}
	if o != opModels && !c.encoded {
		if !gjson.ValidBytes(c.body) {
			s.fail(ctx, rid, rerr.Spec{Code: rerr.ProxyBadRequest, Message: "request body is not valid JSON"}, c)
			return
		}
		c.model = gjson.GetBytes(c.body, "model").String()
	}
	c.affinityKey = affinityKey(&ctx.Request.Header, body)
	sel := s.deps.Selector
	req := rotation.Request{AffinityKey: c.affinityKey}
	for {
		req.Attempted = c.attempted
		// At most min(usable accounts, MaxAttempts) attempts: every pick is
		// a usable account not attempted yet, so Pick itself refuses once
		// the usable ones are spent; only the cap needs counting here.
		if len(c.attempted) >= s.cfg.MaxAttempts {
			s.exhausted(c, sel.Explain(&req))
			return
		}
		choice, ref := sel.Pick(&req)
		if ref != nil {
			s.exhausted(c, ref)
			return
		}
		c.attempted = append(c.attempted, choice.Account.ID)
		c.lastIndex = choice.Index
		res := s.attempt(c, &choice)
		c.outcomes = append(c.outcomes, res.out)
		rule := failover[res.out]
		if rule.mark != nil {
			rule.mark(s, &choice, res)
		}
		if res.out == outOK {
			sel.Bind(c.affinityKey, choice.Account.ID)
			s.relay(c, &choice, res)
			return
		}
		if !rule.rotate {
			s.fail(ctx, rid, rule.respond(c, &choice, res), c)
			return
		}
		s.deps.Log.Info().Str("request_id", rid).Int("account", choice.Index).
			Str("outcome", rule.name).Int("upstream_status", res.status).Msg("failover: trying another account")
	}
}

// affinityKey is the conversation a request belongs to: the session_id or
// conversation_id header, else the body's prompt_cache_key, else its
// previous_response_id.
func affinityKey(h *fasthttp.RequestHeader, body []byte) string {
	if v := h.Peek("session_id"); len(v) > 0 {
		return "s:" + string(v)
	}
	if v := h.Peek("conversation_id"); len(v) > 0 {
		return "s:" + string(v)
	}
	if len(body) == 0 {
		return ""
	}
	if v := gjson.GetBytes(body, "prompt_cache_key"); v.Type == gjson.String && v.Str != "" {
		return "p:" + v.Str
	}
	if v := gjson.GetBytes(body, "previous_response_id"); v.Type == gjson.String && v.Str != "" {
		return "r:" + v.Str
	}
	return ""
}
