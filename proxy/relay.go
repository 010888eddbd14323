package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"time"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/chat"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// relay is the body of a successful answer: fasthttp's server reads it and
// writes every chunk it returns to the client at once (one chunk, one
// flush), so each SSE event leaves rotor as soon as it arrives, with no
// goroutine and no buffer beyond the server's copy buffer. As bytes pass it
// reads the few events rotor cares about (usage, quota, failure).
type relay struct {
	s       *Server
	rid     string
	model   string
	choice  rotation.Choice
	attempt int
	status  int
	resp    *fasthttp.Response
	body    io.Reader
	pending []byte // bytes already read from the upstream, sent first

	start   time.Time
	ttfb    time.Duration
	err     error // sticky: the upstream's io.EOF or failure
	scan    sseScanner
	json    []byte // a non-stream JSON answer, kept (bounded) to read its usage
	isJSON  bool
	tokens  *usage.Tokens
	failure string // code of a response.failed event

	// Chat Completions on a ChatGPT account: the Codex events are
	// translated as they arrive. out is the translated bytes not yet
	// handed over (from outOff on), cut that the answer ended before the
	// upstream's stream did.
	chat   *chat.Stream
	out    []byte
	outOff int
	cut    bool
	// chunks: the upstream itself streams Chat Completions chunks
	// (API-key accounts), whose usage rotor reads as they pass.
	chunks bool
}

const maxJSONUsage = 8 << 20

// relay commits the answer of res to the client.
func (s *Server) relay(c *call, ch *rotation.Choice, res *result) {
	resp, ctx := res.resp, c.ctx
	ctx.SetStatusCode(resp.StatusCode())
	hop := resp.Header.Peek("Connection")
	for k, v := range resp.Header.All() {
		if passes(dropResponseHeaders, hop, k) {
			ctx.Response.Header.AddBytesKV(k, v)
		}
	}
	ctx.Response.Header.Set("x-request-id", c.rid)
	if res.upstreamID != "" {
		ctx.Response.Header.Set("x-upstream-request-id", res.upstreamID)
	}
	r := &relay{
		s: s, rid: c.rid, model: c.model, choice: *ch, attempt: len(c.attempted),
		status: resp.StatusCode(), resp: resp, body: resp.BodyStream(), start: c.start,
		pending: res.pending,
	}
	if res.ended {
		r.body = eofReader{}
	}
	n := resp.Header.ContentLength()
	if n < 0 || len(r.pending) > 0 {
		n = -1
	}
	switch {
	case res.assembled != nil:
		r.body, n = bytes.NewReader(res.assembled), len(res.assembled)
		ctx.Response.Header.SetContentType("application/json")
	case r.body == nil:
		r.body = bytes.NewReader(resp.Body())
	}
	r.isJSON = bytes.HasPrefix(ctx.Response.Header.ContentType(), []byte("application/json"))
	r.scan.onData = r.onEvent
	r.chunks = c.op == opChat && res.shape == shapeAsIs
	if res.shape == shapeChatStream && res.assembled == nil {
		r.chat = chat.NewStream(chatID(c.rid), c.start.Unix(), c.model, c.chat.IncludeUsage,
			func(code, message string) []byte { return streamError(c.rid, code, message) })
		n = -1
	}
	if n < 0 && !ctx.Request.Header.IsHTTP11() {
		relayHTTP10(ctx, r)
		return
	}
	ctx.SetBodyStream(r, n)
}

// streamError is the error event of a stream that fails after its first
// byte, in SPEC §4's error shape.
func streamError(rid, code, message string) []byte {
	status := 500
	if failedStreamOutcome(code) == outUsageLimit {
		status = 429
	}
	return rerr.Build(rerr.Spec{Code: code, Status: status, Message: message, RequestID: rid}).Body
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

// Read hands the server the next bytes of the answer as soon as the
// upstream sends them.
func (r *relay) Read(p []byte) (int, error) {
	if r.chat != nil {
		return r.readChat(p)
	}
	if len(r.pending) > 0 {
		n := copy(p, r.pending)
		r.pending = r.pending[n:]
		if len(r.pending) == 0 {
			r.pending = nil // not kept for the rest of the stream
		}
		r.observe(p[:n])
		return n, nil
	}
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.body.Read(p)
	if n > 0 {
		r.observe(p[:n])
	}
	if err != nil {
		r.err = err
	}
	return n, err
}

// readChat hands the server the chat chunks translated from the
// upstream's next bytes: each read from the upstream is translated and
// handed on before the next, so nothing waits in rotor.
func (r *relay) readChat(p []byte) (int, error) {
	for r.outOff == len(r.out) {
		r.out, r.outOff = r.out[:0], 0
		switch {
		case r.chat.Done():
			if r.err == nil {
				r.err, r.cut = io.EOF, true
			}
			return 0, io.EOF
		case r.err != nil:
			if r.err == io.EOF {
				r.err = io.ErrUnexpectedEOF // ended without its final event
			}
			r.out = r.chat.Fail(r.out, "stream_interrupted", "the upstream stream broke before the answer was complete")
			if len(r.out) == 0 {
				return 0, io.EOF
			}
			continue
		}
		b := r.pending
		r.pending = nil
		if len(b) == 0 {
			// Read into p itself: observe translates every byte into
			// r.out before p is filled with the translation.
			n, err := r.body.Read(p)
			b = p[:n]
			if err != nil {
				r.err = err
			}
		}
		r.observe(b)
	}
	n := copy(p, r.out[r.outOff:])
	r.outOff += n
	return n, nil
}

func (r *relay) observe(b []byte) {
	if r.ttfb == 0 {
		r.ttfb = r.s.deps.Clock.Now().Sub(r.start)
	}
	if r.isJSON {
		if len(r.json)+len(b) <= maxJSONUsage {
			r.json = append(r.json, b...)
		}
		return
	}
	r.scan.feed(b)
}

// onEvent reads one SSE data line; only a handful of event types matter
// to rotor, and a chat translation sees every one.
func (r *relay) onEvent(data []byte) {
	if r.chat != nil {
		r.out = r.chat.Event(r.out, data)
	}
	switch eventField(data, "type").Str {
	case "response.completed", "response.done", "response.incomplete":
		r.tokens = usageOf(eventField(data, "response.usage"))
	case "response.failed":
		r.failure = gjson.GetBytes(data, "response.error.code").String()
		r.tokens = usageOf(eventField(data, "response.usage"))
	case "codex.rate_limits":
		if q := quotaFromEvent(r.s.deps.Clock.Now(), data); q != nil {
			r.s.rt().SetQuota(r.choice.Account.ID, *q)
		}
	case "":
		// A Chat Completions chunk: usage rides on one of them
		// (stream_options.include_usage), usually the last.
		if r.chunks {
			if u := usageOf(eventField(data, "usage")); u != nil {
				r.tokens = u
			}
		}
	}
}

// eventField reads path in an event's data as gjson.GetBytes does, without
// copying what it finds: it runs on every event of every stream. The
// result points into data, so nothing of it may outlive data.
func eventField(data []byte, path string) gjson.Result {
	return gjson.Get(unsafe.String(unsafe.SliceData(data), len(data)), path)
}

// usageNames are the usage members rotor reads, for each Tokens field in
// order: the Responses API's name, Chat Completions' name, and the member
// inside it that holds the count, if it is an object.
var usageNames = [...]struct{ responses, chat, inner string }{
	{"input_tokens", "prompt_tokens", ""},
	{"input_tokens_details", "prompt_tokens_details", "cached_tokens"},
	{"output_tokens", "completion_tokens", ""},
	{"output_tokens_details", "completion_tokens_details", "reasoning_tokens"},
	{"total_tokens", "total_tokens", ""},
}

// usageOf reads a usage object in either API's names, in one pass; the
// Responses name wins over the Chat Completions one.
func usageOf(u gjson.Result) *usage.Tokens {
	if !u.IsObject() {
		return nil
	}
	var t usage.Tokens
	fields := [len(usageNames)]*int64{&t.Input, &t.Cached, &t.Output, &t.Reasoning, &t.Total}
	var responses [len(usageNames)]bool // the field came under the Responses name
	u.ForEach(func(k, v gjson.Result) bool {
		for i, n := range usageNames {
			if (k.Str == n.responses || k.Str == n.chat) && !responses[i] {
				if n.inner != "" {
					v = v.Get(n.inner)
				}
				*fields[i], responses[i] = v.Int(), k.Str == n.responses
				break
			}
		}
		return true
	})
	return &t
}

// CloseWithError is called by fasthttp once the answer is written, or when
// writing it failed (wErr: the client went away). It settles the account's
// state, releases the upstream response (closing its connection unless the
// stream ended cleanly) and writes the usage record and the log line.
func (r *relay) CloseWithError(wErr error) error {
	complete := errors.Is(r.err, io.EOF)
	rt, id := r.s.rt(), r.choice.Account.ID
	status, code := r.status, ""
	switch {
	case complete:
		rt.Record(id, rotation.Served, r.status, time.Time{})
		if r.isJSON {
			r.tokens = usageOf(gjson.GetBytes(r.json, "usage"))
		}
		if r.cut {
			closeStream(r.resp, errCut) // unread bytes: the connection cannot be reused
		} else {
			r.resp.CloseBodyStream()
		}
	case r.err != nil:
		// The upstream broke or stalled mid-stream: its fault, and too late
		// to fail over.
		rt.Record(id, rotation.NetworkFault, r.status, time.Time{})
		code = "stream_interrupted"
		closeStream(r.resp, r.err)
	default:
		// The client left: cancel the upstream request by closing its
		// connection; the account did nothing wrong.
		rt.Record(id, rotation.Answered, r.status, time.Time{})
		status, code = statusClientClosed, codeClientClosed
		closeStream(r.resp, errClientGone)
	}
	fasthttp.ReleaseResponse(r.resp)
	if r.failure != "" {
		code = r.failure
	}
	now := r.s.deps.Clock.Now()
	dur := now.Sub(r.start)
	if r.s.deps.Usage != nil {
		r.s.deps.Usage.Append(usage.Record{
			Time: now.UTC(), RequestID: r.rid, AccountID: id, Model: r.model,
			Status: status, Code: code, Tokens: r.tokens, TTFBMS: r.ttfb.Milliseconds(), DurMS: dur.Milliseconds(),
		})
	}
	ev := r.s.deps.Log.Info()
	if !complete {
		ev = r.s.deps.Log.Warn()
		if r.err != nil {
			ev = ev.AnErr("upstream_error", r.err)
		}
	}
	ev = ev.Str("request_id", r.rid).Int("account", r.choice.Index).Str("model", r.model).
		Int("status", status).Int("attempts", r.attempt).Int64("ttfb_ms", r.ttfb.Milliseconds()).Int64("duration_ms", dur.Milliseconds())
	if code != "" {
		ev = ev.Str("code", code)
	}
	if r.tokens != nil {
		ev = ev.Int64("input_tokens", r.tokens.Input).Int64("output_tokens", r.tokens.Output)
	}
	ev.Msg("request")
	return nil
}

var errClientGone = errors.New("rotor: client went away")

// eofReader is the body of a stream already read whole into pending.
type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// sseScanner splits a byte stream into SSE lines and hands each data
// payload to onData. A line split across reads is carried over; one longer
// than maxSSELine is skipped, so memory stays bounded by the longest event
// rotor reads, not by the length of the stream.
type sseScanner struct {
	line   []byte
	skip   bool
	onData func(data []byte)
}

const maxSSELine = 16 << 20

func (sc *sseScanner) feed(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if !sc.skip {
				if len(sc.line)+len(b) > maxSSELine {
					sc.skip, sc.line = true, sc.line[:0]
				} else {
					sc.line = append(sc.line, b...)
				}
			}
			return
		}
		seg := b[:i]
		b = b[i+1:]
		if sc.skip {
			sc.skip = false
			continue
		}
		line := seg
		if len(sc.line) > 0 {
			sc.line = append(sc.line, seg...)
			line = sc.line
		}
		sc.handle(line)
		sc.line = sc.line[:0]
	}
}

func (sc *sseScanner) handle(line []byte) {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	sc.onData(bytes.TrimPrefix(data, []byte{' '}))
}
