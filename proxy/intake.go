package proxy

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"

	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/backend"
	"github.com/rotorproxy/rotor/proxy/promtext"
	"github.com/rotorproxy/rotor/proxy/websocket"
	"github.com/rotorproxy/rotor/rotation"
)

// op is what a client asked for; each adapter maps it to an upstream URL.
type op int

const (
	opResponses op = iota
	opCompact
	opChat
	opModels
	opHealth // answered by rotor itself, never forwarded
	// Codex's usage limits, also answered by rotor itself (answerUsageLimits).
	opUsageLimits
	// The metrics, answered by rotor itself (answerMetrics).
	opMetrics
	// The account the next new conversation goes to, answered by rotor
	// itself (answerNext).
	opNext
	opCount
)

type route struct {
	method string
	op     op
}

// routes is the proxy's whole surface (docs/selection.md, docs/clients.md).
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
	// Codex CLI reads its /status usage limits here (docs/codex.md): the first
	// when chatgpt_base_url contains /backend-api, the second otherwise.
	"/backend-api/wham/usage": {fasthttp.MethodGet, opUsageLimits},
	"/api/codex/usage":        {fasthttp.MethodGet, opUsageLimits},
	metricsPath:               {fasthttp.MethodGet, opMetrics},
	NextPath:                  {fasthttp.MethodGet, opNext},
}

// metricsPath is where the metrics are served; it takes the client key
// or a dashboard cookie (docs/cost.md).
const metricsPath = "/metrics"

// answerMetrics writes the registry in Prometheus's text format, straight
// into the fasthttp response's body.
func (s *Server) answerMetrics(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType(promtext.ContentType)
	ctx.Response.SetBodyRaw(s.metrics.Registry().Append(make([]byte, 0, 16<<10)))
}

// surface is the list of routes a 404 names.
const surface = "POST /v1/responses (or a WebSocket on GET /v1/responses), POST /v1/responses/compact, POST /v1/chat/completions, GET /v1/models, GET /healthz, GET /backend-api/wham/usage (also /api/codex/usage), GET /metrics and GET /rotor/next"

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

// handle is the fasthttp handler, the HTTP way in: guard, route, read the
// body, then the forward loop, which answers through an httpResponder.
//
// Its frame stays on the stack below the whole forward loop, as the
// routing's and the body read's would if they were inlined here: they are
// functions of their own (route, serveHTTP), so that a serving goroutine
// fits in 8 KiB of stack (see send).
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	r := newHTTPRequest(&ctx.Request.Header)
	defer s.handled(ctx, r)
	ctx.Response.Header.Set("x-request-id", r.id)
	if o, ok := s.route(ctx, r); ok {
		s.serveHTTP(ctx, r, o)
	}
}

// handled ends handle: it releases r unless its answer's relay has it, and
// recovers a panic. fasthttp does not recover handler panics: one would
// end the process and every stream in it. A bug becomes this request's
// 500 instead, logged with its stack, never shown to the client.
func (s *Server) handled(ctx *fasthttp.RequestCtx, r *request) {
	handedOff := r.handedOff
	if v := recover(); v != nil {
		s.panicLog(r.id, v).Msg("handler panic")
		id, answer := r.id, r
		ctx.Response.Reset() // a committed answer's relay finishes, and releases, r here
		ctx.Response.Header.Set("x-request-id", id)
		if handedOff {
			answer = &request{id: id, header: &ctx.Request.Header} // answers the 500 alone
		}
		s.refuse(httpResponder{ctx}, answer, rerr.Spec{Code: rerr.ProxyError,
			Message: "rotor failed on this request (a bug); it is logged with request_id"}, nil)
	}
	if !handedOff {
		r.release()
	}
}

// route guards and routes a request, and answers it unless it is one
// serveHTTP forwards: then it reports true, with its operation.
//
//go:noinline
func (s *Server) route(ctx *fasthttp.RequestCtx, r *request) (op, bool) {
	w := httpResponder{ctx}
	page := s.deps.Pages != nil && s.deps.Pages.Owns(ctx.Path())
	code, signedIn := s.guard(&ctx.Request.Header, page)
	if code == rerr.ProxyUnauthorized && s.dashboardSession(ctx) {
		code = "" // the metrics, seen from the dashboard's session
	}
	if code != "" {
		// A stranger's upload is never read: the connection ends after
		// the answer, unless there was nothing to read.
		s.refuse(w, r, rerr.Spec{Code: code, Message: guardMessages[code]}, nil)
		closeAfterAnswer(ctx)
		return 0, false
	}
	if page {
		s.deps.Pages.ServePage(ctx)
		return 0, false
	}
	if websocket.UpgradeRequested(&ctx.Request.Header) && websocket.Paths[string(ctx.Path())] {
		s.acceptSocket(ctx, r)
		return 0, false
	}
	rt, ok := routes[string(ctx.Path())]
	if !ok && signedIn != "" && bytes.HasPrefix(ctx.Path(), []byte(backend.Prefix)) {
		s.passThrough(ctx, r, signedIn)
		return 0, false
	}
	if !ok || string(ctx.Method()) != rt.method {
		s.refuse(w, r, rerr.Spec{Code: rerr.ProxyNotFound,
			Message: fmt.Sprintf("rotor does not serve %s %s; it serves %s", ctx.Method(), ctx.Path(), surface)}, nil)
		closeAfterAnswer(ctx)
		return 0, false
	}
	if rt.op == opHealth {
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"status":"ok"}`)
		return 0, false
	}
	if rt.op == opUsageLimits {
		s.answerUsageLimits(ctx)
		return 0, false
	}
	if rt.op == opMetrics {
		s.answerMetrics(ctx)
		return 0, false
	}
	if rt.op == opNext {
		s.answerNext(ctx)
		return 0, false
	}
	return rt.op, true
}

// serveHTTP reads the body of a request route let through and serves it.
func (s *Server) serveHTTP(ctx *fasthttp.RequestCtx, r *request, o op) {
	body, held, spec := s.readBody(ctx)
	defer held.release()
	if spec != nil {
		s.refuseBody(ctx, r, spec)
		return
	}
	r.op, r.body, r.query = o, body, ctx.URI().QueryString()
	s.serve(httpResponder{ctx}, r)
}

// refuseBody answers a body readBody refused.
//
//go:noinline
func (s *Server) refuseBody(ctx *fasthttp.RequestCtx, r *request, spec *rerr.Spec) {
	s.refuse(httpResponder{ctx}, r, *spec, nil)
	closeAfterAnswer(ctx)
}

var guardMessages = map[string]string{
	rerr.ProxyForbiddenHost: "rotor only answers loopback requests (Host, Origin and request target must be loopback)",
	rerr.ProxyUnauthorized: "missing or wrong client key: send the key from proxy.json as Authorization: Bearer <key> or x-api-key (\"rotor env\" prints it); " +
		"Codex signed in with ChatGPT is let in with its own token once rotor has that account (\"rotor import codex\")",
}

// guard applies the checks every request passes before routing: loopback
// Host, origin-form target, loopback Origin, then the client's credential,
// except on a dashboard page (which takes its cookie instead). It returns
// the error code to answer with, "" to go on; signedIn is the account
// whose access token the client sent in place of the client key (docs/codex.md), "" for the client key.
func (s *Server) guard(h *fasthttp.RequestHeader, page bool) (code, signedIn string) {
	uri := h.RequestURI()
	if len(uri) == 0 || uri[0] != '/' {
		return rerr.ProxyForbiddenHost, "" // absolute-form or asterisk-form target
	}
	if !loopbackHostPort(h.Host()) {
		return rerr.ProxyForbiddenHost, ""
	}
	if o := h.Peek("Origin"); len(o) > 0 && !loopbackOrigin(o) {
		return rerr.ProxyForbiddenHost, ""
	}
	if page || s.authorized(h) {
		return "", ""
	}
	if id := s.tokenAccount(bearerOf(h)); id != "" {
		return "", id
	}
	return rerr.ProxyUnauthorized, ""
}

// dashboardSession reports whether a request for the metrics, the one
// path outside the dashboard that takes its cookie in place of the client
// key (docs/cost.md), carries a live session. The guard's Host and Origin
// checks still apply: a GET, like the dashboard's own JSON.
func (s *Server) dashboardSession(ctx *fasthttp.RequestCtx) bool {
	return s.deps.Pages != nil && string(ctx.Path()) == metricsPath && s.deps.Pages.Session(ctx)
}

// authorized compares the presented key with the client key in constant
// time, through SHA-256 digests so the length leaks nothing either.
func (s *Server) authorized(h *fasthttp.RequestHeader) bool {
	key := h.Peek("x-api-key")
	if len(key) == 0 {
		key = bearerOf(h)
	}
	if len(key) == 0 {
		return false
	}
	d := sha256.Sum256(key)
	return subtle.ConstantTimeCompare(d[:], s.keyDigest.Load()[:]) == 1
}

// loopbackHostPort reports whether a Host header names a loopback literal
// or localhost, with any port: a port is digits only, so nothing can
// hide another host behind it ("localhost:80@evil.com").
func loopbackHostPort(hp []byte) bool {
	host, port := hp, []byte(nil)
	switch {
	case len(hp) > 0 && hp[0] == '[':
		end := bytes.IndexByte(hp, ']')
		if end < 0 {
			return false
		}
		host, port = hp[1:end], hp[end+1:]
		if len(port) > 0 {
			if port[0] != ':' {
				return false
			}
			port = port[1:]
		}
	case bytes.Count(hp, []byte{':'}) == 1:
		i := bytes.IndexByte(hp, ':')
		host, port = hp[:i], hp[i+1:]
	}
	for _, c := range port {
		if c < '0' || c > '9' {
			return false
		}
	}
	// The hosts clients name, answered without making a string of host
	// (LoopbackHost's parse keeps its argument): every request asks.
	if string(host) == "127.0.0.1" || bytes.EqualFold(host, []byte("localhost")) {
		return true
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
	r := &request{id: newRequestID(), header: &ctx.Request.Header}
	w := httpResponder{ctx}
	ctx.Response.Header.Set("x-request-id", r.id)
	defer lingerAfterParseError(ctx)
	var small *fasthttp.ErrSmallBuffer
	if errors.As(err, &small) {
		s.refuse(w, r, rerr.Spec{Code: rerr.ProxyHeadersTooLarge,
			Message: fmt.Sprintf("request headers are larger than the proxy accepts (%d KiB)", MaxHeaderBytes>>10)}, nil)
		return
	}
	if code, _ := s.guard(&ctx.Request.Header, false); code != "" {
		s.refuse(w, r, rerr.Spec{Code: code, Message: guardMessages[code]}, nil)
		return
	}
	s.refuse(w, r, rerr.Spec{Code: rerr.ProxyBadRequest, Message: "malformed HTTP request"}, nil)
}

// NextPath is where a serve says which account its next new conversation
// goes to, and why (docs/commands.md "rotation status"). Only this process can
// say: the pick reads what it knows in memory (its own tie-breaker, the
// accounts it picked last, what it learned since state.json was last
// written), so `rotor rotation status` asks it rather than guessing.
const NextPath = "/rotor/next"

// Next is the answer of NextPath: the account (1-based index in the
// serve's pool, and its id) a new conversation would get now, and why;
// Index 0 and AccountID "" when none can serve. PID is the serve's.
type Next struct {
	Index     int    `json:"index"`
	AccountID string `json:"account_id"`
	Reason    string `json:"reason"`
	PID       int    `json:"pid"`
}

// answerNext answers NextPath with the pick the forward loop would make
// for a new conversation on /v1/responses, without making it: the same
// selector, and the same accounts left out (those behind an upstream
// endpoint that failed lately).
func (s *Server) answerNext(ctx *fasthttp.RequestCtx) {
	sel := s.deps.Selector
	r := &request{op: opResponses}
	pick := rotation.Request{}
	if s.endpoints.AnyDown() {
		pick.Skip = func(a *accounts.Account) string { return s.skip(r, a) }
	}
	i, why := sel.NextFor(&pick)
	n := Next{Index: i, Reason: why, PID: os.Getpid()}
	if p := sel.Pool(); i > 0 && i <= len(p.Accounts) {
		n.AccountID = p.Accounts[i-1].ID
	}
	body, _ := json.Marshal(n)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}
