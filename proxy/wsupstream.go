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
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/secrets"
	"github.com/rotorproxy/rotor/proxy/backend"
	"github.com/rotorproxy/rotor/proxy/headerrules"
	"github.com/rotorproxy/rotor/proxy/jsonscan"
	"github.com/rotorproxy/rotor/rotation"
)

// A request that came in on a socket goes up on a socket of its own to
// the account's endpoint (docs/codex.md): one upstream socket per client
// socket, kept while the same account serves it, so the upstream's
// per-connection state (previous_response_id, the prompt cache) holds.
// An endpoint that refuses the upgrade is served over HTTP instead, and
// remembered as such. Upstream frames are handed to the forward loop as
// the SSE bytes an HTTP answer would carry, so the hold-back, the relay
// and the failover table are the HTTP path's own.

// socketBeta is the OpenAI-Beta value of a Responses WebSocket.
const socketBeta = "responses_websockets=2026-02-06"

// upstreamSocket is a client socket's connection to its account's
// endpoint.
type upstreamSocket struct {
	conn      *websocket.Conn
	accountID string
	echo      http.Header // the handshake answer's headers Codex reads (handshakeEchoes)
}

// handshakeEchoes are the headers of an upstream's handshake answer that
// Codex reads on its own (docs/codex.md): the turn's sticky routing, the
// models list's version, the model, and whether past reasoning is
// counted upstream (without it Codex estimates and compacts sooner).
var handshakeEchoes = []string{turnStateHeader, "x-models-etag", "openai-model", "x-reasoning-included"}

// noSockets remembers the endpoints that refused a WebSocket upgrade.
type noSockets struct {
	mu sync.Mutex
	m  map[string]bool
}

func (n *noSockets) has(ep string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.m[ep]
}

func (n *noSockets) add(ep string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.m == nil || len(n.m) >= maxBases {
		n.m = make(map[string]bool) // bounded: a forgotten endpoint costs one refused upgrade
	}
	n.m[ep] = true
}

// sendFrame sends r's frame over the socket's upstream socket to account
// a, dialing one when the socket has none for a. ok is false when a's
// endpoint does not take sockets: r then goes over HTTP.
func (s *Server) sendFrame(r *request, ad Adapter, a *accounts.Account, sec *secrets.Secret) (ans *answer, f *failure, ok bool) {
	base := ad.base(a.BaseURL)
	w := s.endpoints.way(base, a.ProxyURL)
	endpoint := w.endpoint
	sk := r.socket
	if sk.overHTTP || s.noSockets.has(endpoint) {
		return nil, nil, false
	}
	reused := sk.up != nil && sk.up.accountID == a.ID
	if !reused {
		if f, ok := s.redial(r, ad, a, sec, base, &w); !ok || f != nil {
			return nil, f, ok
		}
	}
	// The client's watch closes the upstream socket if the client leaves
	// before the answer starts (clientWatch, watchedAttempt).
	if !r.watch.attach(sk.up.conn.NetConn()) {
		return nil, &failure{verdict: verdictNetworkError, err: errClientLeft, endpoint: endpoint}, true
	}
	frame := r.frame
	if r.prior != nil && r.prior.up != sk.up {
		// The exchange r names was not had on this upstream socket: it
		// cannot know it, so the conversation goes up whole.
		var sc jsonscan.Scanned
		jsonscan.Scan(r.frame, &sc)
		frame = rewriteFrame(r.frame, sc.Members, r.wholeInput(), nil)
	}
	frame = s.forAccount(r, ad, a, sec, frame)
	conn := sk.up.conn
	var first []byte
	err := conn.SetWriteDeadline(time.Now().Add(socketWriteWait))
	if err == nil {
		err = conn.WriteMessage(websocket.TextMessage, frame)
	}
	sent := err == nil
	if sent {
		first, err = readFrameText(conn, s.cfg.ResponseTimeout)
	}
	if !r.redialed && (socketExpired(first, err) || reused && err != nil && !isTimeout(err)) {
		// The upstream socket reached its lifetime (docs/codex.md), or, kept
		// idle since the last request, was closed meanwhile: a new one
		// to the same account, which knows nothing of the old one's
		// responses, so the request goes up whole. The client never
		// sees it, and the account is not blamed for it.
		s.deps.Log.Debug().Str("request_id", r.id).AnErr("upstream_error", err).Msg("upstream socket ended; redialing")
		sk.dropUpstream()
		r.redialed = true
		return s.sendFrame(r, ad, a, sec)
	}
	if !sent {
		sk.dropUpstream()
		return nil, &failure{verdict: verdictNetworkError, err: errors.New("cannot send the frame upstream"), endpoint: endpoint}, true
	}
	if err != nil {
		sk.dropUpstream()
		v := verdictNetworkError
		if isTimeout(err) {
			v = verdictUnreachable // no answer within the response timeout
		}
		return nil, &failure{verdict: v, err: err, endpoint: endpoint}, true
	}
	if gjson.GetBytes(first, "type").Str == "error" && gjson.GetBytes(first, "status").Int() >= 400 {
		sk.dropUpstream()
		return nil, s.frameFailure(first, sec, endpoint), true
	}
	resp := fasthttp.AcquireResponse()
	resp.Header.SetContentType("text/event-stream")
	resp.SetBodyStream(&frameReader{sk: sk, up: sk.up, stall: s.cfg.StallTimeout, pending: sseFrame(nil, first),
		ended: terminalEvents[gjson.GetBytes(first, "type").Str]}, -1)
	r.answeredBy = sk.up
	ans, f = s.readStart(r, resp, formAsIs)
	return ans, f, true
}

// redial gives r's socket a new upstream socket to account a. ok is false
// when a's endpoint, or a for this socket, takes no socket: r then goes
// over HTTP.
func (s *Server) redial(r *request, ad Adapter, a *accounts.Account, sec *secrets.Secret, base string, w *way) (f *failure, ok bool) {
	sk := r.socket
	sk.dropUpstream()
	up, f, refused := s.dialUpstream(r, ad, a, sec, base, w)
	switch refused {
	case refusedByEndpoint:
		s.noSockets.add(w.endpoint)
		s.deps.Log.Info().Str("endpoint", w.endpoint).Msg("upstream refuses WebSockets; its requests go over HTTP")
		return nil, false
	case refusedForAccount:
		// Too many sockets for the account (docs/codex.md): this socket goes
		// on over HTTP.
		sk.overHTTP = true
		s.deps.Log.Info().Str("socket", sk.id).Msg("upstream refused another socket (403); this socket goes over HTTP")
		return nil, false
	}
	sk.up = up
	return f, true
}

// refusal is why an upstream refused a socket that is still served over
// HTTP.
type refusal int

const (
	notRefused refusal = iota
	// refusedByEndpoint: an HTTP server without sockets (any status but
	// 101 below 400, or 404, 405, 426, 501); remembered for the endpoint.
	refusedByEndpoint
	// refusedForAccount: a plain 403, the backend's answer to one socket
	// too many for the account; only this socket goes over HTTP.
	refusedForAccount
)

// dialUpstream opens a socket to a's endpoint with the headers an HTTP
// request would carry; refused says why an upstream that answered
// without a socket is still to be asked over HTTP.
func (s *Server) dialUpstream(r *request, ad Adapter, a *accounts.Account, sec *secrets.Secret, base string, w *way) (up *upstreamSocket, f *failure, refused refusal) {
	endpoint := w.endpoint
	rt, err := s.exits.of(w, sec)
	if err != nil {
		return nil, &failure{verdict: verdictUnreachable, err: err, endpoint: endpoint}, notRefused
	}
	h := http.Header{}
	hop := r.header.Peek("Connection")
	for k, v := range r.header.All() {
		if headerrules.RequestPasses(hop, k) && !bytes.EqualFold(k, []byte("Content-Type")) {
			h.Add(string(k), string(v))
		}
	}
	s.ownIdentityHeaders(r, a.ID, func(k string) []byte { return []byte(h.Get(k)) }, h.Set)
	if s.foreignTurnState([]byte(h.Get(turnStateHeader)), a.ID) {
		h.Del(turnStateHeader)
	}
	ad.setHeaders(h, a.ChatGPTAccountID, *sec)
	h.Set("OpenAI-Beta", socketBeta)
	tlsDial := dialWatched(r, rt.dialTLS)
	d := websocket.Dialer{
		NetDial: dialWatched(r, rt.dial),
		// wss: the TLS handshake is the connector's, as for HTTP.
		NetDialTLSContext: func(_ context.Context, network, addr string) (net.Conn, error) { return tlsDial(network, addr) },
		HandshakeTimeout:  cmp.Or(r.dialWait, s.cfg.ConnectTimeout),
		EnableCompression: true,
	}
	url := socketURL(ad.url(base, r))
	conn, resp, err := d.Dial(url, h)
	if err == nil {
		if q := backend.ParseQuota(s.deps.Clock.Now(), handshakeHeader(resp)); q != nil {
			s.runtime().SetQuota(a.ID, *q)
		}
		s.endpoints.markUp(endpoint)
		s.learnTurnState([]byte(resp.Header.Get(turnStateHeader)), a.ID)
		up := &upstreamSocket{conn: conn, accountID: a.ID, echo: http.Header{}}
		for _, k := range handshakeEchoes {
			if v := resp.Header.Get(k); v != "" {
				up.echo.Set(k, v)
			}
		}
		return up, nil, notRefused
	}
	if resp == nil {
		raiseDialPanic(err)
		err = &dialError{err}
		return nil, &failure{verdict: classifyTransport(err), err: err, endpoint: endpoint}, notRefused
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode < 400, resp.StatusCode == http.StatusNotFound, resp.StatusCode == http.StatusMethodNotAllowed,
		resp.StatusCode == http.StatusUpgradeRequired, resp.StatusCode == http.StatusNotImplemented:
		// An HTTP server without sockets: it answered the GET as a GET.
		return nil, nil, refusedByEndpoint
	}
	s.endpoints.markUp(endpoint)
	hdr := handshakeHeader(resp)
	body := make([]byte, 0, 4096)
	for len(body) < errBodyMax {
		n, rerr := resp.Body.Read(body[len(body):min(cap(body), errBodyMax)])
		body = body[:len(body)+n]
		if rerr != nil {
			break
		}
		if len(body) == cap(body) {
			body = append(body, 0)[:len(body)]
		}
	}
	f = &failure{status: resp.StatusCode, endpoint: endpoint, upstreamID: resp.Header.Get("x-request-id"), body: headerrules.Redact(body, sec)}
	f.verdict = classify(f.status, hdr, f.body)
	if f.status == http.StatusForbidden && f.verdict == verdictClientError {
		return nil, nil, refusedForAccount
	}
	if f.verdict == verdictUsageLimit {
		f.limit = backend.LimitOf(s.deps.Clock.Now(), hdr, f.body)
	}
	return nil, f, notRefused
}

// frameFailure reads an upstream error frame before any output as the
// failed HTTP answer it stands for: its status, its headers and its error
// object go through the same classify.
func (s *Server) frameFailure(frame []byte, sec *secrets.Secret, endpoint string) *failure {
	hdr := new(fasthttp.ResponseHeader)
	gjson.GetBytes(frame, "headers").ForEach(func(k, v gjson.Result) bool {
		hdr.Set(k.Str, v.String())
		return true
	})
	f := &failure{status: int(gjson.GetBytes(frame, "status").Int()), endpoint: endpoint,
		upstreamID: string(hdr.Peek("x-request-id")), body: headerrules.Redact(bytes.Clone(frame), sec)}
	f.verdict = classify(f.status, hdr, f.body)
	if f.verdict == verdictUsageLimit {
		f.limit = backend.LimitOf(s.deps.Clock.Now(), hdr, f.body)
	}
	return f
}

// codeSocketExpired is the error the backend sends on a socket that has
// lived its 60 minutes.
const codeSocketExpired = "websocket_connection_limit_reached"

// socketExpired reports whether an upstream socket's answer (its first
// frame, or the error reading it) says the socket has lived too long: the
// error frame for it, or a close with 1008 (policy) in its place.
func socketExpired(first []byte, err error) bool {
	if err != nil {
		return websocket.IsCloseError(err, websocket.ClosePolicyViolation)
	}
	return bytes.Contains(first, []byte(codeSocketExpired)) && gjson.GetBytes(first, "type").Str == "error" &&
		(gjson.GetBytes(first, "error.code").Str == codeSocketExpired || gjson.GetBytes(first, "code").Str == codeSocketExpired)
}

// handshakeHeader is resp's headers as a fasthttp response header, which
// classify, resetTime and parseQuota read.
func handshakeHeader(resp *http.Response) *fasthttp.ResponseHeader {
	hdr := new(fasthttp.ResponseHeader)
	for k, vs := range resp.Header {
		for _, v := range vs {
			hdr.Add(k, v)
		}
	}
	return hdr
}

// socketURL is an http(s) URL as the ws(s) URL of the same place.
func socketURL(u string) string {
	if rest, ok := strings.CutPrefix(u, "https://"); ok {
		return "wss://" + rest
	}
	return "ws://" + strings.TrimPrefix(u, "http://")
}

// readFrameText reads the next text frame, waiting at most wait.
func readFrameText(conn *websocket.Conn, wait time.Duration) ([]byte, error) {
	for {
		if err := conn.SetReadDeadline(time.Now().Add(wait)); err != nil {
			return nil, err
		}
		typ, data, err := conn.ReadMessage()
		if err != nil || typ == websocket.TextMessage {
			return data, err
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// sseFrame appends frame as one SSE event.
func sseFrame(dst, frame []byte) []byte {
	dst = append(dst, "data: "...)
	dst = append(dst, frame...)
	return append(dst, '\n', '\n')
}

// terminalEvents end an answer on a socket: after one, the socket is
// ready for the next request.
var terminalEvents = map[string]bool{
	"response.completed": true, "response.done": true, "response.incomplete": true,
	"response.failed": true, "error": true,
}

// frameReader is an upstream socket's answer as the SSE bytes of an HTTP
// answer: each text frame one event. It ends after the answer's last
// event; closed cleanly after that, the socket stays for the next
// request, closed any other way it is dropped.
type frameReader struct {
	sk      *socket
	up      *upstreamSocket
	stall   time.Duration
	pending []byte
	off     int
	ended   bool
	closed  bool
}

func (fr *frameReader) Read(p []byte) (int, error) {
	for fr.off == len(fr.pending) {
		if fr.ended {
			return 0, io.EOF
		}
		frame, err := readFrameText(fr.up.conn, fr.stall)
		if err != nil {
			return 0, err
		}
		fr.pending, fr.off = sseFrame(fr.pending[:0], frame), 0
		fr.ended = terminalEvents[gjson.GetBytes(frame, "type").Str]
	}
	n := copy(p, fr.pending[fr.off:])
	fr.off += n
	return n, nil
}

// CloseWithError ends the answer: err nil after its last event keeps the
// socket, anything else drops it. Only the first call counts.
func (fr *frameReader) CloseWithError(err error) error {
	if fr.closed {
		return nil
	}
	fr.closed = true
	if err != nil || !fr.ended || fr.off < len(fr.pending) {
		if fr.sk.up == fr.up {
			fr.sk.dropUpstream()
		}
	}
	return nil
}

// dropUpstream closes the socket's upstream socket, if it has one.
func (sk *socket) dropUpstream() {
	if sk.up != nil {
		sk.up.conn.Close()
		sk.up = nil
	}
}

// earlyDialWait bounds what dialEarly adds to the client's handshake: an
// upstream slower than that is dialed again by the first request, with
// the whole ConnectTimeout.
const earlyDialWait = 2 * time.Second

// dialEarly picks the account that is to serve the socket sk and opens
// its upstream socket while the client's handshake waits (docs/codex.md), so
// the handshake's answer carries what the upstream's did
// (handshakeEchoes), and binds the socket's conversation to that account
// so its first request goes there. It is best effort and charges
// nobody: when it cannot, the first request picks and dials as always.
func (s *Server) dialEarly(sk *socket, id string) {
	key := cmp.Or(affinityKey(&sk.header, bodyFields{}), sk.affinity)
	pick := rotation.Request{AffinityKey: key}
	ch, ref := s.deps.Selector.Pick(&pick)
	if ref != nil {
		return
	}
	a := &ch.Account
	ad := s.adapters.For(a.Kind)
	base := ad.base(a.BaseURL)
	w := s.endpoints.way(base, a.ProxyURL)
	if s.noSockets.has(w.endpoint) || s.endpoints.isDown(w.endpoint) {
		return
	}
	sec, err := s.secrets.get(a.ID, s.runtime().TokensAt(a.ID))
	if err != nil {
		return
	}
	r := &request{id: id, header: &sk.header, op: opResponses, socket: sk, dialWait: min(earlyDialWait, s.cfg.ConnectTimeout)}
	if f, ok := s.redial(r, ad, a, &sec, base, &w); ok && f == nil {
		s.deps.Selector.Bind(key, a.ID)
	}
}
