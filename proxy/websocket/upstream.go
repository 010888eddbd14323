package websocket

import (
	"bytes"
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

	"github.com/rotorproxy/rotor/proxy/headerrules"
)

// A request that came in on a socket goes up on a socket of its own to
// the account's endpoint (docs/codex.md): one upstream socket per client
// socket, kept while the same account serves it, so the upstream's
// per-connection state (previous_response_id, the prompt cache) holds.
// An endpoint that refuses the upgrade is served over HTTP instead, and
// remembered as such (NoSockets). Upstream frames are handed to the
// proxy as the SSE bytes an HTTP answer would carry (Socket.Answer), so
// the hold-back, the relay and the failover table are the HTTP path's
// own.

// Beta is the OpenAI-Beta value of a Responses WebSocket.
const Beta = "responses_websockets=2026-02-06"

// Upstream is a client socket's connection to its account's endpoint.
type Upstream struct {
	conn      *websocket.Conn
	AccountID string      // the account it was opened for
	echo      [][2]string // the handshake answer's headers Codex reads (Dial's echoes), in order
}

// Echo sets in h the headers of the upstream's handshake answer that
// Dial was asked to keep.
func (up *Upstream) Echo(h *fasthttp.ResponseHeader) {
	for _, kv := range up.echo {
		h.Set(kv[0], kv[1])
	}
}

// NetConn is the upstream socket's connection: closing it (a client that
// leaves before the answer starts) ends the attempt.
func (up *Upstream) NetConn() net.Conn { return up.conn.NetConn() }

// maxNoSockets bounds NoSockets, as the proxy bounds its endpoints: a
// forgotten endpoint costs one refused upgrade.
const maxNoSockets = 1024

// NoSockets remembers the endpoints that refused a WebSocket upgrade.
type NoSockets struct {
	mu sync.Mutex
	m  map[string]bool
}

// Has reports whether ep refused an upgrade.
func (n *NoSockets) Has(ep string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.m[ep]
}

// Add remembers that ep refused an upgrade.
func (n *NoSockets) Add(ep string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.m == nil || len(n.m) >= maxNoSockets {
		n.m = make(map[string]bool) // bounded: a forgotten endpoint costs one refused upgrade
	}
	n.m[ep] = true
}

// Dialer opens upstream sockets over the connections the proxy makes:
// its connects, its TLS, its outbound proxies, its watch on the client.
type Dialer struct {
	NetDial          func(network, addr string) (net.Conn, error)
	TLSDial          func(network, addr string) (net.Conn, error) // wss: the TLS handshake is the dialer's, as for HTTP
	HandshakeTimeout time.Duration
}

// Refusal is an upstream's answer that opened no socket or began with an
// error, for the proxy to classify as the failed HTTP answer it stands
// for: its status, headers and the beginning of its body.
type Refusal struct {
	Status int
	Header *fasthttp.ResponseHeader
	Body   []byte
}

// Dial opens a socket to url (http or https, as for the same request over
// HTTP) with the headers h, to which it adds the socket's OpenAI-Beta.
// The upstream socket is for accountID and keeps the answer's headers
// named in echoes; hdr is the handshake answer's headers. An upstream
// that answered without a socket is a Refusal, its body read up to
// maxBody; one that did not answer is an error.
func (d Dialer) Dial(url string, h http.Header, accountID string, echoes []string, maxBody int) (up *Upstream, hdr *fasthttp.ResponseHeader, ref *Refusal, err error) {
	h.Set("OpenAI-Beta", Beta)
	wd := websocket.Dialer{
		NetDial:           d.NetDial,
		NetDialTLSContext: func(_ context.Context, network, addr string) (net.Conn, error) { return d.TLSDial(network, addr) },
		HandshakeTimeout:  d.HandshakeTimeout,
		EnableCompression: true,
	}
	conn, resp, err := wd.Dial(socketURL(url), h)
	if err != nil && resp != nil {
		return nil, nil, &Refusal{Status: resp.StatusCode, Header: fastHeader(resp.Header), Body: readRefusal(resp, maxBody)}, nil
	}
	if err != nil {
		return nil, nil, nil, err
	}
	up = &Upstream{conn: conn, AccountID: accountID}
	for _, k := range echoes {
		if v := resp.Header.Get(k); v != "" {
			up.echo = append(up.echo, [2]string{k, v})
		}
	}
	return up, fastHeader(resp.Header), nil, nil
}

// fastHeader is a handshake answer's headers as a fasthttp response
// header, which the proxy's classify reads as it reads an HTTP answer's.
func fastHeader(h http.Header) *fasthttp.ResponseHeader {
	hdr := new(fasthttp.ResponseHeader)
	for k, vs := range h {
		for _, v := range vs {
			hdr.Add(k, v)
		}
	}
	return hdr
}

// readRefusal reads at most max bytes of a refusal's body, and closes it.
func readRefusal(resp *http.Response, max int) []byte {
	defer resp.Body.Close()
	body := make([]byte, 0, 4096)
	for len(body) < max {
		n, err := resp.Body.Read(body[len(body):min(cap(body), max)])
		body = body[:len(body)+n]
		if err != nil {
			break
		}
		if len(body) == cap(body) {
			body = append(body, 0)[:len(body)]
		}
	}
	return body
}

// Send writes frame to the upstream socket and reads the first frame of
// its answer, waiting at most wait; sent says the frame left.
func (up *Upstream) Send(frame []byte, wait time.Duration) (first []byte, sent bool, err error) {
	conn := up.conn
	err = conn.SetWriteDeadline(time.Now().Add(socketWriteWait))
	if err == nil {
		err = conn.WriteMessage(websocket.TextMessage, frame)
	}
	if err != nil {
		return nil, false, err
	}
	first, err = readFrameText(conn, wait)
	return first, true, err
}

// ErrorFrame is an upstream socket's first frame as the failed HTTP
// answer it stands for, when it is an error before any output with a
// status of 400 or more: its status, its headers and the frame as the
// body. It is nil for any other frame.
func ErrorFrame(first []byte) *Refusal {
	if gjson.GetBytes(first, "type").Str != "error" {
		return nil
	}
	status := gjson.GetBytes(first, "status").Int()
	if status < 400 {
		return nil
	}
	ref := &Refusal{Status: int(status), Header: new(fasthttp.ResponseHeader), Body: bytes.Clone(first)}
	gjson.GetBytes(first, "headers").ForEach(func(k, v gjson.Result) bool {
		ref.Header.Set(k.Str, v.String())
		return true
	})
	return ref
}

// DialHeader is the handshake header of an upstream socket for requests
// with the header h: every header an HTTP request would pass on
// (headerrules.RequestPasses) but its content type, which a socket has
// none of.
func DialHeader(h *fasthttp.RequestHeader) http.Header {
	dh := http.Header{}
	hop := h.Peek("Connection")
	for k, v := range h.All() {
		if headerrules.RequestPasses(hop, k) && !bytes.EqualFold(k, []byte("Content-Type")) {
			dh.Add(string(k), string(v))
		}
	}
	return dh
}

// codeSocketExpired is the error the backend sends on a socket that has
// lived its 60 minutes.
const codeSocketExpired = "websocket_connection_limit_reached"

// Expired reports whether an upstream socket's answer (its first
// frame, or the error reading it) says the socket has lived too long: the
// error frame for it, or a close with 1008 (policy) in its place.
func Expired(first []byte, err error) bool {
	if err != nil {
		return websocket.IsCloseError(err, websocket.ClosePolicyViolation)
	}
	return bytes.Contains(first, []byte(codeSocketExpired)) && gjson.GetBytes(first, "type").Str == "error" &&
		(gjson.GetBytes(first, "error.code").Str == codeSocketExpired || gjson.GetBytes(first, "code").Str == codeSocketExpired)
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

// IsTimeout reports whether err is a wait that ran out.
func IsTimeout(err error) bool {
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

// Answer is the answer sk's upstream socket began with first, as the SSE
// bytes of an HTTP answer, each frame waited for at most stall. Its
// CloseWithError keeps the upstream socket for the next request when the
// answer ended, and drops it otherwise.
func (sk *Socket) Answer(first []byte, stall time.Duration) io.Reader {
	return &frameReader{sk: sk, up: sk.Up, stall: stall, pending: sseFrame(nil, first),
		ended: terminalEvents[gjson.GetBytes(first, "type").Str]}
}

// frameReader is an upstream socket's answer as the SSE bytes of an HTTP
// answer: each text frame one event. It ends after the answer's last
// event; closed cleanly after that, the socket stays for the next
// request, closed any other way it is dropped.
type frameReader struct {
	sk      *Socket
	up      *Upstream
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
		if fr.sk.Up == fr.up {
			fr.sk.DropUpstream()
		}
	}
	return nil
}

// DropUpstream closes the socket's upstream socket, if it has one.
func (sk *Socket) DropUpstream() {
	if sk.Up != nil {
		sk.Up.conn.Close()
		sk.Up = nil
	}
}
