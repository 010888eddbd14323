package chat

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// events reads a recorded Codex-backend stream into its data payloads.
// typeOf is an event's type, which the proxy reads once for every reader
// of the event.
func typeOf(data []byte) string { return gjson.GetBytes(data, "type").Str }

func events(t testing.TB, fixture string) [][]byte {
	t.Helper()
	raw, err := os.ReadFile("../../testdata/sse/" + fixture)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, []byte(d))
		}
	}
	return out
}

// chunkHead stands for the part every chunk of the golden streams shares.
const chunkHead = `{"id":"chatcmpl-x","object":"chat.completion.chunk","created":1767225600,"model":"gpt-5",`

// testFail stands in for the proxy's error payload builder.
func testFail(code, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	return b
}

// The exact chunks a chat client gets for each recorded stream, and the
// chat.completion a non-streaming client gets. "{…" is chunkHead.
var goldens = []struct {
	fixture    string
	chunks     []string
	completion string
	failure    string
}{
	{"hello.sse", []string{
		`{…"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"content":" from"},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"content":" the"},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"content":" fake"},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"content":" upstream"},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"content":"."},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`{…"choices":[],"usage":{"prompt_tokens":1280,"completion_tokens":9,"total_tokens":1289,"prompt_tokens_details":{"cached_tokens":1024},"completion_tokens_details":{"reasoning_tokens":0}}}`,
		`[DONE]`,
	}, `{"id":"chatcmpl-x","object":"chat.completion","created":1767225600,"model":"gpt-5","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the fake upstream."},"finish_reason":"stop"}],"usage":{"prompt_tokens":1280,"completion_tokens":9,"total_tokens":1289,"prompt_tokens_details":{"cached_tokens":1024},"completion_tokens_details":{"reasoning_tokens":0}}}`, ""},
	{"tool_call.sse", []string{
		`{…"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_123","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\""}}]},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"city"}}]},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\":\""}}]},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"Paris"}}]},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"}"}}]},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`{…"choices":[],"usage":{"prompt_tokens":96,"completion_tokens":18,"total_tokens":114,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`,
		`[DONE]`,
	}, `{"id":"chatcmpl-x","object":"chat.completion","created":1767225600,"model":"gpt-5","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_123","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":96,"completion_tokens":18,"total_tokens":114,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`, ""},
	{"parallel_tool_calls.sse", []string{
		`{…"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\""}}]},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"city"}}]},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\":\""}}]},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"Paris"}}]},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"}"}}]},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"get_time","arguments":""}}]},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"city\""}}]},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":":\"Paris\"}"}}]},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`{…"choices":[],"usage":{"prompt_tokens":142,"completion_tokens":36,"total_tokens":178,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`,
		`[DONE]`,
	}, `{"id":"chatcmpl-x","object":"chat.completion","created":1767225600,"model":"gpt-5","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},{"id":"call_b","type":"function","function":{"name":"get_time","arguments":"{\"city\":\"Paris\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":142,"completion_tokens":36,"total_tokens":178,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`, ""},
	{"reasoning_summary.sse", []string{
		`{…"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"reasoning_content":"**Greeting the user**\n\n"},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"reasoning_content":"The user said hi;"},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"reasoning_content":" a short greeting fits."},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"content":" from"},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"content":" the"},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"content":" fake"},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"content":" upstream"},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"content":"."},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`{…"choices":[],"usage":{"prompt_tokens":1280,"completion_tokens":73,"total_tokens":1353,"prompt_tokens_details":{"cached_tokens":1024},"completion_tokens_details":{"reasoning_tokens":64}}}`,
		`[DONE]`,
	}, `{"id":"chatcmpl-x","object":"chat.completion","created":1767225600,"model":"gpt-5","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the fake upstream.","reasoning_content":"**Greeting the user**\n\nThe user said hi; a short greeting fits."},"finish_reason":"stop"}],"usage":{"prompt_tokens":1280,"completion_tokens":73,"total_tokens":1353,"prompt_tokens_details":{"cached_tokens":1024},"completion_tokens_details":{"reasoning_tokens":64}}}`, ""},
	{"incomplete_max_tokens.sse", []string{
		`{…"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"content":" from"},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"content":" the"},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`,
		`{…"choices":[],"usage":{"prompt_tokens":1280,"completion_tokens":3,"total_tokens":1283,"prompt_tokens_details":{"cached_tokens":1024},"completion_tokens_details":{"reasoning_tokens":0}}}`,
		`[DONE]`,
	}, `{"id":"chatcmpl-x","object":"chat.completion","created":1767225600,"model":"gpt-5","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the"},"finish_reason":"length"}],"usage":{"prompt_tokens":1280,"completion_tokens":3,"total_tokens":1283,"prompt_tokens_details":{"cached_tokens":1024},"completion_tokens_details":{"reasoning_tokens":0}}}`, ""},
	{"failed_after_output.sse", []string{
		`{…"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}`,
		`{…"choices":[{"index":0,"delta":{"content":" from"},"finish_reason":null}]}`,
		`{"error":{"code":"server_error"}}`,
		`[DONE]`,
	}, ``, "server_error"},
}

func TestStreamGoldens(t *testing.T) {
	t.Parallel()
	for _, g := range goldens {
		t.Run(g.fixture, func(t *testing.T) {
			st := NewStream("chatcmpl-x", 1767225600, "gpt-5", true, testFail)
			var out []byte
			for _, ev := range events(t, g.fixture) {
				out = st.Event(out, typeOf(ev), ev)
			}
			if !st.Done() {
				t.Error("the stream did not end")
			}
			var want strings.Builder
			for _, c := range g.chunks {
				want.WriteString("data: " + strings.Replace(c, "{…", chunkHead, 1) + "\n\n")
			}
			if g.failure != "" {
				// The error chunk is whatever fail built, in full.
				w := strings.Replace(want.String(), `{"error":{"code":"server_error"}}`, string(testFail("server_error",
					"An error occurred while processing your request. You can retry your request, or contact us through our help center at help.openai.com if the error persists.")), 1)
				want.Reset()
				want.WriteString(w)
			}
			if string(out) != want.String() {
				t.Errorf("got\n%s\nwant\n%s", out, want.String())
			}
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n\n") {
				if d := strings.TrimPrefix(line, "data: "); d != "[DONE]" && !json.Valid([]byte(d)) {
					t.Errorf("chunk is not JSON: %s", d)
				}
			}
		})
	}
}

func TestStreamWithoutUsage(t *testing.T) {
	t.Parallel()
	st := NewStream("chatcmpl-x", 1767225600, "gpt-5", false, testFail)
	var out []byte
	for _, ev := range events(t, "hello.sse") {
		out = st.Event(out, typeOf(ev), ev)
	}
	if bytes.Contains(out, []byte(`"usage"`)) || !bytes.HasSuffix(out, []byte(`"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")) {
		t.Errorf("stream without include_usage:\n%s", out)
	}
}

func TestStreamFailAndNothingAfterTheEnd(t *testing.T) {
	t.Parallel()
	st := NewStream("chatcmpl-x", 1, "m", false, testFail)
	out := st.Event(nil, "response.output_text.delta", events(t, "hello.sse")[4]) // the first text delta
	out = st.Fail(out, "stream_interrupted", "cut")
	if !bytes.HasSuffix(out, []byte("data: "+string(testFail("stream_interrupted", "cut"))+"\n\ndata: [DONE]\n\n")) || !st.Done() {
		t.Errorf("after Fail:\n%s", out)
	}
	if more := st.Fail(st.Event(nil, typeOf(events(t, "hello.sse")[5]), events(t, "hello.sse")[5]), "x", "y"); len(more) != 0 {
		t.Errorf("written after the end: %s", more)
	}
}

func TestStreamArgumentsWithoutDeltas(t *testing.T) {
	t.Parallel()
	// A call whose arguments arrive only whole still reaches the client.
	st := NewStream("c", 1, "m", false, testFail)
	var out []byte
	for _, ev := range events(t, "tool_call.sse") {
		if !bytes.Contains(ev, []byte(`"response.function_call_arguments.delta"`)) {
			out = st.Event(out, typeOf(ev), ev)
		}
	}
	if !bytes.Contains(out, []byte(`"function":{"arguments":"{\"city\":\"Paris\"}"}`)) {
		t.Errorf("arguments lost:\n%s", out)
	}
}

func TestCompletionGoldens(t *testing.T) {
	t.Parallel()
	for _, g := range goldens {
		c := NewCompletion("chatcmpl-x", 1767225600, "gpt-5")
		for _, ev := range events(t, g.fixture) {
			c.Event(typeOf(ev), ev)
		}
		body, failure := c.Result()
		if string(body) != g.completion || failure != g.failure {
			t.Errorf("%s: got %s %q\nwant %s %q", g.fixture, body, failure, g.completion, g.failure)
		}
	}
	c := NewCompletion("c", 1, "m")
	for _, ev := range events(t, "hello.sse")[:6] {
		c.Event(typeOf(ev), ev)
	}
	if body, failure := c.Result(); body != nil || failure != "stream_incomplete" {
		t.Errorf("cut stream: %s %q", body, failure)
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]Request{
		`{"model":"m","messages":[]}`: {Model: "m"},
		`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}`:          {Model: "m", Stream: true, IncludeUsage: true},
		`{"n":1,"logprobs":false,"top_logprobs":0,"audio":null,"modalities":["text"],"messages":[]}`: {},
		`{"n":2,"messages":[]}`:                                                  {Unsupported: "n"},
		`{"logprobs":true,"messages":[]}`:                                        {Unsupported: "logprobs"},
		`{"top_logprobs":3,"messages":[]}`:                                       {Unsupported: "top_logprobs"},
		`{"audio":{"voice":"alloy"},"messages":[]}`:                              {Unsupported: "audio"},
		`{"modalities":["text","audio"],"messages":[]}`:                          {Unsupported: "modalities"},
		`{"prompt_cache_key":"conv-1","messages":[],"prompt_cache_key":"later"}`: {PromptCacheKey: "conv-1"},
	} {
		got, err := Parse([]byte(body))
		if err != nil || got != want {
			t.Errorf("Parse(%s) = %+v, %v; want %+v", body, got, err, want)
		}
	}
	for _, bad := range []string{`[]`, `{"model":"m"}`, `{"messages":{}}`} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%s) accepted", bad)
		}
	}
}

func TestToResponses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, in, want string }{
		{"plain", `{"model":"gpt-5","messages":[{"role":"user","content":"hi <b>&"}],"temperature":0.2,"max_tokens":9,"stop":["x"],"seed":1,"user":"u","metadata":{"a":"b"}}`,
			`{"model":"gpt-5","instructions":"","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi <b>&"}]}],"stream":true,"store":false}`},
		{"system and developer joined", `{"model":"m","messages":[{"role":"system","content":"A"},{"role":"developer","content":[{"type":"text","text":"B"}]},{"role":"user","content":"q"}]}`,
			`{"model":"m","instructions":"A\n\nB","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"q"}]}],"stream":true,"store":false}`},
		{"images", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"type":"image_url","image_url":"https://x/y.png"}]}]}`,
			`{"model":"m","instructions":"","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"what?"},{"type":"input_image","image_url":"data:image/png;base64,AAAA"},{"type":"input_image","image_url":"https://x/y.png"}]}],"stream":true,"store":false}`},
		{"tool round trip", `{"model":"m","messages":[{"role":"user","content":"w?"},{"role":"assistant","content":"Let me look.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"call_2","type":"function","function":{"name":"g","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"call_1","content":"r1"},{"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"r2"}]}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"},"strict":true}}],"tool_choice":"required","parallel_tool_calls":false}`,
			`{"model":"m","instructions":"","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"w?"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Let me look."}]},{"type":"function_call","call_id":"call_1","name":"f","arguments":"{}"},{"type":"function_call","call_id":"call_2","name":"g","arguments":"{\"a\":1}"},{"type":"function_call_output","call_id":"call_1","output":"r1"},{"type":"function_call_output","call_id":"call_2","output":"r2"}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"},"strict":true}],"tool_choice":"required","parallel_tool_calls":false,"stream":true,"store":false}`},
		{"json schema and effort", `{"model":"m","messages":[],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"object"},"strict":true}},"reasoning_effort":"low"}`,
			`{"model":"m","instructions":"","input":[],"text":{"format":{"type":"json_schema","name":"s","schema":{"type":"object"},"strict":true}},"reasoning":{"effort":"low","summary":"auto"},"stream":true,"store":false}`},
		{"text format is the default", `{"model":"m","messages":[],"response_format":{"type":"text"}}`,
			`{"model":"m","instructions":"","input":[],"stream":true,"store":false}`},
	} {
		got, err := ToResponses([]byte(c.in))
		if err != nil || string(got) != c.want {
			t.Errorf("%s:\n got %s (%v)\nwant %s", c.name, got, err, c.want)
		}
		if !json.Valid(got) {
			t.Errorf("%s: not JSON", c.name)
		}
	}
	for _, bad := range []string{
		`{"model":"m","messages":[{"role":"wizard","content":"x"}]}`,
		`{"model":"m","messages":[],"tools":[{"type":"web_search"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]}`,
	} {
		if _, err := ToResponses([]byte(bad)); err == nil {
			t.Errorf("ToResponses(%s) accepted", bad)
		}
	}
}

// BenchmarkStreamTextDelta is the per-event cost of translating a text
// delta, the event a long answer is made of (target: under 5 µs, no
// allocation once dst has grown).
func BenchmarkStreamTextDelta(b *testing.B) {
	ev := events(b, "hello.sse")[4]
	st := NewStream("chatcmpl-x", 1767225600, "gpt-5", true, testFail)
	dst := st.Event(nil, typeOf(ev), ev)
	b.ReportAllocs()
	for b.Loop() {
		dst = st.Event(dst[:0], typeOf(ev), ev)
	}
}

// BenchmarkStreamFixture translates a whole recorded answer and reports
// the cost per event.
func BenchmarkStreamFixture(b *testing.B) {
	evs := events(b, "reasoning_summary.sse")
	var dst []byte
	b.ReportAllocs()
	for b.Loop() {
		st := NewStream("chatcmpl-x", 1767225600, "gpt-5", true, testFail)
		for _, ev := range evs {
			dst = st.Event(dst[:0], typeOf(ev), ev)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
}
