package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	rerr "github.com/rotorproxy/rotor/errors"
)

// The Responses API over WebSocket (docs/codex.md) is a second way in to the
// same forward loop: every response.create frame on a socket is one
// request, read into a request and served by Server.serve with a
// responder that writes frames (wsResponder, wsanswer.go). This file
// holds the socket itself: the upgrade, reading frames, keeping an idle
// socket alive, and closing every socket on shutdown.

// socketPaths are where a Responses WebSocket is opened.
var socketPaths = map[string]bool{
	"/v1/responses": true, "/responses": true, "/backend-api/codex/responses": true,
}

// Socket timings: a ping every socketPing keeps an idle socket (and any
// NAT or proxy between) alive; a client that has answered nothing for
// socketQuiet is gone. A frame to a client must leave within
// socketWriteWait.
const (
	socketPing      = 30 * time.Second
	socketQuiet     = 2*socketPing + 10*time.Second
	socketWriteWait = 30 * time.Second
)

// upgradeRequested reports whether h asks to switch to WebSocket.
func upgradeRequested(h *fasthttp.RequestHeader) bool {
	return h.IsGet() && bytes.EqualFold(h.Peek("Upgrade"), []byte("websocket"))
}

// socketHeaders are the handshake headers that are about the socket, not
// about the requests sent over it; they never reach an upstream.
var socketHeaders = []string{
	"Upgrade", "Connection", "Sec-WebSocket-Key", "Sec-WebSocket-Version",
	"Sec-WebSocket-Extensions", "Sec-WebSocket-Protocol", "OpenAI-Beta",
}

// acceptSocket upgrades a request the guard has passed to a Responses
// WebSocket and serves it until either side closes it.
func (s *Server) acceptSocket(ctx *fasthttp.RequestCtx, r *request) {
	sk := &socket{s: s, id: r.id}
	// Every request on the socket carries the handshake's headers
	// (session-id, x-codex-*), as a POST of JSON would.
	ctx.Request.Header.CopyTo(&sk.header)
	for _, k := range socketHeaders {
		sk.header.Del(k)
	}
	sk.header.SetMethod(fasthttp.MethodPost)
	sk.header.SetContentType("application/json")
	sk.affinity = digestKey('w', []byte(r.id))
	up := websocket.FastHTTPUpgrader{
		ReadBufferSize:    4 << 10,
		WriteBufferSize:   4 << 10,
		EnableCompression: true,
		// The guard has checked Origin already: only loopback pages.
		CheckOrigin: func(*fasthttp.RequestCtx) bool { return true },
		Error: func(ctx *fasthttp.RequestCtx, status int, reason error) {
			s.refuse(httpResponder{ctx}, r, rerr.Spec{Code: rerr.ProxyBadRequest, Message: reason.Error()}, nil)
		},
	}
	s.dialEarly(sk, r.id)
	if sk.up != nil {
		for _, k := range handshakeEchoes {
			if v := sk.up.echo.Get(k); v != "" {
				ctx.Response.Header.Set(k, v)
			}
		}
	}
	if err := up.Upgrade(ctx, sk.run); err != nil {
		sk.dropUpstream()
		return // refused: Error has answered and logged it
	}
	s.deps.Log.Debug().Str("socket", r.id).Msg("websocket opened")
}

// socket is one client's Responses WebSocket.
type socket struct {
	s        *Server
	id       string // the handshake's request id
	conn     *websocket.Conn
	header   fasthttp.RequestHeader
	affinity string // for requests that name no conversation: the socket's own
	history  history
	up       *upstreamSocket // to the account serving the socket, while it does
	overHTTP bool            // an upstream refused one socket too many: this one goes over HTTP

	// mu guards busy, closing and done. Held while shutdown writes the
	// close frame, so the connection, which fasthttp releases once run
	// returns, outlives every use made of it from outside run.
	mu      sync.Mutex
	busy    bool // a request is being answered
	closing bool // shutdown: close once the request in flight is answered
	done    bool // run has ended: the connection is no one's to use
}

// run serves the socket's frames one at a time, as a Responses client
// sends them: the next request after the last answer.
func (sk *socket) run(conn *websocket.Conn) {
	sk.conn = conn
	if !sk.s.sockets.add(sk) {
		sk.closeGoingAway()
		return
	}
	defer sk.s.sockets.remove(sk)
	defer func() {
		sk.mu.Lock()
		sk.done = true
		sk.mu.Unlock()
		conn.Close()
	}()
	defer sk.dropUpstream() // a client gone frees its upstream socket
	conn.SetPongHandler(func(string) error {
		return conn.SetReadDeadline(time.Now().Add(socketQuiet))
	})
	stop := sk.keepAlive()
	defer stop()
	for {
		frame, tooLarge, err := sk.next()
		if err != nil {
			sk.s.deps.Log.Debug().Str("socket", sk.id).Err(err).Msg("websocket closed")
			return
		}
		if !sk.begin() {
			return
		}
		if !sk.handle(frame, tooLarge) {
			return // a bug ended the request, and the socket (panicked)
		}
		if !sk.end() {
			sk.closeGoingAway()
			return
		}
	}
}

// next reads the next message, at most MaxBody bytes of it: a longer one
// is read to its end and dropped, so it costs no more memory than the
// cap, and the socket goes on.
func (sk *socket) next() (frame []byte, tooLarge bool, err error) {
	if err := sk.conn.SetReadDeadline(time.Now().Add(socketQuiet)); err != nil {
		return nil, false, err
	}
	typ, rd, err := sk.conn.NextReader()
	if err != nil {
		return nil, false, err
	}
	max := sk.s.cfg.MaxBody
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(rd, int64(max)+1)); err != nil {
		return nil, false, err
	}
	if buf.Len() > max {
		_, err := io.Copy(io.Discard, rd)
		return nil, true, err
	}
	if typ != websocket.TextMessage {
		return nil, false, nil // answered as not a request (handle)
	}
	if buf.Len() == 0 {
		return []byte{}, false, nil // an empty text frame is still text
	}
	return buf.Bytes(), false, nil
}

// handle answers one frame. Frames other than response.create (such as
// response.processed) ask for no answer. It is false when a bug (a
// panic) ended the request: the socket is closed (panicked).
func (sk *socket) handle(frame []byte, tooLarge bool) (ok bool) {
	r := &request{id: newRequestID(), header: &sk.header, transport: transportWebSocket}
	w := &wsResponder{sk: sk}
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
		sk.s.refuse(w, r, rerr.Spec{Code: rerr.ProxyPayloadTooLarge,
			Message: "frame is larger than the proxy accepts (--max-body)",
			Extra:   []rerr.Field{{Key: "max_bytes", Value: sk.s.cfg.MaxBody}}}, nil)
	case frame == nil:
		sk.s.refuse(w, r, rerr.Spec{Code: rerr.ProxyBadRequest,
			Message: "rotor reads text frames only: send response.create as JSON text"}, nil)
	case t == "response.create":
		sk.create(w, r, frame)
	case t == "":
		sk.s.refuse(w, r, rerr.Spec{Code: rerr.ProxyBadRequest,
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
	s.panicLog(r.id, v).Str("socket", sk.id).Msg("websocket request panic")
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
	msg := websocket.FormatCloseMessage(websocket.CloseInternalServerErr,
		"rotor failed on this request (a bug); its log has request_id "+r.id)
	sk.conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
	sk.conn.Close()
}

// errPanicked ends the relay of an answer a bug interrupted.
var errPanicked = errors.New("rotor: a bug ended the answer")

// keepAlive pings the client every socketPing until stop is called; stop
// returns once the pinging has ended.
func (sk *socket) keepAlive() (stop func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(socketPing)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if sk.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(socketWriteWait)) != nil {
					return
				}
			}
		}
	}()
	return func() { close(done); <-ended }
}

// begin marks a request in flight; false when the socket is closing.
func (sk *socket) begin() bool {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	sk.busy = !sk.closing
	return sk.busy
}

// end marks the request answered; false when the socket must now close.
func (sk *socket) end() bool {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	sk.busy = false
	return !sk.closing
}

// shutdown closes the socket with 1001 at once when it is idle, or once
// the request in flight is answered.
func (sk *socket) shutdown() {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	sk.closing = true
	if !sk.busy && !sk.done {
		sk.closeGoingAway()
	}
}

// closeGoingAway says goodbye with 1001 and closes the connection, which
// also ends a read waiting for the next frame.
func (sk *socket) closeGoingAway() {
	msg := websocket.FormatCloseMessage(websocket.CloseGoingAway, "rotor is shutting down")
	sk.conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
	sk.conn.Close()
}

// socketSet is every open socket, so a shutdown can close them.
type socketSet struct {
	mu      sync.Mutex
	open    map[*socket]struct{}
	closing bool
	gone    chan struct{} // closed when the last socket goes, after closing
}

func (ss *socketSet) add(sk *socket) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closing {
		return false
	}
	if ss.open == nil {
		ss.open = make(map[*socket]struct{})
	}
	ss.open[sk] = struct{}{}
	return true
}

// count is how many sockets are open, for the metrics.
func (ss *socketSet) count() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.open)
}

func (ss *socketSet) remove(sk *socket) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.open, sk)
	if ss.closing && len(ss.open) == 0 && ss.gone != nil {
		close(ss.gone)
		ss.gone = nil
	}
}

// shutdown closes every socket once its request in flight is answered,
// refuses new ones, and waits for them all to go, at most until ctx ends.
func (ss *socketSet) shutdown(ctx context.Context) error {
	ss.mu.Lock()
	ss.closing = true
	var gone chan struct{}
	if len(ss.open) > 0 {
		gone = make(chan struct{})
		ss.gone = gone
	}
	open := make([]*socket, 0, len(ss.open))
	for sk := range ss.open {
		open = append(open, sk)
	}
	ss.mu.Unlock()
	for _, sk := range open {
		sk.shutdown()
	}
	if gone == nil {
		return nil
	}
	select {
	case <-gone:
		return nil
	case <-ctx.Done():
		return errors.Join(errors.New("websockets still open"), ctx.Err())
	}
}
