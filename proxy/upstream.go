package proxy

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/rotation"
)

// adapter turns a client request into the upstream request of one account
// kind (SPEC §4 Upstream adapters).
type adapter struct {
	paths [opCount]string // by op
	// configBase is the kind's upstream for an account that names none.
	configBase func(cfg *Config) string
	// prepare adds the kind's own headers. It takes values: the compiler
	// assumes a call through a func field keeps any pointer it is given,
	// which would move every request's account choice and secret to the
	// heap.
	prepare func(h HeaderSetter, chatgptAccountID string, sec secrets.Secret)
}

// base is the upstream of account a.
func (ad adapter) base(cfg *Config, a *accounts.Account) string {
	return cmp.Or(a.BaseURL, ad.configBase(cfg))
}

var adapters = map[accounts.Kind]adapter{
	accounts.KindChatGPT: {
		// Chat Completions are translated to the Codex backend's Responses.
		paths: [opCount]string{opResponses: "/codex/responses", opCompact: "/codex/responses/compact",
			opChat: "/codex/responses", opModels: "/codex/models"},
		configBase: func(cfg *Config) string { return cfg.ChatGPTBase },
		prepare: func(h HeaderSetter, chatgptAccountID string, sec secrets.Secret) {
			h.Set("Authorization", "Bearer "+sec.AccessToken)
			if chatgptAccountID != "" {
				h.Set("chatgpt-account-id", chatgptAccountID)
			}
			h.Set("OpenAI-Beta", "responses=experimental")
			h.Set("originator", "codex_cli_rs")
		},
	},
	accounts.KindAPIKey: {
		paths: [opCount]string{opResponses: "/responses", opCompact: "/responses/compact",
			opChat: "/chat/completions", opModels: "/models"},
		configBase: func(cfg *Config) string { return cfg.OpenAIBase },
		prepare: func(h HeaderSetter, _ string, sec secrets.Secret) {
			h.Set("Authorization", "Bearer "+sec.APIKey)
		},
	},
}

// HeaderSetter is the part of a request header an adapter writes; both
// fasthttp's and net/http's request headers have it.
type HeaderSetter interface{ Set(key, value string) }

// SetAccountHeaders writes the headers the upstream of a's kind needs: its
// credentials and, for ChatGPT accounts, the Codex backend's own headers.
// Other rotor code that calls an upstream (verify-flagged) uses it too, so
// the set lives in one place.
func SetAccountHeaders(h HeaderSetter, a *accounts.Account, sec *secrets.Secret) {
	adapters[a.Kind].prepare(h, a.ChatGPTAccountID, *sec)
}

// ModelsURL is the models list of a's upstream, its cheapest authenticated
// request; chatgptBase and openaiBase default as in Config.
func ModelsURL(chatgptBase, openaiBase string, a *accounts.Account) string {
	cfg := Config{ChatGPTBase: chatgptBase, OpenAIBase: openaiBase}
	cfg.defaults()
	ad := adapters[a.Kind]
	return strings.TrimRight(ad.base(&cfg, a), "/") + ad.paths[opModels]
}

// Prober builds an account's probe for `rotor verify-flagged`: its models
// list, with the headers this proxy would send, so a probe passes exactly
// when a request through rotor would. ChatGPTBase and OpenAIBase default
// as in Config.
type Prober struct{ ChatGPTBase, OpenAIBase string }

// ProbeRequest is a's probe, carrying sec only in its headers.
func (p Prober) ProbeRequest(ctx context.Context, a *accounts.Account, sec *secrets.Secret) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ModelsURL(p.ChatGPTBase, p.OpenAIBase, a), nil)
	if err != nil {
		return nil, err
	}
	if sec != nil {
		SetAccountHeaders(req.Header, a, sec)
	}
	req.Header.Set("Accept", "application/json")
	return req, nil
}

// dropRequestHeaders never reach an upstream: hop-by-hop headers, the
// client's credentials and cookies, headers naming the client's own org or
// project (wrong for another account), and Accept-Encoding, so the upstream
// answers uncompressed and rotor can read usage from the stream as it
// passes.
var dropRequestHeaders = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "proxy-authenticate": true,
	"proxy-authorization": true, "te": true, "trailer": true, "transfer-encoding": true, "upgrade": true,
	"host": true, "cookie": true, "x-api-key": true, "authorization": true, "content-length": true,
	"accept-encoding": true, "openai-organization": true, "openai-project": true, "origin": true,
	"chatgpt-account-id": true, "originator": true,
}

// dropResponseHeaders are not copied back to the client: hop-by-hop
// headers, framing rotor redoes, and anything that carries or asks for
// credentials, which belong to the account, not to the client.
var dropResponseHeaders = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "te": true, "trailer": true,
	"transfer-encoding": true, "upgrade": true, "content-length": true, "set-cookie": true,
	"set-cookie2": true, "authorization": true, "proxy-authorization": true, "proxy-authenticate": true,
	"www-authenticate": true, "cookie": true, "x-api-key": true,
	"x-request-id": true, "date": true, "server": true, "alt-svc": true,
}

// headerIn reports whether the header name k, in any case, is in m, without
// allocating for names of ordinary length.
func headerIn(m map[string]bool, k []byte) bool {
	var buf [64]byte
	if len(k) > len(buf) {
		return m[strings.ToLower(string(k))]
	}
	for i, c := range k {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return m[string(buf[:len(k)])]
}

// result is what one upstream attempt produced.
type result struct {
	out        outcome
	status     int
	err        error
	resp       *fasthttp.Response // outOK only: the caller owns it
	body       []byte             // non-2xx: the first errBodyMax bytes
	pending    []byte             // outOK: stream bytes already read, to send first
	assembled  []byte             // outOK: the Response object built from a whole stream
	ended      bool               // outOK: pending holds the whole stream
	resetAt    time.Time
	upstreamID string
	endpoint   string // where the attempt went, scheme://host:port
	shape      shape  // how the answer becomes the client's
}

const errBodyMax = 64 << 10

// attempt sends the call to the chosen account, refreshing a ChatGPT token
// once after a 401 and trying again on the same account.
func (s *Server) attempt(c *call, ch *rotation.Choice) *result {
	a := &ch.Account
	sec, err := s.secrets.get(a.ID, s.rt().TokensAt(a.ID))
	if err != nil {
		s.deps.Log.Warn().Str("request_id", c.rid).Int("account", ch.Index).Err(err).Msg("account has no usable secret")
		return &result{out: outUnauthorized, status: 401, err: err}
	}
	refreshed := false
	if s.needsRefresh(a, &sec) {
		refreshed = true
		if fresh, ok := s.refresh(c, ch, sec); ok {
			sec = fresh
		}
	}
	res := s.send(c, a, &sec)
	if res.out == outUnauthorized && s.canRefresh(a) && !refreshed {
		if fresh, ok := s.refresh(c, ch, sec); ok {
			res = s.send(c, a, &fresh)
		}
	}
	return res
}

func (s *Server) canRefresh(a *accounts.Account) bool {
	return a.Kind == accounts.KindChatGPT && s.deps.Refresher != nil
}

// needsRefresh is true when a ChatGPT access token expires within 5 minutes.
func (s *Server) needsRefresh(a *accounts.Account, sec *secrets.Secret) bool {
	return s.canRefresh(a) && !sec.ExpiresAt.IsZero() && sec.ExpiresAt.Sub(s.deps.Clock.Now()) < 5*time.Minute
}

func (s *Server) refresh(c *call, ch *rotation.Choice, stale secrets.Secret) (secrets.Secret, bool) {
	// Not the request's context: fasthttp's must not outlive the handler,
	// and a refresh cut off midway may have spent the single-use refresh
	// token without storing its successor.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fresh, err := s.deps.Refresher.Refresh(ctx, ch.Account, stale)
	if err != nil {
		s.deps.Log.Warn().Str("request_id", c.rid).Int("account", ch.Index).Err(err).Msg("token refresh failed")
		return secrets.Secret{}, false
	}
	s.secrets.put(ch.Account.ID, fresh)
	s.rt().TokensChanged(ch.Account.ID)
	return fresh, true
}

// send makes one upstream request and classifies the answer.
func (s *Server) send(c *call, a *accounts.Account, sec *secrets.Secret) *result {
	ad := adapters[a.Kind]
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	in := &c.ctx.Request
	base := ad.base(&s.cfg, a)
	uri := base + ad.paths[c.op]
	q := in.URI().QueryString()
	if c.op == opModels && a.Kind == accounts.KindChatGPT && !c.codexClient {
		// The Codex backend lists models for a Codex version; a generic
		// client names none.
		q = append([]byte("client_version="+codexClientVersion+"&"), q...)
	}
	if len(q) > 0 {
		uri += "?" + strings.TrimSuffix(string(q), "&")
	}
	req.SetRequestURI(uri)
	req.Header.SetMethodBytes(in.Header.Method())
	copyRequestHeaders(&req.Header, &in.Header)
	ad.prepare(&req.Header, a.ChatGPTAccountID, *sec)
	res := &result{endpoint: s.endpoints.of(base)}
	if c.op == opModels {
		if a.Kind == accounts.KindChatGPT && !c.codexClient {
			res.shape = shapeModelList
		}
	} else {
		body, sh, err := c.upstreamBody(a.Kind)
		if err != nil {
			res.out, res.status = outClientError, 400
			res.body = rerr.Build(rerr.Spec{Code: "invalid_request", Status: 400, Message: err.Error()}).Body
			return res
		}
		res.shape = sh
		req.SetBodyRaw(body)
	}

	resp := fasthttp.AcquireResponse()
	err := s.client.Do(req, resp)
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		res.out, res.err = classifyTransport(err), err
		return res
	}
	s.endpoints.markUp(res.endpoint)
	res.status, res.upstreamID = resp.StatusCode(), string(resp.Header.Peek("x-request-id"))
	now := s.deps.Clock.Now()
	if q := parseQuota(now, &resp.Header); q != nil {
		s.rt().SetQuota(a.ID, *q)
	}
	if res.status >= 200 && res.status < 300 {
		res.out, res.resp = outOK, resp
		switch {
		case res.shape == shapeModelList:
			s.settleModels(res)
		case sseAnswer(resp) && resp.BodyStream() != nil:
			s.settleStart(c, res)
		}
		return res
	}
	res.body = redact(readErrorBody(resp), sec)
	res.out = classify(res.status, &resp.Header, res.body)
	if res.out == outUsageLimit {
		res.resetAt = resetTime(now, &resp.Header, res.body)
	}
	fasthttp.ReleaseResponse(resp)
	return res
}

// codexClientVersion is the Codex CLI version rotor names when it lists a
// ChatGPT account's models for a client that is not Codex.
const codexClientVersion = "0.169.0"

// copyRequestHeaders copies the client's headers an upstream may see:
// none of dropRequestHeaders, and none that the client's Connection
// header names as hop-by-hop (RFC 9110 §7.6.1).
func copyRequestHeaders(dst, src *fasthttp.RequestHeader) {
	hop := src.Peek("Connection")
	for k, v := range src.All() {
		if passes(dropRequestHeaders, hop, k) {
			dst.AddBytesKV(k, v)
		}
	}
}

// passes reports whether header k crosses the proxy: it is not in drop,
// and the sender's Connection header (hop) does not name it as hop-by-hop.
// Both directions use it, as net/http/httputil's removeHopByHopHeaders does.
func passes(drop map[string]bool, hop, k []byte) bool {
	return !headerIn(drop, k) && (len(hop) == 0 || !namedIn(hop, k))
}

// namedIn reports whether the comma-separated list names k, in any case.
func namedIn(list, k []byte) bool {
	for len(list) > 0 {
		var item []byte
		item, list, _ = bytes.Cut(list, []byte{','})
		if bytes.EqualFold(bytes.TrimSpace(item), k) {
			return true
		}
	}
	return false
}

// redact replaces the account's own secrets wherever an upstream quoted
// them in an error body, before any of it can reach the client or a log.
func redact(body []byte, sec *secrets.Secret) []byte {
	for _, v := range [...]string{sec.APIKey, sec.AccessToken, sec.RefreshToken, sec.IDToken} {
		if len(v) >= 8 && bytes.Contains(body, []byte(v)) {
			body = bytes.ReplaceAll(body, []byte(v), []byte("[redacted]"))
		}
	}
	return body
}

// settleStart reads the start of a successful stream before anything is
// sent: all of it when the client wants one JSON object, else up to the
// first output event. A stream that fails before any output becomes a
// failed attempt, so the failover loop can still try another account.
func (s *Server) settleStart(c *call, res *result) {
	resp := res.resp
	var failure string
	var err error
	if asm := newAssembler(c, res.shape); asm != nil {
		res.assembled, failure, err = assemble(resp.BodyStream(), asm)
	} else {
		res.pending, failure, err = holdBack(resp.BodyStream())
		if err == io.EOF {
			// A short stream read to its end. The relay must not read the
			// body again: past its last chunk a keep-alive connection has
			// nothing more to say, and the read would wait for the stall.
			err, res.ended = nil, true
		}
	}
	switch {
	case err != nil:
		res.out, res.err = outNetworkError, err
	case failure != "":
		res.out, res.body = failedStreamOutcome(failure), []byte(`{"error":{"code":"`+failure+`"}}`)
	default:
		return
	}
	closeStream(resp, errCut)
	fasthttp.ReleaseResponse(resp)
	res.resp, res.pending, res.assembled = nil, nil, nil
}

// settleModels turns a ChatGPT account's Codex model catalog into
// OpenAI's model list, for clients other than Codex CLI.
func (s *Server) settleModels(res *result) {
	body := readErrorBody(res.resp) // bounded like an error body: a catalog is small
	res.assembled = modelList(body, s.deps.Clock.Now())
}

// readErrorBody reads at most errBodyMax bytes of an error answer and
// closes its stream; a longer body is cut and its connection discarded
// rather than drained.
func readErrorBody(resp *fasthttp.Response) []byte {
	bs := resp.BodyStream()
	if bs == nil {
		b := resp.Body()
		return append([]byte(nil), b[:min(len(b), errBodyMax)]...)
	}
	buf := make([]byte, 0, 4096)
	var err error
	for len(buf) < errBodyMax && err == nil {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		var n int
		n, err = bs.Read(buf[len(buf):min(cap(buf), errBodyMax)])
		buf = buf[:len(buf)+n]
	}
	if err == io.EOF {
		resp.CloseBodyStream()
	} else {
		closeStream(resp, errCut)
	}
	return buf
}

var errCut = errors.New("rotor: upstream body abandoned")

// closeStream closes resp's body stream with err, which makes fasthttp
// close the connection instead of returning a half-read one to its pool.
func closeStream(resp *fasthttp.Response, err error) {
	if rc, ok := resp.BodyStream().(fasthttp.ReadCloserWithError); ok {
		rc.CloseWithError(err)
	}
	resp.CloseBodyStream()
}

// Errors of the upstream client that classifyTransport reads.
var (
	errNoFreeConns = fasthttp.ErrNoFreeConns
	// errResponseTimeout is what the client returns when no byte of an
	// answer came within the response timeout (idleConn's deadline).
	errResponseTimeout = fasthttp.ErrTimeout
)

// newUpstreamClient returns the client for every upstream. Reads on an
// upstream connection have two bounds (idleConn): the first byte of an
// answer must come within the response timeout, and once it has, every
// read must make progress within the stall timeout. A fasthttp
// ReadTimeout would instead cap the whole stream.
func newUpstreamClient(cfg *Config) *fasthttp.Client {
	d := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}
	stall, response := cfg.StallTimeout, cfg.ResponseTimeout
	return &fasthttp.Client{
		Name:                          "rotor",
		NoDefaultUserAgentHeader:      true,
		StreamResponseBody:            true,
		DisableHeaderNamesNormalizing: false,
		DisablePathNormalizing:        true,
		MaxIdleConnDuration:           60 * time.Second,
		WriteTimeout:                  60 * time.Second,
		ReadBufferSize:                16 << 10,
		MaxResponseBodySize:           0,
		MaxConnsPerHost:               cfg.MaxUpstreamConns,
		MaxConnWaitTimeout:            cfg.ConnWait,
		Dial: func(addr string) (net.Conn, error) {
			conn, err := dialAside(d, addr)
			if err != nil {
				return nil, &dialError{err}
			}
			return &idleConn{Conn: conn, stall: stall, response: response}, nil
		},
		// Only a request that never reached the upstream is sent again: a
		// pooled keep-alive connection the server had already closed.
		RetryIfErr: func(_ *fasthttp.Request, attempts int, err error) (bool, bool) {
			return false, attempts == 1 && (errors.Is(err, io.EOF) || errors.Is(err, fasthttp.ErrConnectionClosed))
		},
	}
}

// dialAside connects on a goroutine of its own and waits for it. net's
// dial path is deep, and on top of a request's it would grow the stack of
// the goroutine serving the client from 8 to 16 KiB, which it then keeps
// for as long as the connection lives, streams included: 8 KiB per open
// stream. The dialing goroutine's stack is freed once it connects. (A TLS
// handshake still runs on the caller: fasthttp does it after Dial.)
func dialAside(d *net.Dialer, addr string) (net.Conn, error) {
	type dialed struct {
		conn net.Conn
		err  error
	}
	done := make(chan dialed, 1)
	go func() {
		conn, err := d.Dial("tcp", addr)
		done <- dialed{conn, err}
	}()
	r := <-done
	return r.conn, r.err
}

// idleConn gives every Read its own deadline: the response timeout while
// an answer has not started, the stall timeout once it has. So a slow
// answer is waited for, a stalled one is cut, and a healthy stream may
// last as long as it likes.
type idleConn struct {
	net.Conn
	stall, response time.Duration
	// awaiting is set by each write of a request and cleared by the first
	// byte of its answer. fasthttp writes and reads one request at a time
	// per connection, but from different goroutines over its life.
	awaiting atomic.Bool
}

func (c *idleConn) Write(p []byte) (int, error) {
	c.awaiting.Store(true)
	return c.Conn.Write(p)
}

func (c *idleConn) Read(p []byte) (int, error) {
	d := c.stall
	awaiting := c.awaiting.Load()
	if awaiting {
		d = c.response
	}
	if err := c.Conn.SetReadDeadline(time.Now().Add(d)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	if n > 0 && awaiting {
		c.awaiting.Store(false)
	}
	return n, err
}

// SetReadDeadline is a no-op: fasthttp sets whole-response deadlines, and
// idleConn's per-read deadline replaces them.
func (c *idleConn) SetReadDeadline(time.Time) error { return nil }

// secretCache keeps secrets in memory so a request does not call the
// keyring; an entry is read again once runtime state says another process
// changed the account's tokens, or after a 401.
type secretCache struct {
	src   SecretSource
	clock clock.Clock // the one changedAt is told by
	mu    sync.Mutex
	m     map[string]cachedSecret
}

type cachedSecret struct {
	sec secrets.Secret
	at  time.Time
}

func newSecretCache(src SecretSource, clock clock.Clock) *secretCache {
	return &secretCache{src: src, clock: clock, m: make(map[string]cachedSecret)}
}

// secretTTL bounds how stale a cached secret may be, so tokens another
// process refreshed are picked up even without a state notice.
const secretTTL = 30 * time.Second

// get returns the secret of id, read again when the cached copy is older
// than secretTTL or than changedAt, the last time any process changed it.
func (c *secretCache) get(id string, changedAt time.Time) (secrets.Secret, error) {
	c.mu.Lock()
	e, ok := c.m[id]
	c.mu.Unlock()
	if ok && c.clock.Now().Sub(e.at) < secretTTL && !changedAt.After(e.at) {
		return e.sec, nil
	}
	sec, err := c.src.Get(id)
	if err != nil {
		return secrets.Secret{}, err
	}
	c.put(id, sec)
	return sec, nil
}

func (c *secretCache) put(id string, sec secrets.Secret) {
	c.mu.Lock()
	if len(c.m) > 10_000 {
		clear(c.m) // bounded: a cache miss costs one backend read
	}
	c.m[id] = cachedSecret{sec: sec, at: c.clock.Now()}
	c.mu.Unlock()
}

// forget drops id so the next request reads its secret again.
func (c *secretCache) forget(id string) {
	c.mu.Lock()
	delete(c.m, id)
	c.mu.Unlock()
}
