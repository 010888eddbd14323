package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/proxy/backend"
	"github.com/rotorproxy/rotor/proxy/sse"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// Tests of docs/accounts.md "Compatibility for generic clients" (a ChatGPT account
// behind a client that is not Codex CLI), of holding a stream back until it
// shows it will produce output (so a stream that fails at once can still
// fail over), and of the quota headers.

// compatPrefer makes account i the selector's first choice: every other
// account looks just used.
func compatPrefer(e *env, i int) {
	for j := 1; j <= len(e.pool.Accounts); j++ {
		if j != i {
			e.sel.Runtime().Used(e.id(j), 200)
		}
	}
}

// compatUpstreamBodies returns the bodies the fake received on path, oldest first.
func compatUpstreamBodies(e *env, path string) [][]byte {
	var out [][]byte
	for _, r := range e.up.Requests() {
		if r.Path == path {
			out = append(out, r.Body)
		}
	}
	return out
}

// compatFixture reads a file under testdata.
func compatFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// compatResponse is the part of a Response object the tests look at.
type compatResponse struct {
	Object string `json:"object"`
	Status string `json:"status"`
	Model  string `json:"model"`
	Output []struct {
		Type    string `json:"type"`
		Role    string `json:"role"`
		Name    string `json:"name"`
		CallID  string `json:"call_id"`
		Args    string `json:"arguments"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
	Usage struct {
		Input   int64 `json:"input_tokens"`
		Details struct {
			Cached int64 `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		Output int64 `json:"output_tokens"`
		Total  int64 `json:"total_tokens"`
	} `json:"usage"`
}

func compatDecodeResponse(t *testing.T, body []byte) compatResponse {
	t.Helper()
	var r compatResponse
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("not a Response object (%v): %.300s", err, body)
	}
	return r
}

// compatCheckHello checks the Response object assembled from hello.sse.
func compatCheckHello(t *testing.T, r compatResponse) {
	t.Helper()
	if r.Object != "response" || r.Status != "completed" {
		t.Errorf("object %q status %q", r.Object, r.Status)
	}
	if len(r.Output) != 1 || len(r.Output[0].Content) != 1 || r.Output[0].Content[0].Text != "Hello from the fake upstream." {
		t.Errorf("output %+v", r.Output)
	}
	if u := r.Usage; u.Input != 1280 || u.Details.Cached != 1024 || u.Output != 9 || u.Total != 1289 {
		t.Errorf("usage %+v, want 1280/1024/9/1289", u)
	}
}

// compatUpstreamJSON decodes one upstream request body.
func compatUpstreamJSON(t *testing.T, body []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("upstream body is not a JSON object: %s", body)
	}
	return m
}

func TestCompatNonStreamingClientGetsOneResponseObject(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, body string }{
		{"stream omitted", `{"model":"gpt-5","input":"hi","max_output_tokens":256,"temperature":0.2,"top_p":0.9}`},
		{"stream false", `{"model":"gpt-5","stream":false,"input":"hi","store":true,"max_output_tokens":256,"temperature":0.2,"top_p":0.9,"frequency_penalty":0,"presence_penalty":0,"max_tokens":10}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}})
			resp := e.do("POST", "/v1/responses", tc.body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content-type %q, want application/json", ct)
			}
			if resp.ContentLength <= 0 || len(resp.TransferEncoding) > 0 {
				t.Errorf("content-length %d transfer-encoding %v: want a sized answer", resp.ContentLength, resp.TransferEncoding)
			}
			body := readAll(t, resp)
			if int64(len(body)) != resp.ContentLength {
				t.Errorf("body %d bytes, content-length %d", len(body), resp.ContentLength)
			}
			if strings.Contains(body, "event:") || strings.Contains(body, "data:") {
				t.Errorf("the answer is a stream, not one object: %.200s", body)
			}
			r := compatDecodeResponse(t, []byte(body))
			compatCheckHello(t, r)
			if r.Model != "gpt-5" {
				t.Errorf("model %q", r.Model)
			}

			// The fake's /backend-api/codex/responses refuses anything but
			// stream:true with a 400, so the 200 above already says rotor
			// streamed; check the whole rewrite anyway.
			bodies := compatUpstreamBodies(e, "/backend-api/codex/responses")
			if len(bodies) != 1 {
				t.Fatalf("%d upstream requests", len(bodies))
			}
			m := compatUpstreamJSON(t, bodies[0])
			for k, want := range map[string]string{"stream": "true", "store": "false", "instructions": `""`, "model": `"gpt-5"`, "input": `"hi"`} {
				if got := string(m[k]); got != want {
					t.Errorf("upstream %s = %s, want %s", k, got, want)
				}
			}
			for _, k := range DroppedForChatGPT {
				if _, ok := m[k]; ok {
					t.Errorf("upstream got %s, which the backend rejects", k)
				}
			}
			rec := waitCompatUsage(t, e, 1)[0]
			want := usage.Tokens{Input: 1280, Cached: 1024, Output: 9, Total: 1289}
			if rec.Status != 200 || rec.Tokens == nil || *rec.Tokens != want {
				t.Errorf("usage record %+v tokens %+v", rec, rec.Tokens)
			}
		})
	}
}

// waitCompatUsage waits until usage.jsonl has n records and returns them.
func waitCompatUsage(t *testing.T, e *env, n int) []usage.Record {
	t.Helper()
	var recs []usage.Record
	eventually(t, 3*time.Second, "usage.jsonl records", func() bool {
		recs = recs[:0]
		if _, err := usage.Read(e.store.Dir(), func(u usage.Record) { recs = append(recs, u) }); err != nil {
			return false
		}
		return len(recs) >= n
	})
	return recs
}

func TestCompatKeepsClientInstructions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}})
	resp := e.do("POST", "/v1/responses", `{"model":"gpt-5","instructions":"Be brief.","input":"hi","temperature":1}`)
	compatCheckHello(t, compatDecodeResponse(t, []byte(readAll(t, resp))))
	m := compatUpstreamJSON(t, compatUpstreamBodies(e, "/backend-api/codex/responses")[0])
	if string(m["instructions"]) != `"Be brief."` || string(m["stream"]) != "true" || string(m["store"]) != "false" {
		t.Errorf("upstream instructions %s stream %s store %s", m["instructions"], m["stream"], m["store"])
	}
	if _, ok := m["temperature"]; ok {
		t.Error("temperature reached the upstream")
	}
}

func TestCompatStreamingClientWithoutStoreStillStreams(t *testing.T) {
	t.Parallel()
	// A generic client that streams but omits store/instructions: the body
	// is fixed, the answer stays a stream.
	e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}})
	resp := e.do("POST", "/v1/responses", `{"model":"gpt-5","stream":true,"input":"hi","top_p":0.5}`)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	types := sseEvents(t, resp.Body)
	resp.Body.Close()
	if len(types) == 0 || types[0] != "response.created" || types[len(types)-1] != "response.completed" {
		t.Errorf("events %v", types)
	}
	m := compatUpstreamJSON(t, compatUpstreamBodies(e, "/backend-api/codex/responses")[0])
	if string(m["store"]) != "false" || string(m["instructions"]) != `""` || string(m["stream"]) != "true" {
		t.Errorf("upstream body %v", m)
	}
	if _, ok := m["top_p"]; ok {
		t.Error("top_p reached the upstream")
	}
}

func TestCompatCodexRequestPassesByteForByte(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}})
	// Odd spacing, key order, escapes and HTML-ish text: any re-encoding
	// would change at least one of them.
	body := `{"model":"gpt-5-codex",  "instructions":"You are Codex <a&b>\u00e9", "input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"say \"hi\""}]}],` +
		`"tools":[],"tool_choice":"auto","parallel_tool_calls":false,"reasoning":{"effort":"medium","summary":"auto"},"store":false,"stream":true,"include":["reasoning.encrypted_content"],"prompt_cache_key":"0199a1b2-c3d4"}`
	resp := e.do("POST", "/v1/responses", body, "session_id", "0199a1b2-c3d4")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
	}
	types := sseEvents(t, resp.Body)
	resp.Body.Close()
	if len(types) == 0 || types[len(types)-1] != "response.completed" {
		t.Errorf("events %v", types)
	}
	bodies := compatUpstreamBodies(e, "/backend-api/codex/responses")
	if len(bodies) != 1 || !bytes.Equal(bodies[0], []byte(body)) {
		t.Errorf("the upstream body differs from the client's:\n got %s\nwant %s", bodies[0], body)
	}
}

func TestCompatAPIKeyAccountIsNotRewritten(t *testing.T) {
	t.Parallel()
	// The rewrite is for ChatGPT accounts only: an API-key account gets the
	// generic client's body as is.
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	body := `{"model":"gpt-5","input":"hi","temperature":0.2}`
	resp := e.do("POST", "/v1/responses", body)
	compatCheckHello(t, compatDecodeResponse(t, []byte(readAll(t, resp))))
	if got := compatUpstreamBodies(e, "/v1/responses"); len(got) != 1 || string(got[0]) != body {
		t.Errorf("upstream body %q", got)
	}
}

func TestChatGPTBody(t *testing.T) {
	t.Parallel()
	codex := []byte(`{"model":"gpt-5-codex","instructions":"x","input":[],"store":false,"stream":true}`)
	out, assemble, err := chatgptRewrite(codex)
	if err != nil || assemble || &out[0] != &codex[0] || len(out) != len(codex) {
		t.Errorf("a Codex body must be returned as is: assemble %v err %v out %s", assemble, err, out)
	}

	for _, tc := range []struct {
		name, in string
		assemble bool
		want     map[string]string // field -> raw JSON; "" means absent
	}{
		{"stream omitted", `{"model":"m","input":"hi"}`, true,
			map[string]string{"stream": "true", "store": "false", "instructions": `""`, "model": `"m"`, "input": `"hi"`}},
		{"stream false", `{"model":"m","stream":false}`, true, map[string]string{"stream": "true"}},
		{"stream null", `{"model":"m","stream":null}`, true, map[string]string{"stream": "true"}},
		{"store true", `{"model":"m","stream":true,"store":true,"instructions":"i"}`, false,
			map[string]string{"store": "false", "instructions": `"i"`}},
		{"instructions null", `{"model":"m","stream":true,"store":false,"instructions":null}`, false,
			map[string]string{"instructions": `""`}},
		{"empty instructions kept", `{"model":"m","stream":true,"store":false,"instructions":"","temperature":0}`, false,
			map[string]string{"instructions": `""`, "temperature": ""}},
		{"dropped", `{"model":"m","stream":true,"store":false,"instructions":"i","max_output_tokens":5,"max_completion_tokens":5,"max_tokens":5,"temperature":1,"top_p":1,"frequency_penalty":0,"presence_penalty":0,"top_logprobs":0}`, false,
			map[string]string{"max_output_tokens": "", "max_completion_tokens": "", "max_tokens": "", "temperature": "", "top_p": "",
				"frequency_penalty": "", "presence_penalty": "", "top_logprobs": "0"}},
		{"nested values kept", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a\nb"}]}],"tools":[{"type":"function","name":"f","parameters":{"temperature":1}}],"metadata":{"top_p":"x"}}`, true,
			map[string]string{"input": `[{"role":"user","content":[{"type":"input_text","text":"a\nb"}]}]`,
				"tools": `[{"type":"function","name":"f","parameters":{"temperature":1}}]`, "metadata": `{"top_p":"x"}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, assemble, err := chatgptRewrite([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if assemble != tc.assemble {
				t.Errorf("assemble %v, want %v", assemble, tc.assemble)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(out, &m); err != nil {
				t.Fatalf("output is not JSON: %s", out)
			}
			for k, want := range tc.want {
				got, ok := m[k]
				switch {
				case want == "" && ok:
					t.Errorf("%s kept: %s", k, got)
				case want != "" && string(got) != want:
					t.Errorf("%s = %s, want %s", k, got, want)
				}
			}
			if string(m["stream"]) != "true" || string(m["store"]) != "false" {
				t.Errorf("stream %s store %s", m["stream"], m["store"])
			}
			if again, a2, _ := chatgptRewrite(out); !bytes.Equal(again, out) || a2 {
				t.Errorf("rewriting is not idempotent: %s -> %s", out, again)
			}
		})
	}

	// Edits splice bytes: every member rotor does not touch keeps the
	// client's bytes (no reordering, no re-escaping of <, > and &), and so
	// do the separators between members that stay neighbours.
	for in, want := range map[string]string{
		`{"model":"m", "input":"<b>&amp;</b>\u00e9", "temperature":0.5, "stream":false}`: `{"model":"m", "input":"<b>&amp;</b>\u00e9","stream":true,"store":false,"instructions":""}`,
		`{ "top_p":1, "model":"m" }`: `{"model":"m","stream":true,"store":false,"instructions":"" }`,
		`{}`:                         `{"stream":true,"store":false,"instructions":""}`,
		"{\n  \"instructions\": null,\n  \"store\": true,\n  \"stream\": true\n}": "{\n  \"instructions\": \"\",\n  \"store\": false,\n  \"stream\": true\n}",
	} {
		if out, _, err := chatgptRewrite([]byte(in)); err != nil || string(out) != want {
			t.Errorf("chatgptRewrite(%s)\n got %s\nwant %s (%v)", in, out, want, err)
		}
	}

	if _, _, err := chatgptRewrite([]byte(`[1,2]`)); err == nil {
		t.Error("a JSON array was accepted as a request object")
	}
}

func TestCompatBodyThatIsNotAnObject(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}})
	resp := e.do("POST", "/v1/responses", `["not","an","object"]`)
	if resp.StatusCode != 400 {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
	}
	readAll(t, resp)
	if n := e.up.Count("c1"); n != 0 {
		t.Errorf("the upstream saw %d requests", n)
	}
	if s := e.sel.Status()[0]; s.State != "available" {
		t.Errorf("the account was blamed: %q", s.State)
	}
}

func TestAssembleResponseHello(t *testing.T) {
	t.Parallel()
	raw := compatFixture(t, "sse/hello.sse")
	for name, r := range map[string]io.Reader{
		"whole":        bytes.NewReader(raw),
		"byte by byte": iotest.OneByteReader(bytes.NewReader(raw)),
		"crlf":         bytes.NewReader(bytes.ReplaceAll(raw, []byte("\n"), []byte("\r\n"))),
	} {
		t.Run(name, func(t *testing.T) {
			body, failure, err := assemble(r, &responseAssembler{})
			if err != nil || failure.code != "" {
				t.Fatalf("failure %q err %v", failure, err)
			}
			a := compatDecodeResponse(t, body)
			compatCheckHello(t, a)
			if a.Model != "gpt-5-2025-08-07" || a.Output[0].Role != "assistant" {
				t.Errorf("model %q role %q", a.Model, a.Output[0].Role)
			}
		})
	}
}

func TestAssembleResponseToolCall(t *testing.T) {
	t.Parallel()
	body, failure, err := assemble(bytes.NewReader(compatFixture(t, "sse/tool_call.sse")), &responseAssembler{})
	if err != nil || failure.code != "" {
		t.Fatalf("failure %q err %v", failure, err)
	}
	a := compatDecodeResponse(t, body)
	if len(a.Output) != 1 {
		t.Fatalf("output %+v", a.Output)
	}
	o := a.Output[0]
	if o.Type != "function_call" || o.Name != "get_weather" || o.CallID != "call_123" || o.Args != `{"city":"Paris"}` {
		t.Errorf("function call %+v", o)
	}
	if u := a.Usage; u.Input != 96 || u.Output != 18 || u.Total != 114 {
		t.Errorf("usage %+v", u)
	}
}

func TestAssembleResponseFillsEmptyOutput(t *testing.T) {
	t.Parallel()
	// Some backends leave response.completed's output empty: the finished
	// items of the stream fill it.
	raw := compatFixture(t, "sse/hello.sse")
	i := bytes.LastIndex(raw, []byte(`"output":[{`))
	j := bytes.Index(raw[i:], []byte(`],"parallel_tool_calls"`))
	if i < 0 || j < 0 {
		t.Fatal("fixture layout changed")
	}
	emptied := append(append(append([]byte(nil), raw[:i]...), `"output":[`...), raw[i+j:]...)
	body, failure, err := assemble(bytes.NewReader(emptied), &responseAssembler{})
	if err != nil || failure.code != "" {
		t.Fatalf("failure %q err %v", failure, err)
	}
	compatCheckHello(t, compatDecodeResponse(t, body))
}

func TestAssembleResponseFailures(t *testing.T) {
	t.Parallel()
	body, failure, err := assemble(bytes.NewReader(compatFixture(t, "sse/failed_overloaded.sse")), &responseAssembler{})
	if err != nil || body != nil || failure != (streamFailure{"server_is_overloaded", "Our servers are currently overloaded. Please try again later."}) {
		t.Errorf("failed stream: body %q failure %q err %v", body, failure, err)
	}
	raw := compatFixture(t, "sse/hello.sse")
	cut := raw[:bytes.Index(raw, []byte("event: response.completed"))]
	body, failure, err = assemble(bytes.NewReader(cut), &responseAssembler{})
	if err != nil || body != nil || failure != (streamFailure{code: "stream_incomplete"}) {
		t.Errorf("cut stream: body %q failure %q err %v", body, failure, err)
	}
	body, _, err = assemble(io.MultiReader(bytes.NewReader(cut), iotest.ErrReader(io.ErrUnexpectedEOF)), &responseAssembler{})
	if err != io.ErrUnexpectedEOF || body != nil {
		t.Errorf("broken stream: body %q err %v", body, err)
	}
}

func TestHoldBackReleasesAtFirstOutputEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fixture, failure string
		held             []string // event types in the held-back bytes
	}{
		{"sse/hello.sse", "", []string{"response.created", "response.in_progress", "response.output_item.added"}},
		{"sse/rate_limits_first.sse", "", []string{"codex.rate_limits", "response.created", "response.in_progress", "response.output_item.added"}},
		{"sse/failed_overloaded.sse", "server_is_overloaded", []string{"response.created", "response.in_progress", "response.failed"}},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			raw := compatFixture(t, tc.fixture)
			pending, failure, err := holdBack(iotest.OneByteReader(bytes.NewReader(raw)))
			if err != nil || failure.code != tc.failure {
				t.Fatalf("failure %q (want %q) err %v", failure, tc.failure, err)
			}
			if !bytes.HasPrefix(raw, pending) {
				t.Fatal("the held-back bytes are not the start of the stream")
			}
			got := sseEvents(t, bytes.NewReader(pending))
			if strings.Join(got, " ") != strings.Join(tc.held, " ") {
				t.Errorf("held back %v, want %v", got, tc.held)
			}
			// The relay sends the held-back bytes with its first read and
			// keeps nothing of them for the rest of the stream: their
			// buffer goes back to the pool.
			rl := &relay{pending: pending, held: pending, body: eofReader{}, ttfb: 1}
			rl.scan.OnEvent = func(sse.Event) {}
			p, want := make([]byte, 64<<10), len(pending)
			if n, _ := rl.Read(p); n != want || !bytes.Equal(p[:n], raw[:n]) || rl.pending != nil || rl.held != nil {
				t.Errorf("first read sent %d bytes; %d still pending, %d held", n, len(rl.pending), len(rl.held))
			}
		})
	}
}

func TestHoldBackFailedStreamFailsOver(t *testing.T) {
	t.Parallel()
	// The metadata Codex reads ahead of response.created is held back
	// with the rest (docs/codex.md): it is not output.
	for _, fx := range []string{"failed_overloaded.sse", "metadata_first_failed.sse"} {
		t.Run(fx, func(t *testing.T) {
			t.Parallel()
			holdBackFailedStreamFailsOver(t, fx)
		})
	}
}

func holdBackFailedStreamFailsOver(t *testing.T, fixture string) {
	e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}, {accounts.KindChatGPT, "c2"}})
	e.up.Set("c1", upstreamtest.Behavior{Stream: fixture})
	compatPrefer(e, 1)
	resp := e.do("POST", "/v1/responses", streamBody)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
	}
	body := readAll(t, resp)
	types := sseEvents(t, strings.NewReader(body))
	if len(types) == 0 || types[0] != "response.created" || types[len(types)-1] != "response.completed" {
		t.Errorf("events %v: want account 2's whole hello stream", types)
	}
	for _, ty := range types {
		if ty == "response.failed" {
			t.Errorf("the failed stream reached the client: %v", types)
		}
	}
	if strings.Count(body, "event: response.created") != 1 || !strings.Contains(body, `"text":"Hello from the fake upstream."`) {
		t.Errorf("body is not exactly one hello stream: %.300s", body)
	}
	if got := e.up.Count("c1"); got != 1 {
		t.Errorf("account 1 tried %d times", got)
	}
	if got := e.up.Count("c2"); got != 1 {
		t.Errorf("account 2 tried %d times", got)
	}
	s := e.sel.Status()[0]
	if s.State != "cooling-down:"+rotation.CooldownServerError {
		t.Errorf("account 1 state %q, want cooling-down:server-error", s.State)
	}
	if d := time.Until(s.Until); d <= 0 || d > rotation.ServerErrorCooldown+time.Second {
		t.Errorf("account 1 cools down until %s (in %s)", s.Until, d)
	}
	if s := e.sel.Status()[1]; s.State != "available" {
		t.Errorf("account 2 state %q", s.State)
	}
}

func TestHoldBackFailedStreamFailsOverForNonStreamingClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}, {accounts.KindChatGPT, "c2"}})
	e.up.Set("c1", upstreamtest.Behavior{Stream: "failed_overloaded.sse"})
	compatPrefer(e, 1)
	resp := e.do("POST", "/v1/responses", `{"model":"gpt-5","input":"hi"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
	}
	compatCheckHello(t, compatDecodeResponse(t, []byte(readAll(t, resp))))
	if c1, c2 := e.up.Count("c1"), e.up.Count("c2"); c1 != 1 || c2 != 1 {
		t.Errorf("attempts c1=%d c2=%d", c1, c2)
	}
	if s := e.sel.Status()[0]; s.State != "cooling-down:"+rotation.CooldownServerError {
		t.Errorf("account 1 state %q", s.State)
	}
}

func TestHoldBackOnlyAccountFailingAtOnceIsAnError(t *testing.T) {
	t.Parallel()
	// No one to fail over to: the client gets a proxy error, not a 200
	// carrying response.failed.
	e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}})
	e.up.Set("c1", upstreamtest.Behavior{Stream: "failed_overloaded.sse"})
	resp := e.do("POST", "/v1/responses", streamBody)
	if resp.StatusCode != 503 {
		t.Fatalf("status %d: %.300s", resp.StatusCode, readAll(t, resp))
	}
	got := decodeError(t, resp)
	if got.Code != "codex_runtime_rotation_pool_exhausted" || got.Extra["reason"] != "server-error" {
		t.Errorf("error %+v", got.Extra)
	}
}

var compatResetAtRE = regexp.MustCompile(`"reset_at":([0-9]+)`)

func TestRateLimitsFirstStreamReachesClientIntact(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}})
	const resetIn = 45 * time.Minute
	e.up.Set("c1", upstreamtest.Behavior{Stream: "rate_limits_first.sse", ResetIn: resetIn})
	start := time.Now()
	// The fixture's model, so the fake has nothing to rewrite.
	resp := e.do("POST", "/v1/responses", `{"model":"gpt-5-codex","stream":true,"store":false,"instructions":"","input":"hi"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
	}
	got := []byte(readAll(t, resp))
	m := compatResetAtRE.FindSubmatch(got)
	if m == nil {
		t.Fatalf("no reset_at in %.300s", got)
	}
	at, _ := strconv.ParseInt(string(m[1]), 10, 64)
	if d := time.Unix(at, 0).Sub(start.Add(resetIn)); d < -2*time.Second || d > 2*time.Second {
		t.Errorf("reset_at %d is not now+45m", at)
	}
	want := compatFixture(t, "sse/rate_limits_first.sse")
	want = bytes.ReplaceAll(want, []byte("{{RESETS_AT}}"), m[1])
	want = bytes.ReplaceAll(want, []byte("{{RESETS_IN}}"), []byte(strconv.Itoa(int(resetIn/time.Second))))
	if !bytes.Equal(got, want) {
		t.Errorf("the client got %d bytes that differ from the %d-byte recorded stream", len(got), len(want))
	}
	var q *rotation.Quota
	eventually(t, 2*time.Second, "a quota snapshot", func() bool {
		q = e.sel.Runtime().Snapshot(e.id(1)).Quota
		return q != nil
	})
	if q.Primary == nil || q.Primary.UsedPercent != 42 || q.Primary.WindowMinutes != 300 || !q.Primary.ResetsAt.Equal(time.Unix(at, 0)) {
		t.Errorf("primary %+v", q.Primary)
	}
	if q.Secondary == nil || q.Secondary.UsedPercent != 17 || q.Secondary.WindowMinutes != 10080 || q.PlanType != "plus" {
		t.Errorf("secondary %+v plan %q", q.Secondary, q.PlanType)
	}
}

// compatRecordedHeaders parses testdata/headers/name with fasthttp's parser and
// returns the headers and the time they were observed (their Date).
func compatRecordedHeaders(t *testing.T, name string, drop ...string) (*fasthttp.ResponseHeader, time.Time) {
	t.Helper()
	raw := compatFixture(t, "headers/"+name)
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(raw), "\n"), "\n") {
		keep := true
		for _, d := range drop {
			if strings.HasPrefix(strings.ToLower(l), d+":") {
				keep = false
			}
		}
		if keep {
			lines = append(lines, l)
		}
	}
	var h fasthttp.ResponseHeader
	if err := h.Read(bufio.NewReader(strings.NewReader(strings.Join(lines, "\r\n") + "\r\n\r\n"))); err != nil {
		t.Fatalf("parsing %s: %v", name, err)
	}
	date, err := time.Parse(time.RFC1123, string(h.Peek("Date")))
	if err != nil {
		t.Fatalf("Date: %v", err)
	}
	return &h, date
}

func TestParseQuotaRecordedHeaders(t *testing.T) {
	t.Parallel()
	h, now := compatRecordedHeaders(t, "codex_quota.txt")
	q := backend.ParseQuota(now, h)
	if q == nil || q.Primary == nil || q.Secondary == nil {
		t.Fatalf("quota %+v", q)
	}
	if q.PlanType != "plus" || !q.ObservedAt.Equal(now) {
		t.Errorf("plan %q observed %s", q.PlanType, q.ObservedAt)
	}
	if p := q.Primary; p.UsedPercent != 96 || p.WindowMinutes != 300 || !p.ResetsAt.Equal(time.Unix(1767233764, 0)) {
		t.Errorf("primary %+v", *p)
	}
	if s := q.Secondary; s.UsedPercent != 31 || s.WindowMinutes != 10080 || !s.ResetsAt.Equal(time.Unix(1767637020, 0)) {
		t.Errorf("secondary %+v", *s)
	}

	t.Run("reset-after-seconds alone", func(t *testing.T) {
		h, now := compatRecordedHeaders(t, "codex_quota.txt", "x-codex-primary-reset-at", "x-codex-secondary-reset-at")
		q := backend.ParseQuota(now, h)
		if !q.Primary.ResetsAt.Equal(now.Add(8164*time.Second)) || !q.Secondary.ResetsAt.Equal(now.Add(411420*time.Second)) {
			t.Errorf("primary resets %s secondary %s", q.Primary.ResetsAt, q.Secondary.ResetsAt)
		}
	})
	t.Run("secondary only", func(t *testing.T) {
		h, now := compatRecordedHeaders(t, "codex_quota.txt", "x-codex-primary-used-percent")
		q := backend.ParseQuota(now, h)
		if q == nil || q.Primary != nil || q.Secondary == nil || q.Secondary.UsedPercent != 31 {
			t.Errorf("quota %+v", q)
		}
	})
	t.Run("no codex headers", func(t *testing.T) {
		var h fasthttp.ResponseHeader
		h.Set("Content-Type", "text/event-stream")
		h.Set("x-codex-primary-used-percent", "not a number")
		if q := backend.ParseQuota(time.Now(), &h); q != nil {
			t.Errorf("quota %+v from no usable header", q)
		}
	})
}

// compatQuotaHeaders turns the recorded header fixture into fake-upstream
// Behavior headers whose reset times lie ahead of now.
func compatQuotaHeaders(t *testing.T, used string) map[string]string {
	t.Helper()
	h, _ := compatRecordedHeaders(t, "codex_quota.txt")
	out := map[string]string{}
	for k, v := range h.All() {
		if name := strings.ToLower(string(k)); strings.HasPrefix(name, "x-codex-") {
			out[name] = string(v)
		}
	}
	out["x-codex-primary-reset-at"] = "{{RESETS_AT}}"
	out["x-codex-secondary-reset-at"] = "{{RESETS_AT}}"
	if used != "" {
		out["x-codex-primary-used-percent"] = used
	}
	return out
}

func TestQuotaNearlySpentAccountIsDeferred(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}, {accounts.KindChatGPT, "c2"}})
	e.up.Set("c1", upstreamtest.Behavior{ResetIn: 2 * time.Hour, Headers: compatQuotaHeaders(t, "")}) // 96% used: 4% left
	compatPrefer(e, 1)
	compatExpectHello(t, e.do("POST", "/v1/responses", streamBody))
	if e.up.Count("c1") != 1 {
		t.Fatalf("the first request did not go to account 1 (c1=%d c2=%d)", e.up.Count("c1"), e.up.Count("c2"))
	}
	if q := e.sel.Runtime().Snapshot(e.id(1)).Quota; q == nil || q.Primary == nil || q.Primary.UsedPercent != 96 {
		t.Fatalf("quota of account 1: %+v", q)
	}
	// Account 1 would win on every other count now; its quota defers it.
	for range 3 {
		compatPrefer(e, 1)
		if i, why := e.sel.Next(); i != 2 || why != rotation.WhyBestScore {
			t.Errorf("next = %d (%s), want 2", i, why)
		}
		compatExpectHello(t, e.do("POST", "/v1/responses", streamBody))
	}
	if c1, c2 := e.up.Count("c1"), e.up.Count("c2"); c1 != 1 || c2 != 3 {
		t.Errorf("requests c1=%d c2=%d, want 1 and 3", c1, c2)
	}
	if s := e.sel.Status()[0]; s.State != "available" {
		t.Errorf("a deferred account is still available, not %q", s.State)
	}

	// When every account is nearly spent, deferral no longer decides.
	e.sel.Runtime().SetQuota(e.id(2), rotation.Quota{ObservedAt: time.Now(),
		Primary: &rotation.Window{UsedPercent: 99, WindowMinutes: 300, ResetsAt: time.Now().Add(time.Hour)}})
	compatPrefer(e, 1)
	if i, why := e.sel.Next(); i != 1 || why != rotation.WhyDeferred {
		t.Errorf("next = %d (%s), want 1 (%s)", i, why, rotation.WhyDeferred)
	}
	compatExpectHello(t, e.do("POST", "/v1/responses", streamBody))
	if c1 := e.up.Count("c1"); c1 != 2 {
		t.Errorf("c1=%d: a deferred account must still serve when all are deferred", c1)
	}
}

// compatExpectHello reads a 200 SSE answer and checks it is the whole hello stream.
func compatExpectHello(t *testing.T, resp *http.Response) {
	t.Helper()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
	}
	body := readAll(t, resp)
	types := sseEvents(t, strings.NewReader(body))
	if len(types) == 0 || types[0] != "response.created" || types[len(types)-1] != "response.completed" ||
		!strings.Contains(body, "Hello from the fake upstream.") {
		t.Fatalf("events %v", types)
	}
}

// A stream that ends while rotor still holds it back (no output event at
// all) is relayed and closed at once: rotor must not read the finished
// body again, which on a keep-alive connection would wait for the stall
// timeout.
func TestHeldBackStreamThatEndsIsClosedAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "short"}}, func(c *Config) { c.StallTimeout = 3 * time.Second })
	e.up.Set("short", upstreamtest.Behavior{Stream: "truncated_bootstrap_only.sse"})
	start := time.Now()
	resp := e.do("POST", "/v1/responses", streamBody)
	types := sseEvents(t, resp.Body)
	resp.Body.Close()
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("a finished stream took %s to close", took)
	}
	if len(types) != 2 || types[0] != "response.created" || types[1] != "response.in_progress" {
		t.Fatalf("events %v", types)
	}
}

// A compressed request body that needs no edit is forwarded byte for byte
// with its Content-Encoding, even to a ChatGPT account (decode_test.go
// has the rest of docs/codex.md's compressed bodies).
func TestCompressedBodyIsForwardedAsIs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "z"}})
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write([]byte(`{"model":"gpt-5","stream":true,"store":false,"instructions":"","input":"hi"}`))
	w.Close()
	resp := e.do("POST", "/v1/responses", gz.String(), "Content-Encoding", "gzip")
	readAll(t, resp)
	reqs := e.up.Requests()
	if len(reqs) != 1 {
		t.Fatalf("upstream saw %d requests (status %d)", len(reqs), resp.StatusCode)
	}
	if !bytes.Equal(reqs[0].Body, gz.Bytes()) || reqs[0].Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("body or encoding changed: %q %q", reqs[0].Header.Get("Content-Encoding"), reqs[0].Body)
	}
}
