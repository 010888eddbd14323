package proxy

import (
	"bytes"
	"errors"
	"io"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/rotation"
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
	tokens  *rotation.Tokens
	failure string // code of a response.failed event
}

const maxJSONUsage = 8 << 20

// relay commits the answer of res to the client.
func (s *Server) relay(c *call, ch *rotation.Choice, res *result) {
	resp, ctx := res.resp, c.ctx
	ctx.SetStatusCode(resp.StatusCode())
	for k, v := range resp.Header.All() {
		if !headerIn(dropResponseHeaders, k) {
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
	ctx.SetBodyStream(r, n)
}

// Read hands the server the next bytes of the answer as soon as the
// upstream sends them.
func (r *relay) Read(p []byte) (int, error) {
	if len(r.pending) > 0 {
		n := copy(p, r.pending)
		r.pending = r.pending[n:]
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

func (r *relay) observe(b []byte) {
	if r.ttfb == 0 {
		r.ttfb = time.Since(r.start)
	}
	if r.isJSON {
		if len(r.json)+len(b) <= maxJSONUsage {
			r.json = append(r.json, b...)
		}
		return
	}
	r.scan.feed(b)
}

// onEvent reads one SSE data line; only a handful of event types matter.
func (r *relay) onEvent(data []byte) {
	switch gjson.GetBytes(data, "type").Str {
	case "response.completed", "response.done", "response.incomplete":
		r.tokens = usageOf(gjson.GetBytes(data, "response.usage"))
	case "response.failed":
		r.failure = gjson.GetBytes(data, "response.error.code").String()
		r.tokens = usageOf(gjson.GetBytes(data, "response.usage"))
	case "codex.rate_limits":
		if q := quotaFromEvent(r.s.deps.Clock.Now(), data); q != nil {
			r.s.rt().SetQuota(r.choice.Account.ID, *q)
		}
	}
}

func usageOf(u gjson.Result) *rotation.Tokens {
	if !u.IsObject() {
		return nil
	}
	return &rotation.Tokens{
		Input:     u.Get("input_tokens").Int(),
		Cached:    u.Get("input_tokens_details.cached_tokens").Int(),
		Output:    u.Get("output_tokens").Int(),
		Reasoning: u.Get("output_tokens_details.reasoning_tokens").Int(),
		Total:     u.Get("total_tokens").Int(),
	}
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
		rt.Success(id, r.status)
		if r.isJSON {
			r.tokens = usageOf(gjson.GetBytes(r.json, "usage"))
		}
		r.resp.CloseBodyStream()
	case r.err != nil:
		// The upstream broke or stalled mid-stream: its fault, and too late
		// to fail over.
		rt.Failure(id, rotation.CooldownNetworkError, rotation.NetworkErrorCooldown)
		code = "stream_interrupted"
		closeStream(r.resp, r.err)
	default:
		// The client left: cancel the upstream request by closing its
		// connection; the account did nothing wrong.
		rt.Used(id, r.status)
		status, code = 499, "client_closed"
		closeStream(r.resp, errClientGone)
	}
	fasthttp.ReleaseResponse(r.resp)
	if r.failure != "" {
		code = r.failure
	}
	dur := time.Since(r.start)
	if r.s.deps.Usage != nil {
		r.s.deps.Usage.Append(rotation.Usage{
			Time: r.s.deps.Clock.Now().UTC(), RequestID: r.rid, AccountID: id, Model: r.model,
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
