package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/proxy/chat"
	"github.com/rotorproxy/rotor/proxy/sse"
)

// answerForm is how an upstream's answer becomes the client's.
type answerForm int

const (
	formAsIs           answerForm = iota // relayed byte for byte
	formResponse                         // a Codex stream assembled into one Response object
	formChatStream                       // a Codex stream translated to chat.completion.chunk events
	formChatCompletion                   // a Codex stream assembled into one chat.completion
	formModelList                        // the Codex model catalog as OpenAI's model list
)

// maxHeldBack bounds the bytes held back before the first output event.
const maxHeldBack = 256 << 10

// holdBack reads an SSE answer up to its first output event and returns
// the bytes read, to be sent first. When the stream instead fails before
// any output (response.failed, or an error event), it returns how it
// failed: the attempt is then judged like an HTTP error
// (failedStreamVerdict).
// pending is read into a pooled buffer; releaseHeld returns it once it
// is sent, or will not be.
func holdBack(stream io.Reader) (pending []byte, failed streamFailure, err error) {
	buf := holdBackBufs.Get().(*[holdBackBuf]byte)[:0]
	var sc sse.Scanner
	done := false
	sc.OnEvent = func(e sse.Event) {
		if done || sse.Bootstrap[e.Type] {
			return
		}
		failed, done = failureOf(e), true // a failure, or the first output event
	}
	for !done {
		if len(buf) == cap(buf) {
			if len(buf) >= maxHeldBack {
				return buf, streamFailure{}, nil
			}
			buf = append(buf, make([]byte, len(buf))...)[:len(buf)]
		}
		n, err := stream.Read(buf[len(buf):cap(buf)])
		sc.Feed(buf[len(buf) : len(buf)+n])
		buf = buf[:len(buf)+n]
		if err != nil {
			return buf, failed, err
		}
	}
	return buf, failed, nil
}

// holdBackBuf is the pooled buffer a hold-back starts with: what is held
// back is usually the stream's first few events, and a buffer is held
// only until the relay's first read sends it on. One that had to grow is
// left to the collector.
const holdBackBuf = 4 << 10

var holdBackBufs = sync.Pool{New: func() any { return new([holdBackBuf]byte) }}

// releaseHeld returns pending, as holdBack returned it, to the pool; it
// must not be used after.
func releaseHeld(pending []byte) {
	if cap(pending) == holdBackBuf {
		holdBackBufs.Put((*[holdBackBuf]byte)(pending[:holdBackBuf]))
	}
}

// assembler builds the one JSON object a non-streaming client expects
// from the events of a whole Codex stream, keeping only what it needs.
type assembler interface {
	Event(typ string, data []byte)
	// Result is the object, or failure != "" when the stream failed or
	// ended without its final event.
	Result() (body []byte, failure string)
}

// newAssembler is the assembler an answer of form sh to r needs, nil
// when the answer is streamed to the client.
func newAssembler(r *request, sh answerForm) assembler {
	switch sh {
	case formResponse:
		return &responseAssembler{}
	case formChatCompletion:
		return chat.NewCompletion(chatID(r.id), r.start.Unix(), r.model)
	}
	return nil
}

// assemble reads a whole stream through asm. failed carries the message
// of the event the stream failed with, if one said why.
func assemble(stream io.Reader, asm assembler) (body []byte, failed streamFailure, err error) {
	var sc sse.Scanner
	sc.OnEvent = func(e sse.Event) {
		asm.Event(e.Type, e.Data)
		if f := failureOf(e); f.code != "" {
			failed = f
		}
	}
	buf := make([]byte, 32<<10)
	for {
		n, rerr := stream.Read(buf)
		sc.Feed(buf[:n])
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			_, failed.code = asm.Result()
			return nil, failed, rerr
		}
	}
	body, failed.code = asm.Result()
	return body, failed, nil
}

// responseAssembler builds the Response object: the final
// response.completed event's response, with its output filled from the
// output_item.done events when the backend left it empty.
type responseAssembler struct {
	final   []byte
	items   []json.RawMessage
	failure string
}

func (a *responseAssembler) Event(typ string, data []byte) {
	switch typ {
	case "response.output_item.done":
		if it := gjson.GetBytes(data, "item"); it.Exists() {
			a.items = append(a.items, json.RawMessage(it.Raw))
		}
	case "response.completed", "response.incomplete":
		a.final = []byte(gjson.GetBytes(data, "response").Raw)
	case "response.failed":
		a.failure = failureOf(sse.Event{Data: data, Type: typ}).code
	}
}

func (a *responseAssembler) Result() ([]byte, string) {
	if a.final == nil {
		if a.failure != "" {
			return nil, a.failure
		}
		return nil, "stream_incomplete"
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

// sseAnswer reports whether resp is a server-sent event stream.
func sseAnswer(resp *fasthttp.Response) bool {
	return bytes.HasPrefix(resp.Header.ContentType(), []byte("text/event-stream"))
}
