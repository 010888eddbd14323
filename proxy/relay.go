package proxy

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/backend"
	"github.com/rotorproxy/rotor/proxy/chat"
	"github.com/rotorproxy/rotor/proxy/sse"
	"github.com/rotorproxy/rotor/proxy/upstream"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// relay is the body of a successful answer. The responder reads it and
// writes every chunk it returns to the client at once (fasthttp's server:
// one chunk, one flush), so each SSE event leaves rotor as soon as it
// arrives, with no goroutine and no buffer beyond the server's copy
// buffer. As bytes pass it reads the few events rotor cares about (usage,
// quota, failure); when the answer ends it settles the account and
// finishes the request.
type relay struct {
	s       *Server
	r       *request
	choice  rotation.Choice
	status  int
	resp    *fasthttp.Response
	body    io.Reader
	pending []byte // bytes already read from the upstream, sent first
	held    []byte // holdBack's buffer under pending, released once it is sent

	// assembled: the body is one JSON object rotor built from a whole
	// stream; isJSON: the body is a JSON object, kept (bounded) in json
	// so its usage can be read at the end.
	assembled bool
	isJSON    bool
	json      []byte

	ttfb    time.Duration
	err     error // sticky: the upstream's io.EOF or failure
	scan    sse.Scanner
	tokens  *usage.Tokens // nil, or tok: what finish records, synchronously
	tok     usage.Tokens
	failure string // code of a stream's failure event

	// poolShown: showPoolLimits recorded the quota of the codex.rate_limits
	// events held back (and may have rewritten them to the pool's);
	// until the first output the relay takes no quota from events.
	poolShown bool
	// compactSrc is the request of a compaction (either way Codex asks
	// for one), kept with its answer's compaction item so another account
	// can make it again (docs/codex.md).
	compactSrc *backend.CompactSource

	// Chat Completions on a ChatGPT account: the Codex events are
	// translated as they arrive. out is the translated bytes not yet
	// handed over (from outOff on), cut that the answer ended before the
	// upstream's stream did.
	chat   *chat.Stream
	out    []byte
	outOff int
	cut    bool

	// onEventFn is rl.onEvent, made once per pooled relay and kept when it
	// is reset: a method value costs an allocation each time it is made.
	onEventFn func(sse.Event)
}

const maxJSONUsage = 8 << 20

// maxPooledJSON is the largest JSON buffer a pooled relay keeps: a small
// answer's, not the rare large one's.
const maxPooledJSON = 64 << 10

// commit hands the answer ans from the account of ch to the client
// through w; the relay it makes finishes the request when the answer
// ends.
func (s *Server) commit(w responder, r *request, ch *rotation.Choice, ans *answer) {
	shown := ans.answerForm != formChatStream && s.showPoolLimits(ch, ans)
	resp := ans.resp
	rl := relays.Get().(*relay)
	*rl = relay{
		s: s, r: r, choice: *ch, status: resp.StatusCode(), resp: resp,
		body: resp.BodyStream(), pending: ans.pending, held: ans.pending,
		onEventFn: rl.onEventFn, json: rl.json, // kept by the pool, emptied
	}
	if rl.onEventFn == nil {
		rl.onEventFn = rl.onEvent
	}
	r.handedOff = true // the relay finishes r, after the handler when over HTTP
	if src, ok := compactionSource(r); ok {
		kept := src // a copy: r.body does not outlive the handler
		rl.compactSrc = &kept
	}
	if ans.ended {
		rl.body = eofReader{}
	}
	n := resp.Header.ContentLength()
	if n < 0 || len(rl.pending) > 0 {
		n = -1
	}
	switch {
	case ans.assembled != nil:
		rl.body, n, rl.assembled = bytes.NewReader(ans.assembled), len(ans.assembled), true
	case rl.body == nil:
		rl.body = bytes.NewReader(resp.Body())
	}
	rl.isJSON = rl.assembled || bytes.HasPrefix(resp.Header.ContentType(), []byte("application/json"))
	rl.scan.OnEvent = rl.onEventFn
	rl.poolShown = shown
	if ans.answerForm == formChatStream && !rl.assembled {
		rl.chat = chat.NewStream(chatID(r.id), r.start.Unix(), r.model, r.chat.IncludeUsage,
			func(code, message string) []byte { return streamError(r.id, code, message) })
		n = -1
	}
	if !rl.isJSON && !rl.assembled && sseAnswer(resp) {
		r.streaming = true
		s.metrics.StreamOpened()
	}
	w.commit(rl.status, &resp.Header, rl, n)
}

// Read hands the responder the next bytes of the answer as soon as the
// upstream sends them.
//
// It runs after the handler returned, outside its recover: a bug met here
// (reading the events) is logged once with the request id and cuts the
// answer with errPanicked, so the client sees it end early. Over HTTP/1.0
// the relay runs on a goroutine of its own, where a panic would end the
// process.
func (rl *relay) Read(p []byte) (n int, err error) {
	defer func() {
		if v := recover(); v != nil {
			rl.s.panicLog(rl.r.id, v).Msg("relay panic")
			rl.err, n, err = errPanicked, 0, errPanicked
		}
	}()
	if rl.chat != nil {
		return rl.readChat(p)
	}
	if len(rl.pending) > 0 {
		n = copy(p, rl.pending)
		rl.pending = rl.pending[n:]
		if len(rl.pending) == 0 {
			releaseHeld(rl.held) // not kept for the rest of the stream
			rl.pending, rl.held = nil, nil
		}
		rl.observe(p[:n])
		return n, nil
	}
	if rl.err != nil {
		return 0, rl.err
	}
	n, err = rl.body.Read(p)
	if n > 0 {
		rl.observe(p[:n])
	}
	if err != nil {
		rl.err = err
	}
	return n, err
}

// readChat hands the responder the chat chunks translated from the
// upstream's next bytes: each read from the upstream is translated and
// handed on before the next, so nothing waits in rotor.
func (rl *relay) readChat(p []byte) (int, error) {
	for rl.outOff == len(rl.out) {
		rl.out, rl.outOff = rl.out[:0], 0
		switch {
		case rl.chat.Done():
			if rl.err == nil {
				rl.err, rl.cut = io.EOF, true
			}
			return 0, io.EOF
		case rl.err != nil:
			if rl.err == io.EOF {
				rl.err = io.ErrUnexpectedEOF // ended without its final event
			}
			rl.out = rl.chat.Fail(rl.out, "stream_interrupted", "the upstream stream broke before the answer was complete")
			if len(rl.out) == 0 {
				return 0, io.EOF
			}
			continue
		}
		b := rl.pending
		rl.pending = nil
		if len(b) == 0 {
			// Read into p itself: observe translates every byte into
			// rl.out before p is filled with the translation.
			n, err := rl.body.Read(p)
			b = p[:n]
			if err != nil {
				rl.err = err
			}
		}
		rl.observe(b)
	}
	n := copy(p, rl.out[rl.outOff:])
	rl.outOff += n
	return n, nil
}

func (rl *relay) observe(b []byte) {
	if rl.ttfb == 0 {
		rl.ttfb = rl.s.deps.Clock.Now().Sub(rl.r.start)
	}
	if rl.isJSON {
		if len(rl.json)+len(b) <= maxJSONUsage {
			rl.json = append(rl.json, b...)
		}
		return
	}
	rl.scan.Feed(b)
}

// onEvent reads one upstream event: a chat translation sees every one,
// and rotor keeps its usage, failure and quota.
func (rl *relay) onEvent(e sse.Event) {
	if rl.chat != nil {
		rl.out = rl.chat.Event(rl.out, e.Type, e.Data)
	}
	if e.ReadTokens(&rl.tok) {
		rl.tokens = &rl.tok
	}
	if f := failureOf(e); f.code != "" {
		rl.failure = f.code
	}
	if rl.poolShown && !sse.Bootstrap[e.Type] {
		rl.poolShown = false
	}
	if q := backend.EventQuota(e, rl.s.deps.Clock); q != nil && !rl.poolShown {
		rl.s.runtime().SetQuota(rl.choice.Account.ID, *q)
	}
	switch {
	case e.Type == "response.output_item.done" && backend.CarriesBlob(e.Data):
		item := e.Field("item")
		rl.s.mints.LearnItem(item, rl.choice.Account.ID)
		if rl.compactSrc != nil {
			rl.s.compactions.KeepItem(item, *rl.compactSrc) // a compaction v2's
		}
	case e.Type == "codex.response.metadata" || e.Type == "response.metadata":
		// A socket's turn state comes in an event, not a header.
		rl.s.mints.LearnTurnState([]byte(e.Field("headers.x-codex-turn-state").Str), rl.choice.Account.ID)
	}
}

// CloseWithError is called by the responder once the answer is written,
// or when writing it failed (wErr: the client went away). It releases the
// upstream response (closing its connection unless the stream ended
// cleanly), settles the account's state and finishes the request.
//
// Over HTTP, fasthttp calls it after the handler returned, outside the
// handler's recover: a panic here would end the process and every stream
// in it, or, caught by fasthttp, lose the answer still in its write
// buffer. The answer is written by then, so a bug is logged, once, with
// the request id; the upstream connection is let go of before anything
// that could meet one.
func (rl *relay) CloseWithError(wErr error) error {
	s, id := rl.s, rl.r.id
	defer func() {
		if v := recover(); v != nil {
			s.panicLog(id, v).Msg("relay panic")
		}
	}()
	complete := errors.Is(rl.err, io.EOF)
	switch {
	case complete && rl.cut:
		upstream.CloseStream(rl.resp, upstream.ErrCut) // unread bytes: the connection cannot be reused
	case complete:
		rl.resp.CloseBodyStream()
	case rl.err != nil: // the upstream's failure, or errPanicked
		upstream.CloseStream(rl.resp, rl.err)
	default:
		upstream.CloseStream(rl.resp, errClientGone) // cancels the upstream request
	}
	fasthttp.ReleaseResponse(rl.resp)
	rl.resp = nil

	rt, acct := s.runtime(), rl.choice.Account.ID
	e := ending{status: rl.status, choice: &rl.choice, ttfb: rl.ttfb}
	switch {
	case complete:
		rt.Record(acct, rotation.Served, rl.status, rotation.Limit{})
		if rl.isJSON {
			if sse.UsageAt(rl.json, "usage", &rl.tok) {
				rl.tokens = &rl.tok
			}
			s.mints.LearnOutput(rl.json, acct)
			if rl.compactSrc != nil {
				gjson.GetBytes(rl.json, "output").ForEach(func(_, item gjson.Result) bool {
					s.compactions.KeepItem(item, *rl.compactSrc)
					return true
				})
			}
		}
	case rl.err == errPanicked:
		// rotor's own bug cut the answer: the account did nothing wrong.
		rt.Record(acct, rotation.Answered, rl.status, rotation.Limit{})
		e.code = rerr.ProxyError
	case rl.err != nil:
		// The upstream broke or stalled mid-stream: its fault, and too late
		// to fail over.
		rt.Record(acct, rotation.NetworkFault, rl.status, rotation.Limit{})
		e.code, e.err = "stream_interrupted", rl.err
	default:
		// The client left; the account did nothing wrong.
		rt.Record(acct, rotation.Answered, rl.status, rotation.Limit{})
		e.status, e.code = statusClientClosed, codeClientClosed
	}
	if rl.failure != "" {
		e.code = rl.failure
	}
	e.tokens, e.warn = rl.tokens, !complete
	r, json := rl.r, rl.json
	s.finish(r, e)
	*rl = relay{onEventFn: rl.onEventFn}
	if cap(json) <= maxPooledJSON {
		rl.json = json[:0] // the next JSON answer's usage is read in it
	}
	relays.Put(rl)
	r.release()
	return nil
}

// relays recycles relays, for the reason requests recycles requests.
// The responder calls CloseWithError once, and uses the relay no more.
var relays = sync.Pool{New: func() any { return new(relay) }}

var errClientGone = errors.New("rotor: client went away")

// eofReader is the body of a stream already read whole into pending.
type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }
