package main

// End-to-end tests of Chat Completions (docs/clients.md) with real clients: the
// openai SDK's chat.completions, the AI SDK's openai.chat() and LangChain's
// default ChatOpenAI (testdata/e2e/chat.mjs), each through `rotor exec` in
// front of the fake upstream, on a ChatGPT account (translated to the Codex
// backend's Responses API) and on an API-key account (forwarded as is).
//
// Run them alone with: go test -run E2EChat ./cmd/rotor/
// They skip, like the other client tests, when npm cannot reach its registry.

import (
	"net/http"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

const (
	// e2eChatKey is the API-key account's key.
	e2eChatKey = "sk-e2e-chat"
	// e2eChatModel is the model chat.mjs asks for.
	e2eChatModel = "gpt-5"
	// e2eChatCallID is the call id of the tool_call fixtures, Responses and
	// Chat alike; rotor keeps it both ways (docs/clients.md).
	e2eChatCallID = "call_123"
	// e2eChatTotalTokens is the usage of the hello fixtures, Responses and
	// Chat alike.
	e2eChatTotalTokens = 1289
	// e2eChatAbortDelay spaces the events of the aborted stream. rotor
	// notices a client that left when a write to it fails (docs/selection.md: "at the next
	// write"), which takes one or two events after the abort; the stream
	// would take many more to end on its own (e2eChatKind.gaps).
	e2eChatAbortDelay = time.Second
)

// e2eChatKind is an account kind, added the way a user adds one, with where
// and in what shape a chat request must reach the upstream for it.
type e2eChatKind struct {
	name string
	add  func(w *e2eWorld)
	// path is the upstream path every model request must use.
	path string
	// gaps is how many times the fake sleeps EventDelay before the hello
	// stream on path has ended: 13 between the 14 events of sse/hello.sse,
	// 8 between the 9 of chat/hello.sse.
	gaps time.Duration
	// request checks one upstream request: the API it speaks and whose
	// credentials it carries.
	request func(t *testing.T, r upstreamtest.Recorded)
	// toolName is the name of the first tool declared in a request body.
	toolName func(body gjson.Result) string
	// toolResult reads the body of the request that follows a tool call:
	// the id of the model's call sent back, the id the tool's result
	// answers, and that result.
	toolResult func(body gjson.Result) (callID, answers, output string)
}

var e2eChatKinds = []e2eChatKind{
	{
		name: "chatgpt",
		add: func(w *e2eWorld) {
			file := codexFixture(w.t)
			if r := w.rotor(30*time.Second, "", "import", "codex", "--file", file); r.code != 0 {
				w.t.Fatalf("import codex: %v", r)
			}
		},
		path: "/backend-api/codex/responses",
		gaps: 13,
		// A Responses request, streamed (the Codex backend only streams),
		// with the ChatGPT account's headers: rotor translated it.
		request: func(t *testing.T, r upstreamtest.Recorded) {
			t.Helper()
			b := gjson.ParseBytes(r.Body)
			if !b.Get("input").IsArray() || b.Get("messages").Exists() || !b.Get("stream").Bool() || b.Get("model").String() != e2eChatModel {
				t.Errorf("the ChatGPT account's upstream request is not a streamed Responses request for %s: %s", e2eChatModel, r.Body)
			}
			if r.Token == "" || r.Token == e2eChatKey || r.Header.Get("chatgpt-account-id") == "" {
				t.Errorf("the upstream request lacks the ChatGPT account's token or chatgpt-account-id (token %q)", r.Token)
			}
		},
		toolName: func(b gjson.Result) string { return b.Get("tools.0.name").String() },
		toolResult: func(b gjson.Result) (string, string, string) {
			out := b.Get(`input.#(type=="function_call_output")`)
			return b.Get(`input.#(type=="function_call").call_id`).String(), out.Get("call_id").String(), out.Get("output").String()
		},
	},
	{
		name: "api-key",
		add:  func(w *e2eWorld) { w.addKey("one", e2eChatKey) },
		path: "/v1/chat/completions",
		gaps: 8,
		// The client's own Chat Completions request, with the account's key.
		request: func(t *testing.T, r upstreamtest.Recorded) {
			t.Helper()
			b := gjson.ParseBytes(r.Body)
			if !b.Get("messages").IsArray() || b.Get("input").Exists() || b.Get("model").String() != e2eChatModel {
				t.Errorf("the API-key account's upstream request is not a Chat Completions request for %s: %s", e2eChatModel, r.Body)
			}
			if r.Token != e2eChatKey {
				t.Errorf("the upstream request carries bearer %q, want the account's key", r.Token)
			}
		},
		toolName: func(b gjson.Result) string { return b.Get("tools.0.function.name").String() },
		toolResult: func(b gjson.Result) (string, string, string) {
			out := b.Get(`messages.#(role=="tool")`)
			return b.Get(`messages.#(role=="assistant").tool_calls.0.id`).String(), out.Get("tool_call_id").String(), out.Get("content").String()
		},
	},
}

func TestE2EChatClients(t *testing.T) {
	cache := e2eClients(t)
	for _, kind := range e2eChatKinds {
		t.Run(kind.name, func(t *testing.T) {
			// run starts `rotor exec -- node chat.mjs <name>` in a fresh
			// world with one account of this kind, and says when.
			run := func(t *testing.T, name string, b upstreamtest.Behavior) (*e2eWorld, *e2eProc, time.Time) {
				w := newE2EWorld(t)
				w.useClients(cache)
				kind.add(w)
				w.up.SetDefault(b)
				w.work = cache
				return w, w.start(e2eNodeTimeout, w.bin, "exec", "--", "node", "chat.mjs", name), time.Now()
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
			// on this kind's path, in this kind's shape, and returns their
			// bodies.
			landed := func(t *testing.T, w *e2eWorld, want int) []gjson.Result {
				t.Helper()
				var bodies []gjson.Result
				for _, r := range w.up.Requests() {
					switch r.Path {
					case kind.path:
						if r.Method != http.MethodPost {
							t.Errorf("%s %s upstream", r.Method, r.Path)
						}
						kind.request(t, r)
						bodies = append(bodies, gjson.ParseBytes(r.Body))
					case "/v1/chat/completions", "/v1/responses", "/backend-api/codex/responses":
						t.Errorf("a request went to %s, want %s", r.Path, kind.path)
					}
				}
				if len(bodies) != want {
					t.Errorf("upstream saw %d requests on %s, want %d", len(bodies), kind.path, want)
				}
				return bodies
			}
			// toolTurns checks the two upstream requests of a tool round
			// trip: the tool declared, then its result sent back for the
			// call the model made.
			toolTurns := func(t *testing.T, w *e2eWorld) {
				t.Helper()
				bodies := landed(t, w, 2)
				if len(bodies) != 2 {
					return
				}
				if got := kind.toolName(bodies[0]); got != "get_weather" {
					t.Errorf("the first request declares tool %q, want get_weather: %s", got, bodies[0].Raw)
				}
				call, answers, out := kind.toolResult(bodies[1])
				if call != e2eChatCallID || answers != e2eChatCallID || gjson.Get(out, "temperature_c").Int() != 18 {
					t.Errorf("the second request does not carry call %s and get_weather's result for it (call %q, result for %q: %q): %s",
						e2eChatCallID, call, answers, out, bodies[1].Raw)
				}
			}

			for _, c := range []struct {
				name  string
				check func(t *testing.T, j gjson.Result)
			}{
				{"openai-plain", func(t *testing.T, j gjson.Result) {
					if j.Get("object").String() != "chat.completion" || j.Get("finish").String() != "stop" ||
						j.Get("usage.total_tokens").Int() != e2eChatTotalTokens {
						t.Errorf("want a chat.completion, finish_reason stop, %d tokens: %s", e2eChatTotalTokens, j.Raw)
					}
				}},
				{"openai-stream", func(t *testing.T, j gjson.Result) {
					if j.Get("role").String() != "assistant" || j.Get("finish").String() != "stop" ||
						j.Get("usage.total_tokens").Int() != e2eChatTotalTokens || j.Get("chunks").Int() < 3 {
						t.Errorf("want role, text in chunks, finish_reason stop and a usage chunk of %d tokens: %s", e2eChatTotalTokens, j.Raw)
					}
				}},
				{"ai-generate", func(t *testing.T, j gjson.Result) {
					if j.Get("finish").String() != "stop" {
						t.Errorf("finishReason: %s", j.Raw)
					}
				}},
				{"ai-stream", func(t *testing.T, j gjson.Result) {
					if j.Get("finish").String() != "stop" || j.Get("parts").Int() < 2 {
						t.Errorf("want the text in parts and finishReason stop: %s", j.Raw)
					}
				}},
				{"lc-invoke", nil},
				{"lc-stream", func(t *testing.T, j gjson.Result) {
					if j.Get("chunks").Int() < 2 {
						t.Errorf("LangChain got the answer in %d chunks: not streamed", j.Get("chunks").Int())
					}
				}},
			} {
				t.Run(c.name, func(t *testing.T) {
					w, p, _ := run(t, c.name, upstreamtest.Behavior{})
					j := done(t, p)
					if got := j.Get("text").String(); got != e2eHello {
						t.Errorf("text %q, want %q (%s)", got, e2eHello, j.Raw)
					}
					if c.check != nil {
						c.check(t, j)
					}
					landed(t, w, 1)
				})
			}

			t.Run("openai-tool", func(t *testing.T) {
				w, p, _ := run(t, "openai-tool", upstreamtest.Behavior{ToolRoundTrip: true})
				j := p.json()
				if j.Get("step").String() != "tool_call" || j.Get("name").String() != "get_weather" ||
					j.Get("arguments.city").String() != "Paris" || j.Get("finish").String() != "tool_calls" || j.Get("id").String() != e2eChatCallID {
					t.Fatalf("want a get_weather(Paris) tool call %s: %s", e2eChatCallID, j.Raw)
				}
				if j = done(t, p); j.Get("text").String() != e2eHello || j.Get("finish").String() != "stop" {
					t.Errorf("answer after the tool result: %s", j.Raw)
				}
				toolTurns(t, w)
			})

			t.Run("ai-tool", func(t *testing.T) {
				w, p, _ := run(t, "ai-tool", upstreamtest.Behavior{ToolRoundTrip: true})
				j := done(t, p)
				if j.Get("text").String() != e2eHello || j.Get("steps").Int() != 2 || j.Get("calls.#").Int() != 1 ||
					j.Get("calls.0.name").String() != "get_weather" || j.Get("calls.0.input.city").String() != "Paris" {
					t.Errorf("want one get_weather(Paris) call, then the text, in 2 steps: %s", j.Raw)
				}
				toolTurns(t, w)
			})

			t.Run("openai-abort", func(t *testing.T) {
				w, p, began := run(t, "openai-abort", upstreamtest.Behavior{EventDelay: e2eChatAbortDelay})
				j := p.json()
				// The SDK may still hand out what it had read before abort(),
				// then must stop, quietly or with APIUserAbortError.
				if j.Get("step").String() != "aborted" || j.Get("finished").Bool() ||
					(j.Get("error").Type != gjson.Null && !j.Get("error.user_abort").Bool()) {
					t.Fatalf("want the stream to stop early after abort(): %s", j.Raw)
				}
				// node is still running, so only the abort can end the
				// upstream request before the fake would have ended it: the
				// request began after node did, and an unaborted stream runs
				// for at least kind.gaps delays.
				aborted := time.Now()
				unaborted := began.Add(kind.gaps * e2eChatAbortDelay)
				for w.up.Open() > 0 {
					if time.Now().After(unaborted) {
						t.Fatalf("the upstream request is still open %v after the client aborted, when the stream would have ended by itself (Open()=%d)",
							time.Since(aborted).Round(time.Millisecond), w.up.Open())
					}
					time.Sleep(10 * time.Millisecond)
				}
				t.Logf("upstream request ended %v after the abort, %v before the stream would have ended",
					time.Since(aborted).Round(time.Millisecond), time.Until(unaborted).Round(time.Millisecond))
				p.send("go\n")
				done(t, p)
				landed(t, w, 1)
			})
		})
	}
}
