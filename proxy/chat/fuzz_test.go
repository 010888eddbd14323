package chat

import (
	"bytes"
	"encoding/json"
	"testing"
)

// fuzzTypes are the Responses event types the translation acts on, and
// one it ignores; a fuzzed event's first byte picks its type.
var fuzzTypes = []string{
	"response.output_text.delta", "response.reasoning_summary_text.delta",
	"response.output_item.added", "response.function_call_arguments.delta",
	"response.output_item.done", "response.completed", "response.incomplete",
	"response.failed", "error", "response.created",
}

// fuzzEvents reads a fuzzed stream: one event a line, its first byte
// picking its type and the rest its data.
func fuzzEvents(stream []byte) (types []string, data [][]byte) {
	for line := range bytes.SplitSeq(stream, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		types = append(types, fuzzTypes[int(line[0])%len(fuzzTypes)])
		data = append(data, line[1:])
	}
	return types, data
}

// FuzzStream: whatever events an upstream sends (well-formed or not, in
// any order), a chat client gets SSE events each holding one JSON object,
// or the [DONE] that ends the stream, and nothing after it.
func FuzzStream(f *testing.F) {
	f.Add([]byte("\x00{\"delta\":\"Hi\"}\n\x02{\"item\":{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"call_1\",\"name\":\"f\"}}\n" +
		"\x03{\"item_id\":\"fc_1\",\"delta\":\"{}\"}\n\x05{\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":3}}}"))
	f.Add([]byte("\x02{\"item\":{\"type\":\"function_call\",\"id\":\"fc_1\"}}\n\x04{\"item\":{\"id\":\"fc_1\",\"arguments\":7}}\n\x07{}"))
	f.Add([]byte("\x00{\"delta\":5}\n\x01{\"delta\":null}\n\x08{\"code\":\"x\"}"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		s := NewStream("chatcmpl-1", 1, "gpt-x", true, func(code, message string) []byte {
			b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": message}})
			return b
		})
		types, data := fuzzEvents(stream)
		var out []byte
		for i := range types {
			out = s.Event(out, types[i], data[i])
		}
		if !s.Done() {
			out = s.Fail(out, "", "")
		}
		events := bytes.Split(out, []byte("\n\n"))
		if len(events) < 2 || len(events[len(events)-1]) != 0 || string(events[len(events)-2]) != "data: [DONE]" {
			t.Fatalf("the stream does not end with [DONE]: %q", out)
		}
		for _, ev := range events[:len(events)-2] {
			payload, ok := bytes.CutPrefix(ev, []byte("data: "))
			if !ok || !json.Valid(payload) || payload[0] != '{' {
				t.Fatalf("event %q is not one JSON object (from %q)", ev, stream)
			}
		}
	})
}

// FuzzCompletion: an assembled answer, when there is one, is one JSON
// object, whatever the events were.
func FuzzCompletion(f *testing.F) {
	f.Add([]byte("\x00{\"delta\":\"Hi\"}\n\x04{\"item\":{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"{}\"}}\n\x05{\"response\":{\"usage\":{}}}"))
	f.Add([]byte("\x05{\"response\":5}"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		c := NewCompletion("chatcmpl-1", 1, "gpt-x")
		types, data := fuzzEvents(stream)
		for i := range types {
			c.Event(types[i], data[i])
		}
		if body, failure := c.Result(); failure == "" && (!json.Valid(body) || body[0] != '{') {
			t.Fatalf("answer %q is not one JSON object (from %q)", body, stream)
		}
	})
}

// FuzzToResponses: a chat request rotor takes becomes a Responses body
// that is one JSON object, whatever valid JSON the client sent (the proxy
// refuses invalid JSON before it gets here).
func FuzzToResponses(f *testing.F) {
	f.Add([]byte(`{"model":"gpt-x","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"tool_choice":"auto","max_tokens":5}`))
	f.Add([]byte(`{"model":"gpt-x","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"ok"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{}}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) {
			return
		}
		if _, err := Parse(body); err != nil {
			return
		}
		out, err := ToResponses(body)
		if err == nil && (!json.Valid(out) || out[0] != '{') {
			t.Fatalf("Responses body %q is not one JSON object (from %q)", out, body)
		}
	})
}
