package proxy

import (
	"bytes"
	"strings"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/jsonscan"
	"github.com/rotorproxy/rotor/proxy/sse"
	"github.com/rotorproxy/rotor/proxy/upstream"
)

// transportWebSocket names requests that came in as response.create
// frames, in their log line.
const transportWebSocket = "websocket"

// wsResponder answers one response.create frame on a socket: an error
// frame for a refusal, and for an answer every upstream event as a text
// frame of its own, written as it arrives. It also notes what the
// socket's history needs of the answer (socket.create).
type wsResponder struct {
	sk     *socket
	failed bool // a frame could not be written: the client is gone
	// watched is the last attempt's watch: its client may have left.
	watched *upstream.ClientWatch
	// relaying is the answer being written, until its relay is closed:
	// a request a bug ends closes it (socket.panicked).
	relaying *relay

	// The answer's response id and output items, kept while they fit
	// maxHistory, so the next request may name the response.
	responseID string
	output     []byte // output items, comma-separated
	overflow   bool
}

func (w *wsResponder) gone() bool { return w.failed || w.watched.HasLeft() }

// watch watches the socket's connection, which run does not read while a
// request is answered; a close frame is a client leaving too.
func (w *wsResponder) watch() *upstream.ClientWatch {
	w.watched = upstream.NewClientWatch(w.sk.conn.NetConn(), true)
	return w.watched
}

func (w *wsResponder) refuse(resp rerr.Response, headers func(HeaderSetter)) {
	var hs frameHeaders
	if headers != nil {
		headers(&hs)
	}
	w.write(resp.Frame(hs))
}

// commit writes the answer event by event. The relay hands over SSE
// bytes; each data payload leaves as one frame the moment it is read.
func (w *wsResponder) commit(status int, upstream *fasthttp.ResponseHeader, body *relay, length int) {
	w.relaying = body
	var sc sse.Scanner
	sc.OnEvent = w.event
	buf := make([]byte, 16<<10)
	var whole []byte // a JSON answer, framed whole at its end
	tooBig := false
	for !w.failed {
		n, err := body.Read(buf)
		switch {
		case !body.isJSON:
			sc.Feed(buf[:n])
		case len(whole)+n <= maxJSONUsage:
			whole = append(whole, buf[:n]...)
		default:
			whole, tooBig = nil, true // an object too large for one frame: its end says so
		}
		if err != nil {
			break
		}
	}
	if body.isJSON && !w.failed {
		if tooBig {
			w.write(rerr.Build(rerr.Spec{Code: "stream_interrupted", Status: 502,
				Message: "the upstream answered with one object larger than a frame rotor sends"}).Frame(nil))
		} else {
			w.write(append(append([]byte(`{"type":"response.completed","response":`), whole...), '}'))
		}
	}
	w.relaying = nil
	body.CloseWithError(nil) // the relay knows from its own read whether the answer ended
}

// event writes one upstream event as a frame and keeps what the history
// needs.
func (w *wsResponder) event(e sse.Event) {
	w.write(e.Data)
	switch {
	case e.Type == "response.output_item.done" && !w.overflow:
		item := e.Field("item").Raw
		if len(w.output)+len(item) > maxHistory {
			w.overflow = true
			return
		}
		if len(w.output) > 0 {
			w.output = append(w.output, ',')
		}
		w.output = append(w.output, item...)
	case e.Final():
		w.responseID = strings.Clone(e.Field("response.id").Str)
	}
}

// write sends one text frame, bounded in time: a client that cannot take
// it is gone.
func (w *wsResponder) write(p []byte) {
	if w.failed {
		return
	}
	c := w.sk.conn
	if c.SetWriteDeadline(time.Now().Add(socketWriteWait)) != nil || c.WriteMessage(websocket.TextMessage, p) != nil {
		w.failed = true
	}
}

// frameHeaders collects the headers an error frame carries.
type frameHeaders [][2]string

func (h *frameHeaders) Set(k, v string) { *h = append(*h, [2]string{strings.ToLower(k), v}) }

// maxHistory bounds what a socket keeps of its last exchange.
const maxHistory = 16 << 20

// history is what a socket remembers of its last exchange, so that a
// request naming it by previous_response_id can be sent whole to an
// upstream that never had it (HTTP with store:false, or another
// account's socket): the input of that exchange and the output that
// answered it. It is kept as the parts it was made of, each a
// comma-separated list of items, so a long session costs no copy per
// turn.
type history struct {
	id    string
	parts [][]byte
	size  int
	// up is the upstream socket that answered, which knows the exchange
	// itself; nil when it went over HTTP or rotor answered it.
	up *upstreamSocket
}

// add appends a list of items.
func (h *history) add(items []byte) {
	if items = bytes.TrimSpace(items); len(items) > 0 {
		h.parts = append(h.parts, items)
		h.size += len(items) + 1
	}
}

// with is the whole conversation up to and including items, as one
// comma-separated list.
func (h *history) with(items []byte) []byte {
	out := make([]byte, 0, h.size+len(items))
	for _, p := range append(h.parts[:len(h.parts):len(h.parts)], bytes.TrimSpace(items)) {
		if len(p) == 0 {
			continue
		}
		if len(out) > 0 {
			out = append(out, ',')
		}
		out = append(out, p...)
	}
	return out
}

// frameFields are the members of a response.create frame rotor reads.
type frameFields struct {
	noGenerate       bool // "generate":false, a warm-up
	previousResponse string
	inputArray       bool   // input is an array (not a string): items can be joined
	input            []byte // the input array's items, comma-separated
}

func readFrame(frame []byte, ms []jsonscan.Member) frameFields {
	var f frameFields
	for _, m := range ms {
		v := frame[m.ValStart:m.End]
		switch m.Key(frame) {
		case "generate":
			f.noGenerate = string(v) == "false"
		case "previous_response_id":
			f.previousResponse, _ = m.Str(frame)
		case "input":
			if v[0] == '[' {
				f.inputArray, f.input = true, bytes.TrimSpace(v[1:len(v)-1])
			}
		}
	}
	return f
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
	f := readFrame(frame, sc.Members)
	if f.noGenerate {
		sk.warmUp(w, r, f)
		return
	}
	var next history
	if f.previousResponse != "" && f.previousResponse == sk.history.id && f.inputArray {
		prior := sk.history
		r.prior, next = &prior, prior
		next.parts = prior.parts[:len(prior.parts):len(prior.parts)] // appends copy, never share
	}
	// Each request gets the socket's headers, to which the HTTP form
	// adds what the frame carries for them (session_id, x-codex-*).
	r.header = new(fasthttp.RequestHeader)
	sk.header.CopyTo(r.header)
	r.op, r.socket, r.fallbackAffinity = opResponses, sk, sk.affinity
	r.body, r.frame, r.frameInput = frame, frame, f.input
	sk.s.serve(w, r)
	sk.history = history{}
	if w.responseID != "" && !w.overflow && f.inputArray {
		next.id, next.up = w.responseID, r.answeredBy
		next.add(f.input)
		next.add(w.output)
		if next.size <= maxHistory {
			sk.history = next
		}
	}
}

// wholeInput is r's input with the exchange it names in front, nil when
// it names none the socket remembers.
func (r *request) wholeInput() []byte {
	if r.prior == nil {
		return nil
	}
	return r.prior.with(r.frameInput)
}

// asHTTP turns a socket's request into the body of POST /responses, once:
// an attempt over HTTP needs it.
func (r *request) asHTTP() {
	if r.socket == nil || r.httpForm {
		return
	}
	var sc jsonscan.Scanned
	jsonscan.Scan(r.frame, &sc)
	r.body = rewriteFrame(r.frame, sc.Members, r.wholeInput(), r.header)
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
		case frameHeader(k):
			edits[i] = drop
			if v, ok := m.Str(frame); ok {
				hdr.Set(k, v)
			}
		case k == "client_metadata":
			metadataHeaders(frame[m.ValStart:m.End], hdr)
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

// wsHeaderPrefix marks a client_metadata member that stands for a request
// header on a socket, whose handshake carries the socket's headers only:
// ws_request_header_x_openai_internal_codex_responses_lite is the header
// X-OpenAI-Internal-Codex-Responses-Lite of the request over HTTP.
const wsHeaderPrefix = "ws_request_header_"

// metadataHeaders sets in hdr the headers a frame's client_metadata
// stands for (wsHeaderPrefix). The metadata itself stays in the body.
func metadataHeaders(meta []byte, hdr *fasthttp.RequestHeader) {
	if !bytes.Contains(meta, []byte(wsHeaderPrefix)) {
		return
	}
	gjson.ParseBytes(meta).ForEach(func(k, v gjson.Result) bool {
		if name, ok := strings.CutPrefix(k.Str, wsHeaderPrefix); ok && headerToken(name) && v.Type == gjson.String &&
			!strings.ContainsFunc(v.Str, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			hdr.Set(strings.ReplaceAll(name, "_", "-"), v.Str)
		}
		return true
	})
}

// headerToken reports whether name, with _ for -, is a plain header name.
func headerToken(name string) bool {
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return name != ""
}

// frameHeader reports whether a response.create member is one Codex
// sends in the frame where an HTTP request has a header: the session,
// thread and turn ids and the x-codex-* values. The Responses API over
// HTTP knows no such parameters.
func frameHeader(k string) bool {
	return k == "session_id" || k == "thread_id" || k == "turn_id" || strings.HasPrefix(k, "x-")
}

// warmUp answers a generate:false response.create as the Responses API
// does, with an empty completed response, and remembers its input: the
// request that follows names it by previous_response_id and sends only
// what is new.
func (sk *socket) warmUp(w *wsResponder, r *request, f frameFields) {
	id := "resp_" + strings.TrimPrefix(r.id, "rotor_")
	w.write([]byte(`{"type":"response.created","response":{"id":"` + id + `","object":"response","status":"in_progress","output":[]}}`))
	w.write([]byte(`{"type":"response.completed","response":{"id":"` + id + `","object":"response","status":"completed","output":[],` +
		`"usage":{"input_tokens":0,"output_tokens":0,"total_tokens":0}}}`))
	sk.history = history{}
	if f.inputArray {
		sk.history = history{id: id}
		sk.history.add(bytes.Clone(f.input))
	}
	sk.s.finish(r, ending{status: 200, code: "warm_up"})
}
