package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/chat"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// op is what a client asked for; each upstream adapter maps it to a URL.
type op int

const (
	opResponses op = iota
	opCompact
	opChat
	opModels
	opHealth // answered by rotor itself, never forwarded
	opCount
)

type route struct {
	method string
	op     op
}

// routes is the proxy's whole surface (SPEC §4, §7).
var routes = map[string]route{
	"/v1/responses":         {fasthttp.MethodPost, opResponses},
	"/responses":            {fasthttp.MethodPost, opResponses},
	"/v1/responses/compact": {fasthttp.MethodPost, opCompact},
	"/responses/compact":    {fasthttp.MethodPost, opCompact},
	"/v1/chat/completions":  {fasthttp.MethodPost, opChat},
	"/chat/completions":     {fasthttp.MethodPost, opChat},
	"/v1/models":            {fasthttp.MethodGet, opModels},
	"/models":               {fasthttp.MethodGet, opModels},
	"/healthz":              {fasthttp.MethodGet, opHealth},
	"/v1/healthz":           {fasthttp.MethodGet, opHealth},
}

// surface is the list of routes a 404 names.
const surface = "POST /v1/responses, POST /v1/responses/compact, POST /v1/chat/completions, GET /v1/models and GET /healthz"

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
	page := s.deps.Pages != nil && s.deps.Pages.Owns(ctx.Path())
	if code := s.guard(&ctx.Request.Header, page); code != "" {
		// The body was not read: the connection cannot carry another
		// request, and a stranger's upload costs nothing.
		ctx.SetConnectionClose()
		s.fail(ctx, rid, rerr.Spec{Code: code, Message: guardMessages[code]}, nil)
		return
	}
	if page {
		s.deps.Pages.ServePage(ctx)
		return
	}
	rt, ok := routes[string(ctx.Path())]
	if !ok || string(ctx.Method()) != rt.method {
		ctx.SetConnectionClose()
		s.fail(ctx, rid, rerr.Spec{Code: rerr.ProxyNotFound,
			Message: fmt.Sprintf("rotor does not serve %s %s; it serves %s", ctx.Method(), ctx.Path(), surface)}, nil)
		return
	}
	if rt.op == opHealth {
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"status":"ok"}`)
		return
	}
	body, release, spec := s.readBody(ctx)
	defer release()
	if spec != nil {
		ctx.SetConnectionClose()
		s.fail(ctx, rid, *spec, nil)
		return
	}
	s.forward(ctx, rid, rt.op, body)
}

// bodyPool recycles request body buffers: long Codex sessions send the
// whole history, megabytes, with every turn.
var bodyPool sync.Pool

// maxPooledBody keeps a rare huge body from pinning its buffer forever.
const maxPooledBody = 8 << 20

// readBody reads the request body, at most MaxBody bytes whether its
// length is declared or chunked. release returns the buffer; the body
// must not be used after it.
func (s *Server) readBody(ctx *fasthttp.RequestCtx) (body []byte, release func(), spec *rerr.Spec) {
	release = func() {}
	tooLarge := &rerr.Spec{Code: rerr.ProxyPayloadTooLarge,
		Message: "request body is larger than the proxy accepts (--max-body)",
		Extra:   []rerr.Field{{Key: "max_bytes", Value: s.cfg.MaxBody}}}
	n := ctx.Request.Header.ContentLength()
	if n > s.cfg.MaxBody {
		return nil, release, tooLarge
	}
	stream := ctx.RequestBodyStream()
	if stream == nil || n == 0 {
		return ctx.Request.Body(), release, nil
	}
	var buf []byte
	if p, ok := bodyPool.Get().(*[]byte); ok {
		buf = (*p)[:0]
	}
	if n > cap(buf) {
		buf = make([]byte, 0, n)
	}
	release = func() {
		if cap(buf) <= maxPooledBody {
			buf = buf[:0]
			bodyPool.Put(&buf)
		}
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m, err := stream.Read(buf[len(buf):min(cap(buf), s.cfg.MaxBody+1)])
		buf = buf[:len(buf)+m]
		if len(buf) > s.cfg.MaxBody {
			return nil, release, tooLarge
		}
		if err == io.EOF {
			return buf, release, nil
		}
		if err != nil {
			return nil, release, &rerr.Spec{Code: rerr.ProxyBadRequest, Message: "cannot read the request body: " + err.Error()}
		}
	}
}

var guardMessages = map[string]string{
	rerr.ProxyForbiddenHost: "rotor only answers loopback requests (Host, Origin and request target must be loopback)",
	rerr.ProxyUnauthorized:  "missing or wrong client key: send the key from proxy.json as Authorization: Bearer <key> or x-api-key (\"rotor env\" prints it)",
}

// guard applies the checks every request passes before routing: loopback
// Host, origin-form target, loopback Origin, then the client key, except
// on a dashboard page (which takes its cookie instead). It returns the
// error code to answer with, "" to go on.
func (s *Server) guard(h *fasthttp.RequestHeader, page bool) string {
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
	if !page && !s.authorized(h) {
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

// handleParseError answers requests fasthttp could not read. Headers too
// large for the read buffer get 431 at once (a partly read header says
// nothing about the caller); otherwise the guard still runs first, so an
// unknown caller learns nothing but 401.
func (s *Server) handleParseError(ctx *fasthttp.RequestCtx, err error) {
	rid := newRequestID()
	ctx.Response.Header.Set("x-request-id", rid)
	ctx.SetConnectionClose()
	var small *fasthttp.ErrSmallBuffer
	if errors.As(err, &small) {
		s.fail(ctx, rid, rerr.Spec{Code: rerr.ProxyHeadersTooLarge,
			Message: fmt.Sprintf("request headers are larger than the proxy accepts (%d KiB)", MaxHeaderBytes>>10)}, nil)
		return
	}
	if code := s.guard(&ctx.Request.Header, false); code != "" {
		s.fail(ctx, rid, rerr.Spec{Code: code, Message: guardMessages[code]}, nil)
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
	now := s.deps.Clock.Now()
	if c != nil && s.deps.Usage != nil {
		// Failed requests count too: "rotor report" shows errors by code.
		rec := usage.Record{Time: now.UTC(), RequestID: rid, Model: c.model,
			Status: r.Status, Code: spec.Code, DurMS: now.Sub(c.start).Milliseconds()}
		if n := len(c.attempted); n > 0 {
			rec.AccountID = c.attempted[n-1]
		}
		s.deps.Usage.Append(rec)
	}
	if c != nil {
		ev = ev.Str("model", c.model).Int("attempts", len(c.attempted)).
			Int64("duration_ms", now.Sub(c.start).Milliseconds())
		if c.lastIndex > 0 {
			ev = ev.Int("account", c.lastIndex)
		}
	}
	ev.Msg("request")
}

// call is one client request on its way through the failover loop.
type call struct {
	s           *Server
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
	// scan is the body's one read (scan.go), unless it is encoded.
	scan scanned

	// chat is what a Chat Completions body asks for (op == opChat).
	chat chat.Request
	// codexClient: a models request from Codex CLI, which gets the Codex
	// catalog as it is.
	codexClient bool

	// The body as ChatGPT accounts get it, made on first use (compat.go).
	chatgpt     []byte
	chatgptSh   shape
	chatgptErr  error
	chatgptMade bool

	// Endpoints this request could not reach: no other account behind
	// them is tried. probing lets one attempt through to an endpoint
	// known to be down, when nothing else can serve.
	unreachable []string
	probing     bool
	netErr      error // the last connect failure, for the client's message
}

// upstreamBody is the body and answer shape for an account of kind a.
func (c *call) upstreamBody(kind accounts.Kind) ([]byte, shape, error) {
	if kind != accounts.KindChatGPT || c.encoded {
		return c.body, shapeAsIs, nil
	}
	if !c.chatgptMade {
		c.chatgpt, c.chatgptSh, c.chatgptErr = chatgptStage(c)
		c.chatgptMade = true
	}
	return c.chatgpt, c.chatgptSh, c.chatgptErr
}

// skip keeps out of this request the accounts it must not use (see
// rotation.Request.Skip).
func (c *call) skip(a *accounts.Account) string {
	if c.chat.Unsupported != "" && a.Kind == accounts.KindChatGPT {
		return skipUnsupported
	}
	if len(c.unreachable) == 0 && !c.s.endpoints.anyDown() {
		return ""
	}
	ep := c.s.endpointOf(a)
	if slices.Contains(c.unreachable, ep) || !c.probing && c.s.endpoints.isDown(ep) {
		return rotation.CoolingDown(rotation.CooldownNetworkError)
	}
	return ""
}

// skipUnsupported is the skip reason of a ChatGPT account for a Chat
// Completions request only an API-key account can serve.
const skipUnsupported = "unsupported-parameter"

func (s *Server) forward(ctx *fasthttp.RequestCtx, rid string, o op, body []byte) {
	c := &call{s: s, ctx: ctx, rid: rid, op: o, body: body, start: s.deps.Clock.Now()}
	// A compressed body (Content-Encoding) is forwarded as it came, with
	// its header: rotor reads nothing in it and rewrites nothing.
	c.encoded = len(ctx.Request.Header.ContentEncoding()) > 0 &&
		!bytes.EqualFold(ctx.Request.Header.ContentEncoding(), []byte("identity"))
	if o == opModels {
		c.codexClient = ctx.QueryArgs().Has("client_version")
	}
	if o != opModels && !c.encoded {
		if !scanBody(c.body, &c.scan) {
			s.fail(ctx, rid, rerr.Spec{Code: rerr.ProxyBadRequest, Message: "request body is not valid JSON"}, c)
			return
		}
		if o == opChat {
			var err error
			if c.chat, err = chat.Parse(c.body); err != nil {
				s.fail(ctx, rid, rerr.Spec{Code: rerr.ProxyBadRequest, Message: err.Error()}, c)
				return
			}
			c.model = c.chat.Model
		}
	}
	var f bodyFields
	switch {
	case o == opChat:
		f.promptCacheKey = c.chat.PromptCacheKey // read by chat.Parse's own pass
	case o != opModels && !c.encoded:
		f = readFields(c.body, c.scan.members)
		c.model = strings.Clone(f.model) // outlives the pooled body in logs
	}
	c.affinityKey = affinityKey(&ctx.Request.Header, f)
	sel := s.deps.Selector
	req := rotation.Request{AffinityKey: c.affinityKey}
	for {
		req.Attempted = c.attempted
		req.Skip = nil
		if c.chat.Unsupported != "" || len(c.unreachable) > 0 || s.endpoints.anyDown() {
			req.Skip = c.skip
		}
		// At most min(usable accounts, MaxAttempts) attempts: every pick is
		// a usable account not attempted yet, so Pick itself refuses once
		// the usable ones are spent; only the cap needs counting here.
		if len(c.attempted) >= s.cfg.MaxAttempts {
			s.exhausted(c, sel.Explain(&req))
			return
		}
		choice, ref := sel.Pick(&req)
		if ref != nil {
			if !c.probing && s.endpoints.anyDown() {
				// Only accounts behind an endpoint that failed lately are
				// left: try one of them rather than refuse, so the first
				// request after the network is back succeeds.
				c.probing = true
				continue
			}
			if c.chat.Unsupported != "" && len(c.attempted) == 0 {
				s.fail(ctx, rid, rerr.Spec{Code: rerr.UnsupportedParameter,
					Message: fmt.Sprintf("%q cannot be served by a ChatGPT account and no API-key account can serve now; add one with \"rotor add-key\" or drop the parameter", c.chat.Unsupported),
					Extra:   []rerr.Field{{Key: "param", Value: c.chat.Unsupported}}}, c)
				return
			}
			s.exhausted(c, ref)
			return
		}
		c.attempted = append(c.attempted, choice.Account.ID)
		c.lastIndex = choice.Index
		res := s.attempt(c, &choice)
		c.outcomes = append(c.outcomes, res.out)
		rule := &failover[res.out]
		gone := res.out != outOK && clientGone(ctx)
		if !gone {
			s.judge(rule, &choice, res)
		}
		if res.out == outUnreachable {
			if !gone {
				s.endpoints.markDown(res.endpoint, res.err)
			}
			c.unreachable = append(c.unreachable, res.endpoint)
			c.netErr = res.err
		}
		if res.out == outOK {
			sel.Bind(c.affinityKey, choice.Account.ID)
			s.relay(c, &choice, res)
			return
		}
		if gone {
			// Nobody is waiting: no more attempts, and nobody is blamed
			// for an answer no one asked for any more.
			s.clientLeft(c)
			return
		}
		if !rule.rotate {
			s.fail(ctx, rid, rule.respond(c, choice.Index, res), c)
			return
		}
		ev := s.deps.Log.Info().Str("request_id", rid).Int("account", choice.Index).
			Str("outcome", rule.name).Int("upstream_status", res.status)
		if res.err != nil {
			ev = ev.AnErr("upstream_error", res.err)
		}
		ev.Msg("failover: trying another account")
	}
}

// clientLeft records a request whose client went away before its answer.
func (s *Server) clientLeft(c *call) {
	rec := usage.Record{Time: s.deps.Clock.Now().UTC(), RequestID: c.rid, Model: c.model,
		Status: statusClientClosed, Code: codeClientClosed, DurMS: s.deps.Clock.Now().Sub(c.start).Milliseconds()}
	if n := len(c.attempted); n > 0 {
		rec.AccountID = c.attempted[n-1]
	}
	if s.deps.Usage != nil {
		s.deps.Usage.Append(rec)
	}
	s.deps.Log.Info().Str("request_id", c.rid).Int("status", rec.Status).Str("code", rec.Code).
		Str("model", c.model).Int("attempts", len(c.attempted)).Int64("duration_ms", rec.DurMS).
		Msg("request")
}

// statusClientClosed and codeClientClosed record a client that left.
const (
	statusClientClosed = 499
	codeClientClosed   = "client_closed"
)

// sessionHeaders name a client's conversation, in the order trusted.
// Newer Codex CLIs spell it session-id on the wire.
var sessionHeaders = []string{"session_id", "session-id", "conversation_id"}

// affinityKey is the conversation a request belongs to: a session header,
// else the body's prompt_cache_key, else its previous_response_id. It is a
// fixed-size digest, so a client cannot make rotor hold megabytes of keys
// for the affinity's lifetime.
func affinityKey(h *fasthttp.RequestHeader, f bodyFields) string {
	for _, name := range sessionHeaders {
		if v := h.Peek(name); len(v) > 0 {
			return digestKey('s', v)
		}
	}
	if f.promptCacheKey != "" {
		return digestKey('p', []byte(f.promptCacheKey))
	}
	if f.previousResponseID != "" {
		return digestKey('r', []byte(f.previousResponseID))
	}
	return ""
}

// bodyFields are the top-level members of a Responses request that rotor
// itself reads. They are views into the body: valid only while it is.
type bodyFields struct {
	model, promptCacheKey, previousResponseID string
}

// readFields reads bodyFields from a body's top-level members. Of
// repeated keys the first counts, as with gjson.Get.
func readFields(body []byte, ms []member) bodyFields {
	var f bodyFields
	for _, m := range ms {
		var dst *string
		switch m.key(body) {
		case "model":
			dst = &f.model
		case "prompt_cache_key":
			dst = &f.promptCacheKey
		case "previous_response_id":
			dst = &f.previousResponseID
		}
		if dst != nil && *dst == "" {
			*dst, _ = m.str(body)
		}
	}
	return f
}

// digestKey is kind followed by the SHA-256 of v.
func digestKey(kind byte, v []byte) string {
	sum := sha256.Sum256(v)
	var b [1 + sha256.Size]byte
	b[0] = kind
	copy(b[1:], sum[:])
	return string(b[:])
}
