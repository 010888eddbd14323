// Package sse reads an upstream's server-sent events: a byte stream split
// into its data lines however its reads cut it (Scanner), each event's
// type read once (Read), and what an event says that rotor acts on:
// whether it comes before any output (Bootstrap), whether it is final,
// its failure as the upstream sent it and its usage. What it reads is a
// view into the event's bytes, never a copy. It knows nothing of
// accounts or of the server; package proxy decides what a failure means.
package sse

import (
	"bytes"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/rotation/usage"
)

// An Event is one data payload of an upstream's SSE stream, with its type
// read once. Every reader of upstream events (the hold-back, the
// assemblers, the relay and the Chat Completions translation) takes it
// from here, and asks it what rotor acts on: whether it comes before any
// output (Bootstrap), the failure, the usage and the quota.
type Event struct {
	Data []byte
	Type string // a view into Data
}

// Read reads the type of one event's data. The event, and what is
// read from it, points into data and must not outlive it.
func Read(data []byte) Event {
	return Event{Data: data, Type: viewField(data, "type").Str}
}

// Bootstrap events come before any output; holding them back keeps the
// first byte from reaching the client until the stream shows it will
// produce output, so a stream that fails at once can still fail over.
var Bootstrap = map[string]bool{
	"response.created": true, "response.in_progress": true, "codex.rate_limits": true,
	// What Codex reads besides events (docs/codex.md): the answer's headers
	// (turn state, model) and timings, sent ahead of response.created.
	"codex.response.metadata": true, "response.metadata": true, "responsesapi.websocket_timing": true,
}

// Failure is how an event that ends the stream in failure (response.failed,
// error) says it failed, as the upstream sent it: its code and message,
// either possibly empty, and true; false for any other event. What a
// failure without a code means is package proxy's to say.
func (e Event) Failure() (string, string, bool) {
	var code, msg gjson.Result
	switch e.Type {
	case "response.failed":
		code, msg = viewField(e.Data, "response.error.code"), viewField(e.Data, "response.error.message")
	case "error":
		code, msg = viewField(e.Data, "error.code"), viewField(e.Data, "error.message")
		if code.Str == "" && msg.Str == "" {
			code, msg = viewField(e.Data, "code"), viewField(e.Data, "message")
		}
	default:
		return "", "", false
	}
	return code.Str, msg.Str, true
}

// Final reports whether e is a stream's final event with the response.
func (e Event) Final() bool {
	switch e.Type {
	case "response.completed", "response.done", "response.incomplete":
		return true
	}
	return false
}

// Tokens is the usage e reports: the response's, in a final or failed
// event, or a Chat Completions chunk's (which has no type; usage rides on
// one of them with stream_options.include_usage). Nil when it has none.
func (e Event) Tokens() *usage.Tokens {
	var t usage.Tokens
	if !e.ReadTokens(&t) {
		return nil
	}
	return &t
}

// ReadTokens is Tokens into t, which the caller holds (ReadUsage): false,
// and t left alone, when e reports none.
func (e Event) ReadTokens(t *usage.Tokens) bool {
	switch {
	case e.Final(), e.Type == "response.failed":
		return UsageAt(e.Data, "response.usage", t)
	case e.Type == "":
		return UsageAt(e.Data, "usage", t)
	}
	return false
}

// Field reads path in the event's data without copying what it finds;
// the result points into e.Data and must not outlive it.
func (e Event) Field(path string) gjson.Result { return viewField(e.Data, path) }

// viewField reads path in JSON data (an event's) as
// gjson.GetBytes does, without copying what it finds: it runs on every
// event of every stream, where GetBytes would copy every payload. The
// result points into data, so nothing of it may outlive data.
func viewField(data []byte, path string) gjson.Result {
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

// UsageOf reads a usage object in either API's names, in one pass; the
// Responses name wins over the Chat Completions one.
func UsageOf(u gjson.Result) *usage.Tokens {
	var t usage.Tokens
	if !ReadUsage(u, &t) {
		return nil
	}
	return &t
}

// ReadUsage is UsageOf into t, which the caller holds, so that reading an
// answer's usage allocates nothing; it reports whether u is a usage
// object, and leaves t alone when it is not.
func ReadUsage(u gjson.Result, t *usage.Tokens) bool {
	if !u.IsObject() {
		return false
	}
	*t = usage.Tokens{}
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
	return true
}

// UsageAt is ReadUsage of the member at path of JSON data, read in place
// (viewField): only numbers are taken out of it.
func UsageAt(data []byte, path string, t *usage.Tokens) bool {
	return ReadUsage(viewField(data, path), t)
}

// A Scanner splits a byte stream into SSE lines and hands each data
// payload, read as an Event, to OnEvent. A line split across reads is
// carried over; one longer than maxSSELine is skipped, so memory stays
// bounded by the longest event rotor reads, not by the length of the
// stream. The Event OnEvent gets points into the Scanner's buffer or the
// bytes fed, so it must not outlive the call.
type Scanner struct {
	line    []byte
	skip    bool
	OnEvent func(e Event)
}

const maxSSELine = 16 << 20

// Feed hands on every data line that b completes, and keeps what is left
// of b for the next read.
func (sc *Scanner) Feed(b []byte) {
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

func (sc *Scanner) handle(line []byte) {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	sc.OnEvent(Read(bytes.TrimPrefix(data, []byte{' '})))
}
