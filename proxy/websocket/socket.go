// Package websocket is the Responses API's WebSocket transport
// (docs/codex.md): a client's socket, read a frame at a time, kept alive
// while idle and closed with 1001 on shutdown; the frames an answer is
// written as; and the socket to the account's endpoint a client socket's
// requests go up on, whose frames it reads back as the SSE bytes of an
// HTTP answer.
//
// It knows nothing of accounts, failover or the request path: the proxy
// reaches it through Handler, which answers each frame, and gives it what
// a dial needs (a URL, headers, the connections to dial with). What an
// upstream's refusal means, and whose fault a failure is, is the proxy's
// to decide. It guarantees that one frame is answered at a time on a
// socket, that a socket's upstream socket is closed when the client's
// ends, and that every frame is read once, into a buffer its request and
// the socket's history share: no frame is copied on its way up.
package websocket

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
)

// Paths are where a Responses WebSocket is opened.
var Paths = map[string]bool{
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

// UpgradeRequested reports whether h asks to switch to WebSocket.
func UpgradeRequested(h *fasthttp.RequestHeader) bool {
	return h.IsGet() && bytes.EqualFold(h.Peek("Upgrade"), []byte("websocket"))
}

// socketHeaders are the handshake headers that are about the socket, not
// about the requests sent over it; they never reach an upstream.
var socketHeaders = []string{
	"Upgrade", "Connection", "Sec-WebSocket-Key", "Sec-WebSocket-Version",
	"Sec-WebSocket-Extensions", "Sec-WebSocket-Protocol", "OpenAI-Beta",
}

// A Handler answers a socket's frames, one at a time, as a Responses
// client sends them: the next request after the last answer.
type Handler interface {
	// ServeFrame answers one frame through w, which is the socket's and
	// valid until ServeFrame returns. frame is nil when it was not text,
	// and tooLarge says it was longer than the upgrader's MaxBody and
	// dropped. ok is false when a bug ended the answer: the socket is
	// then closed (Socket.Fail) and served no more.
	ServeFrame(w *Writer, frame []byte, tooLarge bool) (ok bool)
}

// Upgrader switches a request to a WebSocket and serves it.
type Upgrader struct {
	// Sockets is the set a socket joins while it is open.
	Sockets *Set
	// MaxBody bounds a frame: a longer one is read to its end and
	// dropped, so it costs no more memory than the cap.
	MaxBody int
	// Log takes a line when a socket opens and when it closes.
	Log *zerolog.Logger
	// Refuse answers a handshake that cannot be upgraded.
	Refuse func(reason error)
}

// Upgrade upgrades ctx's request, which the guard has passed, to a
// WebSocket and serves sk's frames with h until either side closes it.
// An error means it was refused (Refuse has answered); sk's upstream
// socket, if it has one, is then closed.
func (u *Upgrader) Upgrade(ctx *fasthttp.RequestCtx, sk *Socket, h Handler) error {
	sk.u, sk.h = *u, h
	sk.u.Refuse = nil // the handshake's: the socket outlives the request it answers
	up := websocket.FastHTTPUpgrader{
		ReadBufferSize:    4 << 10,
		WriteBufferSize:   4 << 10,
		EnableCompression: true,
		// The guard has checked Origin already: only loopback pages.
		CheckOrigin: func(*fasthttp.RequestCtx) bool { return true },
		Error: func(_ *fasthttp.RequestCtx, _ int, reason error) {
			u.Refuse(reason)
		},
	}
	if err := up.Upgrade(ctx, sk.run); err != nil {
		sk.DropUpstream()
		return err
	}
	u.Log.Debug().Str("socket", sk.ID).Msg("websocket opened")
	return nil
}

// Socket is one client's Responses WebSocket.
type Socket struct {
	ID      string    // the handshake's request id
	Up      *Upstream // to the account serving the socket, while it does
	History History   // the socket's last exchange
	// Header is what every request on the socket carries: the
	// handshake's headers (session-id, x-codex-*), as a POST of JSON
	// would (TakeHeader).
	Header fasthttp.RequestHeader
	u      Upgrader
	h      Handler
	conn   *websocket.Conn
	w      Writer

	// mu guards busy, closing and done. Held while shutdown writes the
	// close frame, so the connection, which fasthttp releases once run
	// returns, outlives every use made of it from outside run.
	mu      sync.Mutex
	busy    bool // a request is being answered
	closing bool // shutdown: close once the request in flight is answered
	done    bool // run has ended: the connection is no one's to use
}

// TakeHeader keeps the handshake's headers h as those of every request
// on the socket, without those about the socket itself.
func (sk *Socket) TakeHeader(h *fasthttp.RequestHeader) {
	h.CopyTo(&sk.Header)
	for _, k := range socketHeaders {
		sk.Header.Del(k)
	}
	sk.Header.SetMethod(fasthttp.MethodPost)
	sk.Header.SetContentType("application/json")
}

// run serves the socket's frames one at a time, as a Responses client
// sends them: the next request after the last answer.
func (sk *Socket) run(conn *websocket.Conn) {
	sk.conn, sk.w.conn = conn, conn
	if !sk.u.Sockets.add(sk) {
		sk.closeGoingAway()
		return
	}
	defer sk.u.Sockets.remove(sk)
	defer func() {
		sk.mu.Lock()
		sk.done = true
		sk.mu.Unlock()
		conn.Close()
	}()
	defer sk.DropUpstream() // a client gone frees its upstream socket
	conn.SetPongHandler(func(string) error {
		return conn.SetReadDeadline(time.Now().Add(socketQuiet))
	})
	stop := sk.keepAlive()
	defer stop()
	for {
		frame, tooLarge, err := sk.next()
		if err != nil {
			sk.u.Log.Debug().Str("socket", sk.ID).Err(err).Msg("websocket closed")
			return
		}
		if !sk.begin() {
			return
		}
		sk.w.failed = false
		if !sk.h.ServeFrame(&sk.w, frame, tooLarge) {
			return // a bug ended the request, and the socket (Fail)
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
func (sk *Socket) next() (frame []byte, tooLarge bool, err error) {
	if err := sk.conn.SetReadDeadline(time.Now().Add(socketQuiet)); err != nil {
		return nil, false, err
	}
	typ, rd, err := sk.conn.NextReader()
	if err != nil {
		return nil, false, err
	}
	max := sk.u.MaxBody
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(rd, int64(max)+1)); err != nil {
		return nil, false, err
	}
	if buf.Len() > max {
		_, err := io.Copy(io.Discard, rd)
		return nil, true, err
	}
	if typ != websocket.TextMessage {
		return nil, false, nil // answered as not a request (ServeFrame)
	}
	if buf.Len() == 0 {
		return []byte{}, false, nil // an empty text frame is still text
	}
	return buf.Bytes(), false, nil
}

// Fail closes a socket a bug left in a state no longer known, with 1011,
// naming the request whose log line tells the rest; the panic itself is
// never shown to the client.
func (sk *Socket) Fail(requestID string) {
	msg := websocket.FormatCloseMessage(websocket.CloseInternalServerErr,
		"rotor failed on this request (a bug); its log has request_id "+requestID)
	sk.conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
	sk.conn.Close()
}

// keepAlive pings the client every socketPing until stop is called; stop
// returns once the pinging has ended.
func (sk *Socket) keepAlive() (stop func()) {
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
func (sk *Socket) begin() bool {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	sk.busy = !sk.closing
	return sk.busy
}

// end marks the request answered; false when the socket must now close.
func (sk *Socket) end() bool {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	sk.busy = false
	return !sk.closing
}

// shutdown closes the socket with 1001 at once when it is idle, or once
// the request in flight is answered.
func (sk *Socket) shutdown() {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	sk.closing = true
	if !sk.busy && !sk.done {
		sk.closeGoingAway()
	}
}

// closeGoingAway says goodbye with 1001 and closes the connection, which
// also ends a read waiting for the next frame.
func (sk *Socket) closeGoingAway() {
	msg := websocket.FormatCloseMessage(websocket.CloseGoingAway, "rotor is shutting down")
	sk.conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
	sk.conn.Close()
}

// Writer writes one answer's frames to the client. Once a frame cannot
// be written the client is gone, and the rest are dropped.
type Writer struct {
	conn   *websocket.Conn
	failed bool
}

// Write sends p as one text frame, bounded in time: a client that cannot
// take it is gone.
func (w *Writer) Write(p []byte) {
	if w.failed {
		return
	}
	c := w.conn
	if c.SetWriteDeadline(time.Now().Add(socketWriteWait)) != nil || c.WriteMessage(websocket.TextMessage, p) != nil {
		w.failed = true
	}
}

// Failed reports whether a frame could not be written.
func (w *Writer) Failed() bool { return w.failed }

// NetConn is the client's connection, which nothing reads while a frame
// is answered: watching it tells a client that leaves.
func (w *Writer) NetConn() net.Conn { return w.conn.NetConn() }

// Set is every open socket, so a shutdown can close them.
type Set struct {
	mu      sync.Mutex
	open    map[*Socket]struct{}
	closing bool
	gone    chan struct{} // closed when the last socket goes, after closing
}

func (ss *Set) add(sk *Socket) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closing {
		return false
	}
	if ss.open == nil {
		ss.open = make(map[*Socket]struct{})
	}
	ss.open[sk] = struct{}{}
	return true
}

// Count is how many sockets are open, for the metrics.
func (ss *Set) Count() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.open)
}

func (ss *Set) remove(sk *Socket) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.open, sk)
	if ss.closing && len(ss.open) == 0 && ss.gone != nil {
		close(ss.gone)
		ss.gone = nil
	}
}

// Shutdown closes every socket once its request in flight is answered,
// refuses new ones, and waits for them all to go, at most until ctx ends.
func (ss *Set) Shutdown(ctx context.Context) error {
	ss.mu.Lock()
	ss.closing = true
	var gone chan struct{}
	if len(ss.open) > 0 {
		gone = make(chan struct{})
		ss.gone = gone
	}
	open := make([]*Socket, 0, len(ss.open))
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
