package proxy

import (
	"bytes"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// An event is one data payload of an upstream's SSE stream, with its type
// read once. Every reader of upstream events (the hold-back, the
// assemblers, the relay and the Chat Completions translation) takes it
// from here, and asks it what rotor acts on: whether it comes before any
// output (bootstrapEvents), the failure code, the usage and the quota.
type event struct {
	data []byte
	typ  string // a view into data
}

// readEvent reads the type of one event's data. The event, and what is
// read from it, points into data and must not outlive it.
func readEvent(data []byte) event {
	return event{data: data, typ: viewField(data, "type").Str}
}

// bootstrapEvents come before any output; holding them back keeps the
// first byte from reaching the client until the stream shows it will
// produce output, so a stream that fails at once can still fail over.
var bootstrapEvents = map[string]bool{
	"response.created": true, "response.in_progress": true, "codex.rate_limits": true,
	// What Codex reads besides events (docs/codex.md): the answer's headers
	// (turn state, model) and timings, sent ahead of response.created.
	"codex.response.metadata": true, "response.metadata": true, "responsesapi.websocket_timing": true,
}

// streamFailure is how a stream said it failed: its code, never empty
// for a failure, and the upstream's message.
type streamFailure struct{ code, message string }

// failure is how an event that ends the stream in failure (response.failed,
// error) says it failed; its code is "" for any other event. A failure
// with no code still has one, so it is never mistaken for success.
func (e event) failure() streamFailure {
	var code, msg gjson.Result
	switch e.typ {
	case "response.failed":
		code, msg = viewField(e.data, "response.error.code"), viewField(e.data, "response.error.message")
	case "error":
		code, msg = viewField(e.data, "error.code"), viewField(e.data, "error.message")
		if code.Str == "" && msg.Str == "" {
			code, msg = viewField(e.data, "code"), viewField(e.data, "message")
		}
	default:
		return streamFailure{}
	}
	f := streamFailure{code.Str, msg.Str}
	switch {
	case f.code != "":
	case foreignContent("", f.message):
		f.code = codeForeignContent // the refusal of another account's blob, with code null
	case e.typ == "error":
		f.code = "stream_error"
	default:
		f.code = "response_failed"
	}
	return f
}

// final reports whether e is a stream's final event with the response.
func (e event) final() bool {
	switch e.typ {
	case "response.completed", "response.done", "response.incomplete":
		return true
	}
	return false
}

// tokens is the usage e reports: the response's, in a final or failed
// event, or a Chat Completions chunk's (which has no type; usage rides on
// one of them with stream_options.include_usage). Nil when it has none.
func (e event) tokens() *usage.Tokens {
	switch {
	case e.final(), e.typ == "response.failed":
		return usageOf(viewField(e.data, "response.usage"))
	case e.typ == "":
		return usageOf(viewField(e.data, "usage"))
	}
	return nil
}

// quota is the account's quota a codex.rate_limits event reports, nil
// for any other event. It reads clk only for that one: quota runs on
// every event of every stream.
func (e event) quota(clk clock.Clock) *rotation.Quota {
	if e.typ != "codex.rate_limits" {
		return nil
	}
	return quotaFromEvent(clk.Now(), e.data)
}

// viewField reads path in JSON data (an event's, a request body) as
// gjson.GetBytes does, without copying what it finds: it runs on every
// event of every stream, and on bodies of megabytes, where GetBytes would
// copy a whole history. The result points into data, so nothing of it may
// outlive data.
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

// sseScanner splits a byte stream into SSE lines and hands each data
// payload, read as an event, to onEvent. A line split across reads is
// carried over; one longer than maxSSELine is skipped, so memory stays
// bounded by the longest event rotor reads, not by the length of the
// stream.
type sseScanner struct {
	line    []byte
	skip    bool
	onEvent func(e event)
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
	sc.onEvent(readEvent(bytes.TrimPrefix(data, []byte{' '})))
}
