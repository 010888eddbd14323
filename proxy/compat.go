package proxy

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"io"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// DroppedForChatGPT are the request parameters the ChatGPT Codex backend
// rejects ("Unsupported parameter: …"); rotor drops them when a generic
// client's request goes to a ChatGPT account (SPEC §5). The backend manages
// output budgets and sampling itself.
var DroppedForChatGPT = []string{
	"max_output_tokens", "max_completion_tokens", "max_tokens",
	"temperature", "top_p", "frequency_penalty", "presence_penalty",
}

// chatgptBody adapts a Responses request body for the Codex backend, which
// only streams and does not store: it forces "stream":true and
// "store":false, supplies "instructions":"" when missing and drops the
// parameters the backend rejects. assemble reports that the client did not
// ask for a stream, so the proxy must answer with one Response object. A
// body that needs nothing (Codex CLI's) is returned as is, byte for byte.
func chatgptBody(body []byte) (out []byte, assemble bool, err error) {
	stream := gjson.GetBytes(body, "stream")
	assemble = stream.Type != gjson.True
	// "instructions":null is as missing: the backend wants a string.
	instr := gjson.GetBytes(body, "instructions")
	needs := assemble || gjson.GetBytes(body, "store").Type != gjson.False ||
		!instr.Exists() || instr.Type == gjson.Null
	for _, k := range DroppedForChatGPT {
		needs = needs || gjson.GetBytes(body, k).Exists()
	}
	if !needs {
		return body, false, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, false, err
	}
	for _, k := range DroppedForChatGPT {
		delete(m, k)
	}
	m["stream"] = json.RawMessage("true")
	m["store"] = json.RawMessage("false")
	if v, ok := m["instructions"]; !ok || bytes.Equal(v, []byte("null")) {
		m["instructions"] = json.RawMessage(`""`)
	}
	out, err = json.Marshal(m)
	return out, assemble, err
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
	buf := make([]byte, 0, 4096)
	var sc sseScanner
	done := false
	sc.onData = func(data []byte) {
		if done {
			return
		}
		t := gjson.GetBytes(data, "type").Str
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

// failedStreamOutcome classifies a stream that failed before any output.
func failedStreamOutcome(code string) outcome {
	if containsAny(code, "usage_limit", "rate_limit", "insufficient_quota") {
		return outUsageLimit
	}
	return outServerError // server_is_overloaded, slow_down and the like
}

// assembleResponse reads a whole Codex stream and returns the Response
// object a non-streaming client expects: the final response.completed
// event's response, with its output filled from the output_item.done
// events when the backend left it empty. Only the final event and the
// finished items are kept, not the stream.
func assembleResponse(stream io.Reader) (body []byte, failure string, err error) {
	var final []byte
	var items []json.RawMessage
	var sc sseScanner
	sc.onData = func(data []byte) {
		switch gjson.GetBytes(data, "type").Str {
		case "response.output_item.done":
			if it := gjson.GetBytes(data, "item"); it.Exists() {
				items = append(items, json.RawMessage(it.Raw))
			}
		case "response.completed", "response.incomplete":
			final = []byte(gjson.GetBytes(data, "response").Raw)
		case "response.failed":
			failure = cmp.Or(gjson.GetBytes(data, "response.error.code").String(), "response_failed")
		}
	}
	buf := make([]byte, 32<<10)
	for {
		n, rerr := stream.Read(buf)
		sc.feed(buf[:n])
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, failure, rerr
		}
	}
	if final == nil {
		return nil, cmp.Or(failure, "stream_incomplete"), nil
	}
	if out := gjson.GetBytes(final, "output"); len(items) > 0 && (!out.Exists() || len(out.Array()) == 0) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(final, &m); err != nil {
			return nil, "", err
		}
		m["output"], _ = json.Marshal(items)
		final, _ = json.Marshal(m)
	}
	return final, "", nil
}

// sseAnswer reports whether resp is a server-sent event stream.
func sseAnswer(resp *fasthttp.Response) bool {
	return bytes.HasPrefix(resp.Header.ContentType(), []byte("text/event-stream"))
}
