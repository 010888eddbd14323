package websocket

import (
	"bytes"
	"io"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/proxy/jsonscan"
	"github.com/rotorproxy/rotor/proxy/sse"
)

// Answer writes an answer read from body: each SSE event's data as a
// text frame of its own, the moment it is read; a JSON answer (isJSON)
// whole at its end, as the response.completed event it stands for. A
// JSON answer longer than maxJSON is not written: tooBig says so, for
// the caller to say why. out notes what the socket's history needs.
func (w *Writer) Answer(body io.Reader, isJSON bool, maxJSON int, out *Output) (tooBig bool) {
	var sc sse.Scanner
	sc.OnEvent = func(e sse.Event) {
		w.Write(e.Data)
		out.note(e)
	}
	buf := make([]byte, 16<<10)
	var whole []byte // a JSON answer, framed whole at its end
	for !w.failed {
		n, err := body.Read(buf)
		switch {
		case !isJSON:
			sc.Feed(buf[:n])
		case len(whole)+n <= maxJSON:
			whole = append(whole, buf[:n]...)
		default:
			whole, tooBig = nil, true // an object too large for one frame: its end says so
		}
		if err != nil {
			break
		}
	}
	if !isJSON || w.failed {
		return false
	}
	if !tooBig {
		w.Write(append(append([]byte(`{"type":"response.completed","response":`), whole...), '}'))
	}
	return tooBig
}

// Output is what a socket's history needs of an answer: its response id
// and its output items, kept while they fit maxHistory.
type Output struct {
	ResponseID string // the answer's response id, from its final event
	items      []byte // output items, comma-separated
	overflow   bool
}

// note keeps what the history needs of one event.
func (o *Output) note(e sse.Event) {
	switch {
	case e.Type == "response.output_item.done" && !o.overflow:
		item := e.Field("item").Raw
		if len(o.items)+len(item) > maxHistory {
			o.overflow = true
			return
		}
		if len(o.items) > 0 {
			o.items = append(o.items, ',')
		}
		o.items = append(o.items, item...)
	case e.Final():
		o.ResponseID = strings.Clone(e.Field("response.id").Str)
	}
}

// ErrorHeaders collects the headers an error frame carries.
type ErrorHeaders [][2]string

// Set adds the header k, lower-cased as a frame carries it.
func (h *ErrorHeaders) Set(k, v string) { *h = append(*h, [2]string{strings.ToLower(k), v}) }

// maxHistory bounds what a socket keeps of its last exchange.
const maxHistory = 16 << 20

// History is what a socket remembers of its last exchange, so that a
// request naming it by previous_response_id can be sent whole to an
// upstream that never had it (HTTP with store:false, or another
// account's socket): the input of that exchange and the output that
// answered it. It is kept as the parts it was made of, each a
// comma-separated list of items, so a long session costs no copy per
// turn.
type History struct {
	ID    string // the response id a request names the exchange by
	parts [][]byte
	size  int
	// Up is the upstream socket that answered, which knows the exchange
	// itself; nil when it went over HTTP or rotor answered it.
	Up *Upstream
}

// Add appends a list of items.
func (h *History) Add(items []byte) {
	if items = bytes.TrimSpace(items); len(items) > 0 {
		h.parts = append(h.parts, items)
		h.size += len(items) + 1
	}
}

// Parts are the lists of items the exchange was made of, in order.
func (h *History) Parts() [][]byte { return h.parts }

// With is the whole conversation up to and including items, as one
// comma-separated list; nil for no history (a request that names none
// the socket remembers).
func (h *History) With(items []byte) []byte {
	if h == nil {
		return nil
	}
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

// Prior is the exchange a frame with the fields f names when it is the
// socket's last and f's input can be joined to it: a copy, which the
// next exchange grows; nil otherwise.
func (sk *Socket) Prior(f Fields) *History {
	if f.PreviousResponse == "" || f.PreviousResponse != sk.History.ID || !f.InputArray {
		return nil
	}
	prior := sk.History
	return &prior
}

// Remember makes the exchange just answered the socket's history: prior
// (nil for none), then f's input and out's items, answered by up. An
// answer with no response id or too long to keep leaves none.
func (sk *Socket) Remember(prior *History, f Fields, out *Output, up *Upstream) {
	sk.History = History{}
	if out.ResponseID == "" || out.overflow || !f.InputArray {
		return
	}
	var next History
	if prior != nil {
		next = *prior
		next.parts = prior.parts[:len(prior.parts):len(prior.parts)] // appends copy, never share
	}
	next.ID, next.Up = out.ResponseID, up
	next.Add(f.Input)
	next.Add(out.items)
	if next.size <= maxHistory {
		sk.History = next
	}
}

// WarmUp answers a generate:false response.create as the Responses API
// does, with an empty completed response named id, and remembers its
// input: the request that follows names it by previous_response_id and
// sends only what is new.
func (sk *Socket) WarmUp(w *Writer, id string, f Fields) {
	w.Write([]byte(`{"type":"response.created","response":{"id":"` + id + `","object":"response","status":"in_progress","output":[]}}`))
	w.Write([]byte(`{"type":"response.completed","response":{"id":"` + id + `","object":"response","status":"completed","output":[],` +
		`"usage":{"input_tokens":0,"output_tokens":0,"total_tokens":0}}}`))
	sk.History = History{}
	if f.InputArray {
		sk.History = History{ID: id}
		sk.History.Add(bytes.Clone(f.Input))
	}
}

// Fields are the members of a response.create frame rotor reads.
type Fields struct {
	NoGenerate       bool // "generate":false, a warm-up
	PreviousResponse string
	InputArray       bool   // input is an array (not a string): items can be joined
	Input            []byte // the input array's items, comma-separated
}

// ReadFields reads a frame's fields from its top-level members ms.
func ReadFields(frame []byte, ms []jsonscan.Member) Fields {
	var f Fields
	for _, m := range ms {
		v := frame[m.ValStart:m.End]
		switch m.Key(frame) {
		case "generate":
			f.NoGenerate = string(v) == "false"
		case "previous_response_id":
			f.PreviousResponse, _ = m.Str(frame)
		case "input":
			if v[0] == '[' {
				f.InputArray, f.Input = true, bytes.TrimSpace(v[1:len(v)-1])
			}
		}
	}
	return f
}

// wsHeaderPrefix marks a client_metadata member that stands for a request
// header on a socket, whose handshake carries the socket's headers only:
// ws_request_header_x_openai_internal_codex_responses_lite is the header
// X-OpenAI-Internal-Codex-Responses-Lite of the request over HTTP.
const wsHeaderPrefix = "ws_request_header_"

// MetadataHeaders sets in hdr the headers a frame's client_metadata
// stands for (wsHeaderPrefix). The metadata itself stays in the body.
func MetadataHeaders(meta []byte, hdr *fasthttp.RequestHeader) {
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

// IsFrameHeader reports whether a response.create member is one Codex
// sends in the frame where an HTTP request has a header: the session,
// thread and turn ids and the x-codex-* values. The Responses API over
// HTTP knows no such parameters.
func IsFrameHeader(k string) bool {
	return k == "session_id" || k == "thread_id" || k == "turn_id" || strings.HasPrefix(k, "x-")
}
