package main

// End-to-end tests of Chat Completions (SPEC §7) with real clients: the
// openai SDK's chat.completions, the AI SDK's openai.chat() and LangChain's
// default ChatOpenAI (testdata/e2e/chat.mjs), each through `rotor exec` in
// front of the fake upstream, on a ChatGPT account (translated to the Codex
// backend's Responses API) and on an API-key account (forwarded as is).

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/proxy/fakeupstream"
)

// e2eChatKinds are the two account kinds, each added the way a user adds
// one; upstreamPath is where a chat request must land for that kind.
var e2eChatKinds = []struct {
	name         string
	upstreamPath string
	add          func(w *e2eWorld)
}{
	{"chatgpt", "/backend-api/codex/responses", func(w *e2eWorld) {
		file := filepath.Join(e2eRoot(w.t), "testdata", "jwt", "codex_auth.json")
		if r := w.rotor(30*time.Second, "", "import", "codex", "--file", file); r.code != 0 {
			w.t.Fatalf("import codex: %v", r)
		}
	}},
	{"api-key", "/v1/chat/completions", func(w *e2eWorld) { w.addKey("one", "sk-e2e-chat") }},
}

func TestE2EChatClients(t *testing.T) {
	cache := e2eClients(t)
	for _, kind := range e2eChatKinds {
		t.Run(kind.name, func(t *testing.T) {
			// run starts `rotor exec -- node chat.mjs <name>` in a fresh
			// world with one account of this kind.
			run := func(t *testing.T, name string, b fakeupstream.Behavior) (*e2eWorld, *e2eProc) {
				w := newE2EWorld(t)
				w.useClients(cache)
				kind.add(w)
				w.up.SetDefault(b)
				w.work = cache
				return w, w.start(e2eNodeTimeout, w.bin, "exec", "--", "node", "chat.mjs", name)
			}
			done := func(t *testing.T, p *e2eProc) gjson.Result {
				t.Helper()
				j := p.json()
				if j.Get("step").String() != "done" {
					t.Fatalf("%s", j.Raw)
				}
				if code := p.wait(); code != 0 {
					t.Fatalf("node exited %d\nstderr:\n%s", code, p.stderr.String())
				}
				return j
			}
			// landed checks that every model request reached the upstream
			// on this kind's path, and returns their bodies.
			landed := func(t *testing.T, w *e2eWorld, want int) [][]byte {
				t.Helper()
				var bodies [][]byte
				for _, r := range w.up.Requests() {
					switch r.Path {
					case kind.upstreamPath:
						bodies = append(bodies, r.Body)
					case "/v1/chat/completions", "/v1/responses", "/backend-api/codex/responses":
						t.Errorf("a request went to %s, want %s", r.Path, kind.upstreamPath)
					}
				}
				if len(bodies) != want {
					t.Errorf("upstream saw %d requests on %s, want %d", len(bodies), kind.upstreamPath, want)
				}
				return bodies
			}

			for _, c := range []struct {
				name  string
				calls int
				check func(t *testing.T, j gjson.Result)
			}{
				{"openai-plain", 1, func(t *testing.T, j gjson.Result) {
					if j.Get("object").String() != "chat.completion" || j.Get("finish").String() != "stop" {
						t.Errorf("%s", j.Raw)
					}
				}},
				{"openai-stream", 1, func(t *testing.T, j gjson.Result) {
					if j.Get("role").String() != "assistant" || j.Get("finish").String() != "stop" || j.Get("usage.total_tokens").Int() == 0 {
						t.Errorf("%s", j.Raw)
					}
				}},
				{"ai-generate", 1, nil},
				{"ai-stream", 1, func(t *testing.T, j gjson.Result) {
					if j.Get("finish").String() != "stop" || j.Get("parts").Int() < 2 {
						t.Errorf("%s", j.Raw)
					}
				}},
				{"lc-invoke", 1, nil},
				{"lc-stream", 1, func(t *testing.T, j gjson.Result) {
					if j.Get("chunks").Int() < 2 {
						t.Errorf("LangChain got the answer in %d chunks: not streamed", j.Get("chunks").Int())
					}
				}},
			} {
				t.Run(c.name, func(t *testing.T) {
					w, p := run(t, c.name, fakeupstream.Behavior{})
					j := done(t, p)
					if got := j.Get("text").String(); got != e2eHello {
						t.Errorf("text %q, want %q (%s)", got, e2eHello, j.Raw)
					}
					if c.check != nil {
						c.check(t, j)
					}
					landed(t, w, c.calls)
				})
			}

			t.Run("openai-tool", func(t *testing.T) {
				w, p := run(t, "openai-tool", fakeupstream.Behavior{ToolRoundTrip: true})
				j := p.json()
				if j.Get("step").String() != "tool_call" || j.Get("name").String() != "get_weather" ||
					j.Get("arguments.city").String() != "Paris" || j.Get("finish").String() != "tool_calls" || j.Get("id").String() != "call_123" {
					t.Fatalf("want a get_weather(Paris) tool call: %s", j.Raw)
				}
				if j = done(t, p); j.Get("text").String() != e2eHello {
					t.Errorf("answer after the tool result: %s", j.Raw)
				}
				bodies := landed(t, w, 2)
				if len(bodies) == 2 && !strings.Contains(string(bodies[1]), `"call_123"`) {
					t.Errorf("the tool result did not carry the call's id upstream: %s", bodies[1])
				}
			})

			t.Run("ai-tool", func(t *testing.T) {
				w, p := run(t, "ai-tool", fakeupstream.Behavior{ToolRoundTrip: true})
				j := done(t, p)
				if j.Get("text").String() != e2eHello || j.Get("steps").Int() != 2 ||
					j.Get("calls.0.name").String() != "get_weather" || j.Get("calls.0.input.city").String() != "Paris" {
					t.Errorf("AI SDK tool round trip: %s", j.Raw)
				}
				landed(t, w, 2)
			})

			t.Run("openai-abort", func(t *testing.T) {
				w, p := run(t, "openai-abort", fakeupstream.Behavior{EventDelay: 300 * time.Millisecond})
				j := p.json()
				if j.Get("step").String() != "aborted" || j.Get("finished").Bool() ||
					(j.Get("error").Type != gjson.Null && !j.Get("error.user_abort").Bool()) {
					t.Fatalf("want the stream to stop early after abort(): %s", j.Raw)
				}
				aborted := time.Now()
				for w.up.Open() > 0 {
					if time.Since(aborted) > 2*time.Second {
						t.Fatalf("the upstream request is still open 2s after the client aborted")
					}
					time.Sleep(10 * time.Millisecond)
				}
				p.send("go\n")
				done(t, p)
				landed(t, w, 1)
			})
		})
	}
}
