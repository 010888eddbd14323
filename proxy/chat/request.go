// Package chat translates between OpenAI's Chat Completions API and the
// Responses API that the ChatGPT Codex backend speaks (docs/clients.md): a Chat
// Completions request becomes one Responses request, and the Responses
// stream that answers it becomes chat.completion.chunk events, event by
// event, or one chat.completion object.
//
// It knows nothing of HTTP or accounts: the proxy reads the SSE stream and
// hands each event's data here, and builds every error payload itself.
package chat

import (
	"errors"
	"fmt"
	"iter"

	"github.com/tidwall/gjson"
)

// Request is what the proxy needs to know about a Chat Completions body.
type Request struct {
	Model        string
	Stream       bool // "stream": true
	IncludeUsage bool // "stream_options": {"include_usage": true}
	// PromptCacheKey is "prompt_cache_key", which keeps a conversation on
	// one account (docs/selection.md affinity).
	PromptCacheKey string
	// Unsupported names the first parameter a ChatGPT account cannot
	// serve ("n" > 1, "logprobs", "top_logprobs", "audio", "modalities"
	// other than text), "" when there is none.
	Unsupported string
}

// Dropped are the Chat Completions parameters that have no counterpart on
// the Codex backend, which manages sampling and output budgets itself;
// ToResponses leaves them out.
var Dropped = []string{
	"max_tokens", "max_completion_tokens", "temperature", "top_p",
	"frequency_penalty", "presence_penalty", "seed", "stop", "user",
	"metadata", "logit_bias", "service_tier", "store", "stream_options",
	"prediction", "verbosity", "web_search_options",
}

// Parse reads a Chat Completions body in one pass over its top level. Its
// error says what is wrong in words fit for the client.
func Parse(body []byte) (Request, error) {
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return Request{}, errors.New("request body is not a JSON object")
	}
	return ParseMembers(func(yield func(string, []byte) bool) {
		root.ForEach(func(k, v gjson.Result) bool { return yield(k.Str, []byte(v.Raw)) })
	})
}

// ParseMembers is Parse over the top-level members of a body that is a
// JSON object already found valid, given as each key (unescaped) and its
// value as sent, in order. Only the values it reads are parsed: the
// messages, a whole pasted file perhaps, are only checked to be an
// array, so a caller that found the members in its own scan of the body
// does not pay for a second walk of it, nor for a copy.
func ParseMembers(members iter.Seq2[string, []byte]) (Request, error) {
	var r Request
	hasMessages := false
	for key, raw := range members {
		v := func() gjson.Result { return gjson.ParseBytes(raw) }
		switch key {
		case "model":
			r.Model = v().String()
		case "prompt_cache_key":
			if v := v(); r.PromptCacheKey == "" && v.Type == gjson.String {
				r.PromptCacheKey = v.Str
			}
		case "messages":
			hasMessages = len(raw) > 0 && raw[0] == '['
		case "stream":
			r.Stream = v().Type == gjson.True
		case "stream_options":
			r.IncludeUsage = v().Get("include_usage").Type == gjson.True
		case "n":
			r.unsupported("n", v().Int() > 1)
		case "logprobs":
			r.unsupported("logprobs", v().Type == gjson.True)
		case "top_logprobs":
			r.unsupported("top_logprobs", v().Int() > 0)
		case "audio":
			r.unsupported("audio", v().Type != gjson.Null)
		case "modalities":
			for _, m := range v().Array() {
				r.unsupported("modalities", m.Str != "text")
			}
		}
	}
	if !hasMessages {
		return r, errors.New(`"messages" must be an array of messages`)
	}
	return r, nil
}

func (r *Request) unsupported(param string, yes bool) {
	if yes && r.Unsupported == "" {
		r.Unsupported = param
	}
}

// ToResponses builds the Codex-backend Responses request for a Chat
// Completions body: "model", "instructions" (the system and developer
// messages, joined by a blank line; always a string), "input" items,
// tools, tool_choice, parallel_tool_calls, text.format from
// response_format, reasoning from reasoning_effort (with "summary":"auto",
// so reasoning summaries come back as reasoning_content), and
// "stream":true, "store":false. Values the client sent are copied as they
// are, never re-encoded. Parameters in Dropped are left out.
func ToResponses(body []byte) ([]byte, error) {
	root := gjson.ParseBytes(body)
	out := make([]byte, 0, len(body)+256)
	out = append(out, `{"model":`...)
	out = appendRaw(out, root.Get("model"), `""`)

	instr, input, err := splitMessages(root.Get("messages"), len(body))
	if err != nil {
		return nil, err
	}
	out = append(out, `,"instructions":`...)
	out = appendString(out, string(instr))
	out = append(out, `,"input":[`...)
	out = append(out, input...)
	out = append(out, ']')

	if out, err = appendTools(out, root.Get("tools")); err != nil {
		return nil, err
	}
	out = appendToolChoice(out, root.Get("tool_choice"))
	for _, k := range [...]string{"parallel_tool_calls", "prompt_cache_key"} {
		if v := root.Get(k); v.Exists() && v.Type != gjson.Null {
			out = append(out, `,"`+k+`":`...)
			out = append(out, v.Raw...)
		}
	}
	if f := formatOf(root.Get("response_format")); f != nil {
		out = append(out, `,"text":{"format":`...)
		out = append(out, f...)
		out = append(out, '}')
	}
	if e := root.Get("reasoning_effort"); e.Type == gjson.String {
		out = append(out, `,"reasoning":{"effort":`...)
		out = append(out, e.Raw...)
		out = append(out, `,"summary":"auto"}`...)
	}
	return append(out, `,"stream":true,"store":false}`...), nil
}

// splitMessages splits Chat Completions messages into what the Responses
// API keeps apart: the instructions (the system and developer messages'
// text, joined by a blank line) and the input items (the rest, in order,
// without the brackets). size, the body's length, presizes input: the
// items are mostly the messages' own bytes.
func splitMessages(messages gjson.Result, size int) (instr, input []byte, err error) {
	input = make([]byte, 0, size)
	for i, m := range messages.Array() {
		switch role := m.Get("role").Str; role {
		case "system", "developer":
			if len(instr) > 0 {
				instr = append(instr, "\n\n"...)
			}
			instr = append(instr, textOf(m.Get("content"))...)
		case "user":
			input, err = appendMessage(input, "user", "input_text", m.Get("content"), i)
		case "assistant":
			input, err = appendAssistant(input, m, i)
		case "tool":
			input = appendToolOutput(input, m)
		default:
			err = fmt.Errorf("messages[%d]: role %q is not one of system, developer, user, assistant, tool", i, role)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	return instr, input, nil
}

// appendAssistant appends assistant message i: its text, unless it has
// none (a turn that only calls tools), then one function_call item per
// tool call, since Responses keeps calls apart from messages.
func appendAssistant(dst []byte, m gjson.Result, i int) ([]byte, error) {
	if c := m.Get("content"); c.Type != gjson.Null && c.Exists() && textOf(c) != "" {
		var err error
		if dst, err = appendMessage(dst, "assistant", "output_text", c, i); err != nil {
			return nil, err
		}
	}
	for _, tc := range m.Get("tool_calls").Array() {
		dst = appendSep(dst)
		dst = append(dst, `{"type":"function_call","call_id":`...)
		dst = appendRaw(dst, tc.Get("id"), `""`)
		dst = append(dst, `,"name":`...)
		dst = appendRaw(dst, tc.Get("function.name"), `""`)
		dst = append(dst, `,"arguments":`...)
		dst = appendRaw(dst, tc.Get("function.arguments"), `"{}"`)
		dst = append(dst, '}')
	}
	return dst, nil
}

// appendToolOutput appends a tool message as a function_call_output item.
// Its output is always a string: the Responses API takes no parts there.
func appendToolOutput(dst []byte, m gjson.Result) []byte {
	dst = appendSep(dst)
	dst = append(dst, `{"type":"function_call_output","call_id":`...)
	dst = appendRaw(dst, m.Get("tool_call_id"), `""`)
	dst = append(dst, `,"output":`...)
	dst = appendString(dst, textOf(m.Get("content")))
	return append(dst, '}')
}

// appendTools appends "tools", flattened from Chat Completions'
// {"type":"function","function":{...}} to Responses' {"type":"function",
// "name":...}, when the client sent any. Only function tools have a
// counterpart a ChatGPT account can serve; any other kind is an error for
// the client, not something to drop silently.
func appendTools(dst []byte, tools gjson.Result) ([]byte, error) {
	if !tools.IsArray() || len(tools.Array()) == 0 {
		return dst, nil
	}
	dst = append(dst, `,"tools":[`...)
	for i, t := range tools.Array() {
		if t.Get("type").Str != "function" {
			return nil, fmt.Errorf("tools[%d]: only function tools can be served by a ChatGPT account", i)
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		fn := t.Get("function")
		dst = append(dst, `{"type":"function","name":`...)
		dst = appendRaw(dst, fn.Get("name"), `""`)
		for _, k := range [...]string{"description", "parameters", "strict"} {
			if v := fn.Get(k); v.Exists() && v.Type != gjson.Null {
				dst = append(dst, `,"`+k+`":`...)
				dst = append(dst, v.Raw...)
			}
		}
		dst = append(dst, '}')
	}
	return append(dst, ']'), nil
}

// appendToolChoice appends "tool_choice" when the client set one. A named
// function is flattened the way appendTools flattens tools; anything else
// ("auto", "none", "required") means the same in both APIs and is copied.
func appendToolChoice(dst []byte, tc gjson.Result) []byte {
	if !tc.Exists() || tc.Type == gjson.Null {
		return dst
	}
	dst = append(dst, `,"tool_choice":`...)
	if name := tc.Get("function.name"); tc.IsObject() && name.Exists() {
		dst = append(dst, `{"type":"function","name":`...)
		dst = append(dst, name.Raw...)
		return append(dst, '}')
	}
	return append(dst, tc.Raw...)
}

// appendMessage appends a message item of role whose text parts have
// textType (input_text for the user, output_text for the assistant).
func appendMessage(dst []byte, role, textType string, content gjson.Result, i int) ([]byte, error) {
	dst = appendSep(dst)
	dst = append(dst, `{"type":"message","role":"`+role+`","content":[`...)
	if !content.IsArray() {
		dst = append(dst, `{"type":"`+textType+`","text":`...)
		dst = appendRaw(dst, content, `""`)
		return append(dst, "}]}"...), nil
	}
	n := 0
	for j, p := range content.Array() {
		switch t := p.Get("type").Str; t {
		case "text", "input_text", "output_text":
			dst = appendComma(dst, n)
			dst = append(dst, `{"type":"`+textType+`","text":`...)
			dst = appendRaw(dst, p.Get("text"), `""`)
			dst = append(dst, '}')
		case "image_url":
			url := p.Get("image_url.url")
			if !url.Exists() {
				url = p.Get("image_url")
			}
			if url.Type != gjson.String {
				return nil, fmt.Errorf("messages[%d].content[%d]: image_url needs a url", i, j)
			}
			dst = appendComma(dst, n)
			dst = append(dst, `{"type":"input_image","image_url":`...)
			dst = append(dst, url.Raw...)
			if d := p.Get("image_url.detail"); d.Type == gjson.String {
				dst = append(dst, `,"detail":`...)
				dst = append(dst, d.Raw...)
			}
			dst = append(dst, '}')
		case "refusal":
			continue
		default:
			return nil, fmt.Errorf("messages[%d].content[%d]: content part %q cannot be served by a ChatGPT account", i, j, t)
		}
		n++
	}
	return append(dst, "]}"...), nil
}

// formatOf is the Responses text.format for a response_format, nil when
// there is none to set.
func formatOf(rf gjson.Result) []byte {
	switch rf.Get("type").Str {
	case "json_object":
		return []byte(`{"type":"json_object"}`)
	case "json_schema":
		js := rf.Get("json_schema")
		f := []byte(`{"type":"json_schema"`)
		for _, k := range [...]string{"name", "description", "schema", "strict"} {
			if v := js.Get(k); v.Exists() && v.Type != gjson.Null {
				f = append(f, `,"`+k+`":`...)
				f = append(f, v.Raw...)
			}
		}
		return append(f, '}')
	}
	return nil
}

// textOf is the text of a message's content: a string, or the text parts
// of an array joined.
func textOf(c gjson.Result) string {
	if !c.IsArray() {
		return c.String()
	}
	var s string
	for _, p := range c.Array() {
		if t := p.Get("text"); t.Exists() {
			s += t.String()
		}
	}
	return s
}

func appendRaw(dst []byte, v gjson.Result, missing string) []byte {
	if !v.Exists() || v.Type == gjson.Null {
		return append(dst, missing...)
	}
	if v.Type != gjson.String && missing[0] == '"' {
		return appendString(dst, v.String()) // a number or bool where text belongs
	}
	return append(dst, v.Raw...)
}

func appendSep(dst []byte) []byte {
	if len(dst) > 0 {
		dst = append(dst, ',')
	}
	return dst
}

func appendComma(dst []byte, n int) []byte {
	if n > 0 {
		dst = append(dst, ',')
	}
	return dst
}

// appendString appends s as a JSON string. Only what JSON requires is
// escaped: text the client sent stays readable.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
