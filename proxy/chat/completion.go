package chat

import (
	"strconv"

	"github.com/tidwall/gjson"
)

// Completion assembles one chat.completion object from a Responses stream:
// the answer to a client that did not ask for a stream. It keeps the text,
// the reasoning summary and the function calls, not the stream.
type Completion struct {
	id, model string
	created   int64
	text      []byte
	reasoning []byte
	calls     [][3]string // call_id, name, arguments
	final     gjson.Result
	failure   string
}

// NewCompletion returns an assembler; id, created and model are as for
// NewStream.
func NewCompletion(id string, created int64, model string) *Completion {
	return &Completion{id: id, created: created, model: model}
}

// Event reads one Responses event: its type, read once by the caller,
// and its data.
func (c *Completion) Event(typ string, data []byte) {
	ev := string(data) // kept: the final event is read in Result
	switch typ {
	case "response.output_text.delta":
		c.text = append(c.text, gjson.Get(ev, "delta").Str...)
	case "response.reasoning_summary_text.delta":
		c.reasoning = append(c.reasoning, gjson.Get(ev, "delta").Str...)
	case "response.output_item.done":
		if it := gjson.Get(ev, "item"); it.Get("type").Str == "function_call" {
			c.calls = append(c.calls, [3]string{it.Get("call_id").Str, it.Get("name").Str, it.Get("arguments").Str})
		}
	case "response.completed", "response.incomplete":
		c.final = gjson.Get(ev, "response")
	case "response.failed":
		c.failure = gjson.Get(ev, "response.error.code").Str
		if c.failure == "" {
			c.failure = "response_failed"
		}
	}
}

// Result returns the chat.completion JSON, or failure != "" (the
// upstream's error code, or "stream_incomplete" when no final event came)
// so the proxy can fail over.
func (c *Completion) Result() (body []byte, failure string) {
	if c.failure != "" {
		return nil, c.failure
	}
	if !c.final.Exists() {
		return nil, "stream_incomplete"
	}
	b := append(make([]byte, 0, 256+len(c.text)+len(c.reasoning)), `{"id":`...)
	b = appendString(b, c.id)
	b = append(b, `,"object":"chat.completion","created":`...)
	b = strconv.AppendInt(b, c.created, 10)
	b = append(b, `,"model":`...)
	b = appendString(b, c.model)
	b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	if len(c.text) == 0 && len(c.calls) > 0 {
		b = append(b, "null"...)
	} else {
		b = appendString(b, string(c.text))
	}
	if len(c.reasoning) > 0 {
		b = append(b, `,"reasoning_content":`...)
		b = appendString(b, string(c.reasoning))
	}
	if len(c.calls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, call := range c.calls {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = appendString(b, call[0])
			b = append(b, `,"type":"function","function":{"name":`...)
			b = appendString(b, call[1])
			b = append(b, `,"arguments":`...)
			b = appendString(b, call[2])
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	b = append(b, `},"finish_reason":"`...)
	b = append(b, finishReason(c.final, len(c.calls) > 0)...)
	b = append(b, `"}],"usage":`...)
	b = appendUsage(b, c.final.Get("usage"))
	return append(b, '}'), ""
}
