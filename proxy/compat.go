package proxy

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/proxy/chat"
)

// DroppedForChatGPT are the request parameters the ChatGPT Codex backend
// rejects ("Unsupported parameter: …"); rotor drops them when a generic
// client's request goes to a ChatGPT account (SPEC §5). The backend manages
// output budgets and sampling itself.
var DroppedForChatGPT = []string{
	"max_output_tokens", "max_completion_tokens", "max_tokens",
	"temperature", "top_p", "frequency_penalty", "presence_penalty",
}

// shape is how an upstream's answer becomes the client's.
type shape int

const (
	shapeAsIs           shape = iota // relayed byte for byte
	shapeResponse                    // a Codex stream assembled into one Response object
	shapeChatStream                  // a Codex stream translated to chat.completion.chunk events
	shapeChatCompletion              // a Codex stream assembled into one chat.completion
	shapeModelList                   // the Codex model catalog as OpenAI's model list
)

// chatgptStage is the body a ChatGPT account gets for c, and the shape of
// its answer: Responses bodies adapted for generic clients (chatgptBody),
// Chat Completions translated to Responses (SPEC §7).
func chatgptStage(c *call) ([]byte, shape, error) {
	switch c.op {
	case opResponses:
		body, asm, err := chatgptBody(c.body, &c.scan)
		if asm {
			return body, shapeResponse, err
		}
		return body, shapeAsIs, err
	case opChat:
		body, err := chat.ToResponses(c.body)
		if !c.chat.Stream {
			return body, shapeChatCompletion, err
		}
		return body, shapeChatStream, err
	}
	return c.body, shapeAsIs, nil
}

// chatgptBody adapts a Responses request body for the Codex backend, which
// only streams and does not store: it forces "stream":true and
// "store":false, supplies "instructions":"" when missing and drops the
// parameters the backend rejects. assemble reports that the client did not
// ask for a stream, so the proxy must answer with one Response object. A
// body that needs nothing (Codex CLI's) is returned as is, byte for byte;
// any other is edited in one pass over its top-level members, keeping
// every byte of the members it does not touch as the client sent them.
func chatgptBody(body []byte, s *scanned) (out []byte, assemble bool, err error) {
	if !s.object {
		return nil, false, errNotObject
	}
	var stream, store, instr bool
	changed := false
	for i := range s.members {
		m := &s.members[i]
		m.edit = keep
		switch k, v := m.key(body), body[m.valStart:m.end]; {
		case k == "stream":
			stream = string(v) == "true"
			if !stream {
				m.edit = setTrue
			}
		case k == "store":
			store = true
			if string(v) != "false" {
				m.edit = setFalse
			}
		case k == "instructions":
			// "instructions":null is as missing: the backend wants a string.
			instr = true
			if string(v) == "null" {
				m.edit = setEmptyString
			}
		case slices.Contains(DroppedForChatGPT, k):
			m.edit = drop
		}
		changed = changed || m.edit != keep
	}
	var add []byte
	if !stream && !slices.ContainsFunc(s.members, func(m member) bool { return m.edit == setTrue }) {
		add = append(add, `"stream":true,`...)
	}
	if !store {
		add = append(add, `"store":false,`...)
	}
	if !instr {
		add = append(add, `"instructions":"",`...)
	}
	if !changed && len(add) == 0 {
		return body, false, nil
	}
	return splice(body, s.members, bytes.TrimSuffix(add, []byte(","))), !stream, nil
}

var errNotObject = errors.New("request body is not a JSON object")

// splice writes the object at obj in body with its members edited and add
// (encoded members, comma-separated) appended. Between two members that
// stay neighbours, and around the object, the client's bytes are kept.
func splice(body []byte, ms []member, add []byte) []byte {
	obj := bytes.IndexByte(body, '{')
	out := make([]byte, 0, len(body)+len(add)+16)
	out = append(out, '{')
	last, wrote := obj+1, false // last: end of the last member written, or the object's start
	adjacent := true            // nothing dropped since last
	for _, m := range ms {
		if m.edit == drop {
			adjacent = false
			continue
		}
		switch {
		case adjacent:
			out = append(out, body[last:m.start]...) // the client's separator, comma and all
		case wrote:
			out = append(out, ',')
		}
		out = append(out, body[m.start:m.valStart]...)
		if m.edit != keep {
			out = append(out, editValues[m.edit]...)
		} else {
			out = append(out, body[m.valStart:m.end]...)
		}
		last, wrote, adjacent = m.end, true, true
	}
	if len(add) > 0 {
		if wrote {
			out = append(out, ',')
		}
		out = append(out, add...)
	}
	end := bytes.LastIndexByte(body, '}')
	if adjacent && end >= last {
		return append(out, body[last:end+1]...) // trailing space, then '}'
	}
	return append(out, '}')
}

// bootstrapEvents come before any output; holding them back keeps the
// first byte from reaching the client until the stream shows it will
// produce output, so a stream that fails at once can still fail over.
var bootstrapEvents = map[string]bool{
	"response.created": true, "response.in_progress": true, "codex.rate_limits": true,
}

// maxHeldBack bounds the bytes held back before the first output event.
const maxHeldBack = 256 << 10

// errHoldBackFull ends a hold-back that has seen enough.
var errHoldBackFull = errors.New("hold-back bound reached")

// holdBack reads an SSE answer up to its first output event and returns
// the bytes read, to be sent first. When the stream instead fails before
// any output (response.failed, or an error event), it returns the
// failure's code: the attempt is then a failure like an HTTP error.
func holdBack(stream io.Reader) (pending []byte, failure string, err error) {
	// What is held back is usually a few hundred bytes that then wait for
	// the whole stream: read into a pooled buffer, keep an exact copy.
	pb := holdBackBufs.Get().(*[]byte)
	buf := (*pb)[:0]
	defer func() {
		pending = bytes.Clone(pending)
		if cap(buf) == holdBackBuf {
			*pb = buf
			holdBackBufs.Put(pb)
		}
	}()
	var sc sseScanner
	done := false
	sc.onData = func(data []byte) {
		if done {
			return
		}
		t := eventField(data, "type").Str
		switch {
		case bootstrapEvents[t]:
		case t == "response.failed":
			failure = cmp.Or(gjson.GetBytes(data, "response.error.code").String(), "response_failed")
			done = true
		case t == "error":
			failure = cmp.Or(gjson.GetBytes(data, "error.code").String(), gjson.GetBytes(data, "code").String())
			failure = cmp.Or(failure, "stream_error")
			done = true
		default:
			done = true // the first output event: release everything
		}
	}
	for !done {
		if len(buf) == cap(buf) {
			if len(buf) >= maxHeldBack {
				return buf, "", nil
			}
			buf = append(buf, make([]byte, len(buf))...)[:len(buf)]
		}
		n, err := stream.Read(buf[len(buf):cap(buf)])
		sc.feed(buf[len(buf) : len(buf)+n])
		buf = buf[:len(buf)+n]
		if err != nil {
			return buf, failure, err
		}
	}
	return buf, failure, nil
}

const holdBackBuf = 4 << 10

var holdBackBufs = sync.Pool{New: func() any { b := make([]byte, 0, holdBackBuf); return &b }}

// failedStreamOutcome classifies a stream that failed before any output.
func failedStreamOutcome(code string) outcome {
	if containsAny(code, "usage_limit", "rate_limit", "insufficient_quota") {
		return outUsageLimit
	}
	return outServerError // server_is_overloaded, slow_down and the like
}

// assembler builds the one JSON object a non-streaming client expects
// from the events of a whole Codex stream, keeping only what it needs.
type assembler interface {
	Event(data []byte)
	// Result is the object, or failure != "" when the stream failed or
	// ended without its final event.
	Result() (body []byte, failure string)
}

// newAssembler is the assembler an answer of shape sh needs, nil when the
// answer is streamed to the client.
func newAssembler(c *call, sh shape) assembler {
	switch sh {
	case shapeResponse:
		return &responseAssembler{}
	case shapeChatCompletion:
		return chat.NewCompletion(chatID(c.rid), c.start.Unix(), c.model)
	}
	return nil
}

// assemble reads a whole stream through asm.
func assemble(stream io.Reader, asm assembler) (body []byte, failure string, err error) {
	var sc sseScanner
	sc.onData = asm.Event
	buf := make([]byte, 32<<10)
	for {
		n, rerr := stream.Read(buf)
		sc.feed(buf[:n])
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			_, failure = asm.Result()
			return nil, failure, rerr
		}
	}
	body, failure = asm.Result()
	return body, failure, nil
}

// responseAssembler builds the Response object: the final
// response.completed event's response, with its output filled from the
// output_item.done events when the backend left it empty.
type responseAssembler struct {
	final   []byte
	items   []json.RawMessage
	failure string
}

func (a *responseAssembler) Event(data []byte) {
	switch gjson.GetBytes(data, "type").Str {
	case "response.output_item.done":
		if it := gjson.GetBytes(data, "item"); it.Exists() {
			a.items = append(a.items, json.RawMessage(it.Raw))
		}
	case "response.completed", "response.incomplete":
		a.final = []byte(gjson.GetBytes(data, "response").Raw)
	case "response.failed":
		a.failure = cmp.Or(gjson.GetBytes(data, "response.error.code").String(), "response_failed")
	}
}

func (a *responseAssembler) Result() ([]byte, string) {
	if a.final == nil {
		return nil, cmp.Or(a.failure, "stream_incomplete")
	}
	final := a.final
	if out := gjson.GetBytes(final, "output"); len(a.items) > 0 && (!out.Exists() || len(out.Array()) == 0) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(final, &m); err != nil {
			return nil, "stream_incomplete"
		}
		m["output"], _ = json.Marshal(a.items)
		final, _ = json.Marshal(m)
	}
	return final, ""
}

// chatID is the chatcmpl- id of the Chat Completions answer to request rid.
func chatID(rid string) string { return "chatcmpl-" + strings.TrimPrefix(rid, "rotor_") }

// modelList turns the Codex backend's model catalog
// ({"models":[{"slug":...},...]}) into OpenAI's list shape. An answer
// that is already a list passes as it is.
func modelList(catalog []byte, now time.Time) []byte {
	if gjson.GetBytes(catalog, "object").Str == "list" {
		return catalog
	}
	b := append(make([]byte, 0, 256), `{"object":"list","data":[`...)
	n := 0
	for _, m := range gjson.GetBytes(catalog, "models").Array() {
		id := m.Get("slug")
		if id.Type != gjson.String {
			id = m.Get("id")
		}
		if id.Type != gjson.String || id.Str == "" {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(b, `{"id":`...)
		b = append(b, id.Raw...)
		b = append(b, `,"object":"model","created":`...)
		b = strconv.AppendInt(b, now.Unix(), 10)
		b = append(b, `,"owned_by":"openai"}`...)
	}
	return append(b, "]}"...)
}

// sseAnswer reports whether resp is a server-sent event stream.
func sseAnswer(resp *fasthttp.Response) bool {
	return bytes.HasPrefix(resp.Header.ContentType(), []byte("text/event-stream"))
}
