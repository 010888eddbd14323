package proxy

import (
	"cmp"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/backend"
	"github.com/rotorproxy/rotor/proxy/headerrules"
	"github.com/rotorproxy/rotor/proxy/jsonscan"
	"github.com/rotorproxy/rotor/proxy/upstream"
	"github.com/rotorproxy/rotor/proxy/websocket"
	"github.com/rotorproxy/rotor/rotation"
)

// The Responses API over WebSocket (docs/codex.md) is a second way in to
// the same forward loop. The transport is package websocket's: the
// socket, its frames, its upstream socket. This file is the wiring: every
// response.create frame is one request, read into a request and served
// by Server.serve with a responder that writes frames (wsResponder); an
// attempt goes up on the socket's upstream socket (sendFrame), and what
// its refusal means is classify's, as over HTTP.

// transportWebSocket names requests that came in as response.create
// frames, in their log line.
const transportWebSocket = "websocket"

// handshakeEchoes are the headers of an upstream's handshake answer that
// Codex reads on its own (docs/codex.md): the turn's sticky routing, the
// models list's version, the model, and whether past reasoning is
// counted upstream (without it Codex estimates and compacts sooner).
var handshakeEchoes = []string{backend.TurnStateHeader, "x-models-etag", "openai-model", "x-reasoning-included"}

// socket is one client's Responses WebSocket, as the request path sees
// it: the transport's socket and what each of its requests carries.
type socket struct {
	websocket.Socket
	s        *Server
	affinity string // for requests that name no conversation: the socket's own
	overHTTP bool   // an upstream refused one socket too many: this one goes over HTTP
}

// acceptSocket upgrades a request the guard has passed to a Responses
// WebSocket and serves it until either side closes it.
func (s *Server) acceptSocket(ctx *fasthttp.RequestCtx, r *request) {
	sk := &socket{s: s}
	sk.ID = r.id
	sk.TakeHeader(&ctx.Request.Header)
	sk.affinity = digestKey('w', []byte(r.id))
	s.dialEarly(sk, r.id)
	if sk.Up != nil {
		sk.Up.Echo(&ctx.Response.Header)
	}
	up := websocket.Upgrader{Sockets: &s.sockets, MaxBody: s.cfg.MaxBody, Log: &s.deps.Log,
		Refuse: func(reason error) {
			s.refuse(httpResponder{ctx}, r, rerr.Spec{Code: rerr.ProxyBadRequest, Message: reason.Error()}, nil)
		}}
	up.Upgrade(ctx, &sk.Socket, sk) // refused: Refuse has answered and logged it
}

// ServeFrame answers one frame. Frames other than response.create (such
// as response.processed) ask for no answer. It is false when a bug (a
// panic) ended the request: the socket is closed (panicked).
func (sk *socket) ServeFrame(fw *websocket.Writer, frame []byte, tooLarge bool) (ok bool) {
	s := sk.s
	r := &request{id: newRequestID(), header: &sk.Header, transport: transportWebSocket}
	w := &wsResponder{sk: sk, fw: fw}
	defer func() {
		// Nothing above run recovers: a panic here would end the process
		// and every stream in it.
		if v := recover(); v != nil {
			sk.panicked(w, r, v)
			ok = false
		}
	}()
	switch t := gjson.GetBytes(frame, "type").Str; {
	case tooLarge:
		s.refuse(w, r, rerr.Spec{Code: rerr.ProxyPayloadTooLarge,
			Message: "frame is larger than the proxy accepts (--max-body)",
			Extra:   []rerr.Field{{Key: "max_bytes", Value: s.cfg.MaxBody}}}, nil)
	case frame == nil:
		s.refuse(w, r, rerr.Spec{Code: rerr.ProxyBadRequest,
			Message: "rotor reads text frames only: send response.create as JSON text"}, nil)
	case t == "response.create":
		sk.create(w, r, frame)
	case t == "":
		s.refuse(w, r, rerr.Spec{Code: rerr.ProxyBadRequest,
			Message: "frame is not a JSON object with a \"type\""}, nil)
	}
	return true
}

// panicked ends a request a bug ended, as the HTTP handler ends its own
// with a 500: the panic is logged once, with the request id and the
// stack, and never shown to the client; the request is finished, its
// relay (and so its upstream connection) closed if it had one; and the
// socket, in a state no longer known, closes with 1011. The other
// sockets and requests go on.
func (sk *socket) panicked(w *wsResponder, r *request, v any) {
	s := sk.s
	s.panicLog(r.id, v).Str("socket", sk.ID).Msg("websocket request panic")
	func() {
		defer func() { recover() }() // the same bug again: the socket closes all the same
		switch {
		case w.relaying != nil:
			rl := w.relaying
			w.relaying = nil
			rl.CloseWithError(errPanicked) // it finishes r
		case r.counted && !r.finished:
			s.finish(r, ending{status: 500, code: rerr.ProxyError, warn: true})
		}
	}()
	sk.Fail(r.id)
}

// errPanicked ends the relay of an answer a bug interrupted.
var errPanicked = errors.New("rotor: a bug ended the answer")

// wsResponder answers one response.create frame on a socket: an error
// frame for a refusal, and for an answer every upstream event as a text
// frame of its own, written as it arrives (websocket.Writer.Answer). It
// also notes what the socket's history needs of the answer.
type wsResponder struct {
	sk *socket
	fw *websocket.Writer
	// watched is the last attempt's watch: its client may have left.
	watched *upstream.ClientWatch
	// relaying is the answer being written, until its relay is closed:
	// a request a bug ends closes it (socket.panicked).
	relaying *relay
	out      websocket.Output
}

func (w *wsResponder) gone() bool { return w.fw.Failed() || w.watched.HasLeft() }

// watch watches the socket's connection, which run does not read while a
// request is answered; a close frame is a client leaving too.
func (w *wsResponder) watch() *upstream.ClientWatch {
	w.watched = upstream.NewClientWatch(w.fw.NetConn(), true)
	return w.watched
}

func (w *wsResponder) refuse(resp rerr.Response, headers func(HeaderSetter)) {
	var hs websocket.ErrorHeaders
	if headers != nil {
		headers(&hs)
	}
	w.fw.Write(resp.Frame(hs))
}

// commit writes the answer event by event. The relay hands over SSE
// bytes; each data payload leaves as one frame the moment it is read.
func (w *wsResponder) commit(status int, upstream *fasthttp.ResponseHeader, body *relay, length int) {
	w.relaying = body
	if w.fw.Answer(body, body.isJSON, maxJSONUsage, &w.out) {
		w.fw.Write(rerr.Build(rerr.Spec{Code: "stream_interrupted", Status: 502,
			Message: "the upstream answered with one object larger than a frame rotor sends"}).Frame(nil))
	}
	w.relaying = nil
	body.CloseWithError(nil) // the relay knows from its own read whether the answer ended
}

// create serves a response.create frame: a warm-up is answered by rotor
// itself, any other is a request through the forward loop. The frame
// goes up as it is on the socket's own upstream socket; the HTTP body it
// stands for, and the frame with the conversation in full, are made only
// when an attempt needs them (request.asHTTP, sendFrame).
func (sk *socket) create(w *wsResponder, r *request, frame []byte) {
	var sc jsonscan.Scanned
	if !jsonscan.Scan(frame, &sc) || !sc.Object {
		sk.s.refuse(w, r, rerr.Spec{Code: rerr.ProxyBadRequest, Message: "frame is not a valid JSON object"}, nil)
		return
	}
	f := websocket.ReadFields(frame, sc.Members)
	if f.NoGenerate {
		sk.WarmUp(w.fw, "resp_"+strings.TrimPrefix(r.id, "rotor_"), f)
		sk.s.finish(r, ending{status: 200, code: "warm_up"})
		return
	}
	r.prior = sk.Prior(f)
	// Each request gets the socket's headers, to which the HTTP form
	// adds what the frame carries for them (session_id, x-codex-*).
	r.header = new(fasthttp.RequestHeader)
	sk.Header.CopyTo(r.header)
	r.op, r.socket, r.fallbackAffinity = opResponses, sk, sk.affinity
	r.body, r.frame, r.frameInput = frame, frame, f.Input
	sk.s.serve(w, r)
	sk.Remember(r.prior, f, &w.out, r.answeredBy)
}

// asHTTP turns a socket's request into the body of POST /responses, once:
// an attempt over HTTP needs it.
func (r *request) asHTTP() {
	if r.socket == nil || r.httpForm {
		return
	}
	var sc jsonscan.Scanned
	jsonscan.Scan(r.frame, &sc)
	r.body = rewriteFrame(r.frame, sc.Members, r.prior.With(r.frameInput), r.header)
	r.httpForm = true
	jsonscan.Scan(r.body, &r.scan) // what the adapters' edits read
}

// rewriteFrame is a response.create frame with the named exchange's items
// in front of its own input instead of the reference, when whole is set.
// With hdr set it is the body of POST /responses instead: without the
// frame's type, streamed, and with the members a frame carries in place
// of headers moved to hdr.
func rewriteFrame(frame []byte, ms []jsonscan.Member, whole []byte, hdr *fasthttp.RequestHeader) []byte {
	var add []byte
	stream := false
	var buf [jsonscan.TopMembers]edit
	edits := editsFor(&buf, len(ms))
	for i, m := range ms {
		switch k := m.Key(frame); {
		case hdr == nil:
			if whole != nil && (k == "previous_response_id" || k == "input") {
				edits[i] = drop
			}
		case k == "type", k == "generate":
			edits[i] = drop
		case websocket.IsFrameHeader(k):
			edits[i] = drop
			if v, ok := m.Str(frame); ok {
				hdr.Set(k, v)
			}
		case k == "client_metadata":
			websocket.MetadataHeaders(frame[m.ValStart:m.End], hdr)
		case k == "stream":
			stream = true
			if string(frame[m.ValStart:m.End]) != "true" {
				edits[i] = setTrue
			}
		case k == "previous_response_id", k == "input":
			if whole != nil {
				edits[i] = drop
			}
		}
	}
	if hdr != nil && !stream {
		add = append(add, `"stream":true`...)
	}
	if whole != nil {
		if len(add) > 0 {
			add = append(add, ',')
		}
		add = append(append(append(add, `"input":[`...), whole...), ']')
	}
	if hdr == nil && whole == nil {
		return frame
	}
	return splice(frame, ms, edits, add)
}

// sendFrame sends r's frame over the socket's upstream socket to account
// a, dialing one when the socket has none for a. ok is false when a's
// endpoint does not take sockets: r then goes over HTTP.
func (s *Server) sendFrame(r *request, ad Adapter, a *accounts.Account, sec *secrets.Secret) (ans *answer, f *failure, ok bool) {
	base := ad.base(a.BaseURL)
	w := s.endpoints.Way(base, a.ProxyURL)
	endpoint := w.Endpoint
	sk := r.socket
	if sk.overHTTP || s.noSockets.Has(endpoint) {
		return nil, nil, false
	}
	reused := sk.Up != nil && sk.Up.AccountID == a.ID
	if !reused {
		if f, ok := s.redial(r, ad, a, sec, base, &w); !ok || f != nil {
			return nil, f, ok
		}
	}
	// The client's watch closes the upstream socket if the client leaves
	// before the answer starts (upstream.ClientWatch, watchedAttempt).
	if !r.watch.Attach(sk.Up.NetConn()) {
		return nil, &failure{verdict: verdictNetworkError, err: upstream.ErrClientLeft, endpoint: endpoint}, true
	}
	frame := r.frame
	if r.prior != nil && r.prior.Up != sk.Up {
		// The exchange r names was not had on this upstream socket: it
		// cannot know it, so the conversation goes up whole.
		var sc jsonscan.Scanned
		jsonscan.Scan(r.frame, &sc)
		frame = rewriteFrame(r.frame, sc.Members, r.prior.With(r.frameInput), nil)
	}
	frame = s.forAccount(r, ad, a, sec, frame)
	first, sent, err := sk.Up.Send(frame, s.cfg.ResponseTimeout)
	if !r.redialed && (websocket.Expired(first, err) || reused && err != nil && !websocket.IsTimeout(err)) {
		// The upstream socket reached its lifetime (docs/codex.md), or, kept
		// idle since the last request, was closed meanwhile: a new one
		// to the same account, which knows nothing of the old one's
		// responses, so the request goes up whole. The client never
		// sees it, and the account is not blamed for it.
		s.deps.Log.Debug().Str("request_id", r.id).AnErr("upstream_error", err).Msg("upstream socket ended; redialing")
		sk.DropUpstream()
		r.redialed = true
		return s.sendFrame(r, ad, a, sec)
	}
	if !sent {
		sk.DropUpstream()
		return nil, &failure{verdict: verdictNetworkError, err: errors.New("cannot send the frame upstream"), endpoint: endpoint}, true
	}
	if err != nil {
		sk.DropUpstream()
		v := verdictNetworkError
		if websocket.IsTimeout(err) {
			v = verdictUnreachable // no answer within the response timeout
		}
		return nil, &failure{verdict: v, err: err, endpoint: endpoint}, true
	}
	if ref := websocket.ErrorFrame(first); ref != nil {
		sk.DropUpstream()
		return nil, s.refusalFailure(ref, sec, endpoint), true
	}
	resp := fasthttp.AcquireResponse()
	resp.Header.SetContentType("text/event-stream")
	resp.SetBodyStream(sk.Answer(first, s.cfg.StallTimeout), -1)
	r.answeredBy = sk.Up
	ans, f = s.readStart(r, resp, formAsIs)
	return ans, f, true
}

// redial gives r's socket a new upstream socket to account a, opened
// with the headers an HTTP request would carry. ok is false when a's
// endpoint, or a for this socket, takes no socket: r then goes over HTTP.
func (s *Server) redial(r *request, ad Adapter, a *accounts.Account, sec *secrets.Secret, base string, w *upstream.Way) (f *failure, ok bool) {
	sk := r.socket
	sk.DropUpstream()
	endpoint := w.Endpoint
	rt, err := s.exits.Of(w, sec.ProxyPassword)
	if err != nil {
		return &failure{verdict: verdictUnreachable, err: err, endpoint: endpoint}, true
	}
	h := websocket.DialHeader(r.header)
	s.ownIdentityHeaders(r, a.ID, func(k string) []byte { return []byte(h.Get(k)) }, h.Set)
	if s.mints.ForeignTurnState([]byte(h.Get(backend.TurnStateHeader)), a.ID) {
		h.Del(backend.TurnStateHeader)
	}
	ad.setHeaders(h, a.ChatGPTAccountID, *sec)
	d := websocket.Dialer{NetDial: upstream.DialWatched(r.watch, rt.Dial), TLSDial: upstream.DialWatched(r.watch, rt.DialTLS),
		HandshakeTimeout: cmp.Or(r.dialWait, s.cfg.ConnectTimeout)}
	up, hdr, ref, err := d.Dial(string(ad.appendURL(nil, base, r)), h, a.ID, handshakeEchoes, upstream.MaxErrorBody)
	switch {
	case err != nil:
		upstream.RaiseDialPanic(err)
		err = &upstream.DialError{Err: err}
		return &failure{verdict: classifyTransport(err), err: err, endpoint: endpoint}, true
	case ref == nil:
		if q := backend.QuotaOf(s.deps.Clock, hdr); q != nil {
			s.runtime().SetQuota(a.ID, *q)
		}
		s.endpoints.MarkUp(endpoint)
		s.mints.LearnTurnState(hdr.Peek(backend.TurnStateHeader), a.ID)
		sk.Up = up
		return nil, true
	case ref.Status < 400, ref.Status == http.StatusNotFound, ref.Status == http.StatusMethodNotAllowed,
		ref.Status == http.StatusUpgradeRequired, ref.Status == http.StatusNotImplemented:
		// An HTTP server without sockets: it answered the GET as a GET.
		// Remembered for the endpoint.
		s.noSockets.Add(endpoint)
		s.deps.Log.Info().Str("endpoint", endpoint).Msg("upstream refuses WebSockets; its requests go over HTTP")
		return nil, false
	}
	s.endpoints.MarkUp(endpoint)
	f = s.refusalFailure(ref, sec, endpoint)
	if f.status == http.StatusForbidden && f.verdict == verdictClientError {
		// A plain 403: too many sockets for the account (docs/codex.md).
		// Only this socket goes on over HTTP.
		sk.overHTTP = true
		s.deps.Log.Info().Str("socket", sk.ID).Msg("upstream refused another socket (403); this socket goes over HTTP")
		return nil, false
	}
	return f, true
}

// refusalFailure reads an upstream's refusal, a handshake's answer or an
// error frame before any output, as the failed HTTP answer it stands
// for: its status, its headers and its error object go through the same
// classify.
func (s *Server) refusalFailure(ref *websocket.Refusal, sec *secrets.Secret, endpoint string) *failure {
	f := &failure{status: ref.Status, endpoint: endpoint, upstreamID: string(ref.Header.Peek("x-request-id")), body: headerrules.Redact(ref.Body, sec)}
	f.verdict = classify(f.status, ref.Header, f.body)
	if f.verdict == verdictUsageLimit {
		f.limit = backend.LimitOf(s.deps.Clock.Now(), ref.Header, f.body)
	}
	return f
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
	key := cmp.Or(affinityKey(&sk.Header, bodyFields{}), sk.affinity)
	pick := rotation.Request{AffinityKey: key}
	ch, ref := s.deps.Selector.Pick(&pick)
	if ref != nil {
		return
	}
	a := &ch.Account
	ad := s.adapters.For(a.Kind)
	base := ad.base(a.BaseURL)
	w := s.endpoints.Way(base, a.ProxyURL)
	if s.noSockets.Has(w.Endpoint) || s.endpoints.IsDown(w.Endpoint) {
		return
	}
	sec, err := s.secrets.get(a.ID, s.runtime().TokensAt(a.ID))
	if err != nil {
		return
	}
	r := &request{id: id, header: &sk.Header, op: opResponses, socket: sk, dialWait: min(earlyDialWait, s.cfg.ConnectTimeout)}
	if f, ok := s.redial(r, ad, a, &sec, base, &w); ok && f == nil {
		s.deps.Selector.Bind(key, a.ID)
	}
}
