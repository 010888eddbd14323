package chat

import (
	"strconv"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// Stream translates a Responses SSE stream into chat.completion.chunk SSE
// events, one event at a time: each Event call appends what that event
// means for a chat client and keeps only the little state the next events
// need (which tool call is which). Every chunk carries the same id,
// created time and model.
type Stream struct {
	head         []byte // data: {"id":…,"object":…,"created":…,"model":…,"choices":
	includeUsage bool
	fail         func(code, message string) []byte
	roleSent     bool
	calls        []toolCall
	done         bool
}

// toolCall is a function call of the response, by its position among the
// response's function calls (the chat tool_calls index).
type toolCall struct {
	itemID  string
	argSent bool // an arguments delta was passed on
}

// NewStream returns a translator for one answer: id is the chatcmpl- id
// every chunk carries, created its unix time, model the model the client
// asked for. fail builds the error object ({"error":{…}}) written when the
// stream fails after output; the chat package never makes one itself.
func NewStream(id string, created int64, model string, includeUsage bool, fail func(code, message string) []byte) *Stream {
	h := append(make([]byte, 0, 128+len(id)+len(model)), `data: {"id":`...)
	h = appendString(h, id)
	h = append(h, `,"object":"chat.completion.chunk","created":`...)
	h = strconv.AppendInt(h, created, 10)
	h = append(h, `,"model":`...)
	h = appendString(h, model)
	h = append(h, `,"choices":`...)
	return &Stream{head: h, includeUsage: includeUsage, fail: fail}
}

// Done reports whether the stream reached its end, a final event or Fail:
// nothing more is to be written after it.
func (s *Stream) Done() bool { return s.done }

// str views b as a string without copying: gjson's results then point
// into the event, which outlives every use made of them here.
func str(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// Event appends to dst the chunks that the Responses event of type typ
// (read once by the caller) and data (the JSON after "data: ") means for
// a chat client, and returns dst. Events with nothing to say for a chat
// client append nothing.
func (s *Stream) Event(dst []byte, typ string, data []byte) []byte {
	if s.done {
		return dst
	}
	ev := str(data)
	switch typ {
	case "response.output_text.delta":
		return s.delta(dst, `"content":`, gjson.Get(ev, "delta"))
	case "response.reasoning_summary_text.delta":
		return s.delta(dst, `"reasoning_content":`, gjson.Get(ev, "delta"))
	case "response.output_item.added":
		item := gjson.Get(ev, "item")
		if item.Get("type").Str != "function_call" {
			return dst
		}
		s.calls = append(s.calls, toolCall{itemID: strings.Clone(item.Get("id").Str)})
		dst = s.toolDelta(dst, len(s.calls)-1)
		dst = append(dst, `"id":`...)
		dst = appendString(dst, item.Get("call_id").String())
		dst = append(dst, `,"type":"function","function":{"name":`...)
		dst = appendString(dst, item.Get("name").String())
		return append(dst, `,"arguments":""}}]},"finish_reason":null}]}`+"\n\n"...)
	case "response.function_call_arguments.delta":
		i := s.call(gjson.Get(ev, "item_id").Str)
		if i < 0 {
			return dst
		}
		s.calls[i].argSent = true
		return s.arguments(dst, i, gjson.Get(ev, "delta"))
	case "response.output_item.done":
		// A call whose arguments came whole, without deltas, still
		// reaches the client.
		item := gjson.Get(ev, "item")
		if i := s.call(item.Get("id").Str); i >= 0 && !s.calls[i].argSent {
			s.calls[i].argSent = true
			return s.arguments(dst, i, item.Get("arguments"))
		}
		return dst
	case "response.completed", "response.incomplete":
		return s.finish(dst, gjson.Get(ev, "response"))
	case "response.failed":
		return s.Fail(dst, gjson.Get(ev, "response.error.code").Str, gjson.Get(ev, "response.error.message").Str)
	case "error":
		code := gjson.Get(ev, "error.code").Str
		if code == "" {
			code = gjson.Get(ev, "code").Str
		}
		msg := gjson.Get(ev, "error.message").Str
		if msg == "" {
			msg = gjson.Get(ev, "message").Str
		}
		return s.Fail(dst, code, msg)
	}
	return dst
}

// Fail appends the error event of a stream that broke after output, and
// the end of the stream, unless it already ended.
func (s *Stream) Fail(dst []byte, code, message string) []byte {
	if s.done {
		return dst
	}
	s.done = true
	if code == "" {
		code = "response_failed"
	}
	if message == "" {
		message = "the upstream failed before the answer was complete"
	}
	dst = append(dst, "data: "...)
	dst = append(dst, s.fail(code, message)...)
	return append(dst, "\n\ndata: [DONE]\n\n"...)
}

// role appends, before the first chunk with content, the chunk that opens
// the assistant's message, as OpenAI's own streams do.
func (s *Stream) role(dst []byte) []byte {
	if s.roleSent {
		return dst
	}
	s.roleSent = true
	dst = append(dst, s.head...)
	return append(dst, `[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`+"\n\n"...)
}

// delta appends a chunk whose delta is key followed by the text v. Only
// text is passed on, written afresh: an upstream's event that is not
// what it should be never makes a chunk the client cannot parse.
func (s *Stream) delta(dst []byte, key string, v gjson.Result) []byte {
	if v.Type != gjson.String {
		return dst
	}
	dst = s.role(dst)
	dst = append(dst, s.head...)
	dst = append(dst, `[{"index":0,"delta":{`...)
	dst = append(dst, key...)
	dst = appendString(dst, v.Str)
	return append(dst, `},"finish_reason":null}]}`+"\n\n"...)
}

// toolDelta opens a chunk for tool call i, up to the call's own fields.
func (s *Stream) toolDelta(dst []byte, i int) []byte {
	dst = s.role(dst)
	dst = append(dst, s.head...)
	dst = append(dst, `[{"index":0,"delta":{"tool_calls":[{"index":`...)
	dst = strconv.AppendInt(dst, int64(i), 10)
	return append(dst, ',')
}

// arguments appends a chunk with a piece of tool call i's arguments, as
// delta does its text.
func (s *Stream) arguments(dst []byte, i int, v gjson.Result) []byte {
	if v.Type != gjson.String || v.Str == "" {
		return dst
	}
	dst = s.toolDelta(dst, i)
	dst = append(dst, `"function":{"arguments":`...)
	dst = appendString(dst, v.Str)
	return append(dst, `}}]},"finish_reason":null}]}`+"\n\n"...)
}

// call is the index of the function call with item id, -1 if none.
func (s *Stream) call(itemID string) int {
	for i := range s.calls {
		if s.calls[i].itemID == itemID {
			return i
		}
	}
	return -1
}

// finish appends the last chunk (finish_reason), the usage chunk when
// asked for, and the end of the stream.
func (s *Stream) finish(dst []byte, resp gjson.Result) []byte {
	s.done = true
	dst = s.role(dst)
	dst = append(dst, s.head...)
	dst = append(dst, `[{"index":0,"delta":{},"finish_reason":"`...)
	dst = append(dst, finishReason(resp, len(s.calls) > 0)...)
	dst = append(dst, `"}]}`+"\n\n"...)
	if s.includeUsage {
		dst = append(dst, s.head...)
		dst = append(dst, `[],"usage":`...)
		dst = appendUsage(dst, resp.Get("usage"))
		dst = append(dst, "}\n\n"...)
	}
	return append(dst, "data: [DONE]\n\n"...)
}

// finishReason maps a final Response to a chat finish_reason.
func finishReason(resp gjson.Result, calls bool) string {
	if resp.Get("status").Str == "incomplete" {
		if resp.Get("incomplete_details.reason").Str == "content_filter" {
			return "content_filter"
		}
		return "length" // max_output_tokens
	}
	if calls {
		return "tool_calls"
	}
	return "stop"
}

// appendUsage appends a Responses usage object in Chat Completions' names.
func appendUsage(dst []byte, u gjson.Result) []byte {
	n := func(path string) int64 { return u.Get(path).Int() }
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, n("input_tokens"), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, n("output_tokens"), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, n("total_tokens"), 10)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, n("input_tokens_details.cached_tokens"), 10)
	dst = append(dst, `},"completion_tokens_details":{"reasoning_tokens":`...)
	dst = strconv.AppendInt(dst, n("output_tokens_details.reasoning_tokens"), 10)
	return append(dst, "}}"...)
}
