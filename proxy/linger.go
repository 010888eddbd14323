package proxy

import (
	"errors"
	"io"
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// A refusal sent while the client is still uploading must reach it: a
// socket closed with unread bytes in its receive buffer answers them with
// a TCP reset, and a reset that arrives before the client has read the
// refusal discards it ("write: connection reset" instead of a 401). So
// rotor answers, half-closes, and reads and drops what keeps coming, for a
// bounded amount and time, as nginx's lingering close and net/http do.
const (
	// lingerTime bounds the whole linger of one connection.
	lingerTime = 10 * time.Second
	// lingerIdle ends it when the client sends nothing for this long.
	lingerIdle = time.Second
	// lingerBytes bounds what one connection may make rotor read and drop.
	// Not the body cap: an upload over the cap must also get its 413, and
	// a client that is told in time stops well short of this.
	lingerBytes = 256 << 20
)

// closeAfterAnswer ends the connection of a request answered without
// reading its body. A request with no body keeps its connection: nothing
// is left unread, so the next request on it is read as usual. Otherwise
// the answer is written by hand on the hijacked connection, which then
// lingers; fasthttp would close at once after a Connection: close answer.
func closeAfterAnswer(ctx *fasthttp.RequestCtx) {
	if !hasBody(&ctx.Request.Header) {
		return
	}
	ctx.Response.Header.SetConnectionClose()
	answer := ctx.Response.String()
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) { answerAndLinger(c, answer) })
}

// lingerAfterParseError does the same for a request fasthttp could not
// read (headers over the limit, bad framing), whose answer fasthttp writes
// itself and then closes: the answer is written here first, and
// fasthttp's copy meets a half-closed socket, which sends nothing.
func lingerAfterParseError(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.SetConnectionClose()
	answerAndLinger(ctx.Conn(), ctx.Response.String())
}

func answerAndLinger(c net.Conn, answer string) {
	if _, err := io.WriteString(c, answer); err == nil {
		linger(c, lingerBytes)
	}
}

// hasBody reports whether a request announced a body: a positive
// Content-Length or chunked framing (-1). fasthttp reports a request with
// neither as -2, and reads no body for it.
func hasBody(h *fasthttp.RequestHeader) bool {
	n := h.ContentLength()
	return n > 0 || n == -1
}

// linger half-closes c and reads and drops up to limit bytes, until the
// client closes, falls silent for lingerIdle, or lingerTime has passed.
// The caller closes c.
func linger(c net.Conn, limit int64) {
	if closeWrite(c) != nil {
		return
	}
	end := time.Now().Add(lingerTime)
	for limit > 0 {
		deadline := time.Now().Add(lingerIdle)
		if deadline.After(end) {
			deadline = end
		}
		if c.SetReadDeadline(deadline) != nil {
			return
		}
		n, err := io.CopyN(io.Discard, c, min(limit, 64<<10))
		limit -= n
		if err != nil {
			return
		}
	}
}

// closeWrite half-closes the TCP connection under the wrappers fasthttp
// (a hijacked connection) and rotor (quietConn) put around it.
func closeWrite(c net.Conn) error {
	for {
		switch v := c.(type) {
		case interface{ CloseWrite() error }:
			return v.CloseWrite()
		case interface{ UnsafeConn() net.Conn }:
			c = v.UnsafeConn()
		case *quietConn:
			c = v.Conn
		default:
			return errors.ErrUnsupported
		}
	}
}
