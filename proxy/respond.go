package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/headerrules"
	"github.com/rotorproxy/rotor/proxy/upstream"
)

// A responder is where the forward loop writes its answer to one request.
// The loop does not know how the request came in: an HTTP response
// (httpResponder) is one implementation, and a WebSocket frame writer
// (docs/codex.md) answers the same calls with frames.
type responder interface {
	// gone reports whether the client has left, so no more attempts are
	// made and nobody is blamed for an answer no one waits for.
	gone() bool
	// watch watches the client while an attempt waits on the upstream and
	// nothing is written to it (upstream.ClientWatch); nil when it cannot be
	// watched. The caller stops it.
	watch() *upstream.ClientWatch
	// refuse sends a rotor-made error, as rerr.Build made it; headers, if
	// not nil, adds headers the client reads with it (the x-codex-* quota
	// of the account waited on).
	refuse(resp rerr.Response, headers func(HeaderSetter))
	// commit sends a successful answer: its status and the headers that
	// cross the proxy (headerrules.RelayResponse), then body, each piece as it
	// arrives; length is the body's size, or -1 when unknown. It calls
	// body.CloseWithError exactly once, when the answer has ended or the
	// client has gone.
	commit(status int, upstream *fasthttp.ResponseHeader, body *relay, length int)
}

// httpResponder answers one fasthttp request.
type httpResponder struct{ ctx *fasthttp.RequestCtx }

func (w httpResponder) gone() bool { return upstream.ClientGone(w.ctx) }

// watch watches the client's connection, on which fasthttp reads nothing
// while the handler runs.
func (w httpResponder) watch() *upstream.ClientWatch {
	return upstream.NewClientWatch(w.ctx.Conn(), false)
}

// maxClientRetryWait is the longest wait rotor lets SDK clients sleep
// through on their own; past it, they are told not to retry.
const maxClientRetryWait = time.Minute

func (w httpResponder) refuse(resp rerr.Response, headers func(HeaderSetter)) {
	ctx := w.ctx
	ctx.Response.ResetBody()
	ctx.SetStatusCode(resp.Status)
	ctx.SetContentType("application/json")
	if ms := resp.RetryAfterMS(); ms != "" {
		ctx.Response.Header.Set("retry-after-ms", ms)
		ctx.Response.Header.Set("Retry-After", resp.RetryAfterSeconds())
		if resp.RetryAfter > maxClientRetryWait {
			// The OpenAI SDKs sleep for retry-after-ms, uncapped, before
			// retrying: a wait of hours would hang the caller instead of
			// raising RateLimitError. They honor x-should-retry first.
			ctx.Response.Header.Set("x-should-retry", "false")
		}
	}
	if headers != nil {
		headers(&ctx.Response.Header)
	}
	ctx.SetBody(resp.Body)
}

func (w httpResponder) commit(status int, upstream *fasthttp.ResponseHeader, body *relay, length int) {
	ctx := w.ctx
	ctx.SetStatusCode(status)
	headerrules.RelayResponse(&ctx.Response.Header, upstream)
	if id := upstream.Peek("x-request-id"); len(id) > 0 {
		ctx.Response.Header.SetBytesV("x-upstream-request-id", id)
	}
	if body.assembled {
		ctx.Response.Header.SetContentType("application/json")
	}
	if length < 0 && !ctx.Request.Header.IsHTTP11() {
		relayHTTP10(ctx, body)
		return
	}
	ctx.SetBodyStream(body, length)
}

// relayHTTP10 streams an answer of unknown length to an HTTP/1.0 client,
// which does not understand chunked framing: the body runs until the
// connection closes. fasthttp would frame it chunked, so the connection
// is taken over once the handler returns.
func relayHTTP10(ctx *fasthttp.RequestCtx, r *relay) {
	ctx.Response.Header.SetContentLength(-2) // identity body; sets Connection: close
	head := ctx.Response.Header.AppendBytes(nil)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		_, err := c.Write(head)
		buf := make([]byte, 8<<10)
		for err == nil {
			var n int
			n, err = r.Read(buf)
			if n > 0 {
				if _, werr := c.Write(buf[:n]); werr != nil {
					err = werr
				}
			}
		}
		if err == io.EOF || errors.Is(err, r.err) {
			err = nil // the answer's own end, not the client's
		}
		r.CloseWithError(err)
	})
}

// panicLog is the log line of a panic a request's work met (a bug): the
// request id, the panic and the stack. It is never shown to a client.
func (s *Server) panicLog(id string, v any) *zerolog.Event {
	return withPanic(s.deps.Log.Error().Str("request_id", id), v)
}

// withPanic adds to ev the panic v and the stack it was met on, as every
// recovered bug is logged.
func withPanic(ev *zerolog.Event, v any) *zerolog.Event {
	return ev.Str("panic", fmt.Sprint(v)).Bytes("stack", debug.Stack())
}
