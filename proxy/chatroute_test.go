package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/chat"
	"github.com/rotorproxy/rotor/proxy/sse"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation"
)

// Tests of docs/clients.md on the wire: /v1/chat/completions through the same
// guard, selection, failover and error payloads as /v1/responses, with a
// ChatGPT account's Codex stream translated event by event.

const (
	chatStreamBody = `{"model":"gpt-5","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	chatPlainBody  = `{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}`
	helloText      = "Hello from the fake upstream."
)

// chatData reads an SSE answer into its data payloads, "[DONE]" included.
func chatData(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, v)
		}
	}
	return out
}

// fixtureChunks is what chat.Stream makes of a Codex fixture, with the id
// and created time of the chunks the client got, so the wire can be
// compared byte for byte with the translator.
func fixtureChunks(t *testing.T, fixture string, first string, includeUsage bool) []string {
	t.Helper()
	var head struct {
		ID      string `json:"id"`
		Created int64  `json:"created"`
	}
	if err := json.Unmarshal([]byte(first), &head); err != nil {
		t.Fatalf("first chunk %q: %v", first, err)
	}
	st := chat.NewStream(head.ID, head.Created, "gpt-5", includeUsage, func(code, msg string) []byte {
		return []byte(`{"error":{"code":"` + code + `"}}`)
	})
	var out []byte
	var sc sse.Scanner
	sc.OnEvent = func(e sse.Event) { out = st.Event(out, e.Type, e.Data) }
	sc.Feed(compatFixture(t, "sse/"+fixture))
	return chatData(t, bytes.NewReader(out))
}

// chatContent joins the delta.content of chunks.
func chatContent(chunks []string) string {
	var b strings.Builder
	for _, c := range chunks {
		var ch struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(c), &ch) == nil && len(ch.Choices) > 0 {
			b.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	return b.String()
}

func TestChatStreamOnChatGPTAccountIsTranslated(t *testing.T) {
	t.Parallel()
	for _, fx := range []string{"hello.sse", "tool_call.sse", "parallel_tool_calls.sse", "reasoning_summary.sse", "incomplete_max_tokens.sse", "rate_limits_first.sse"} {
		t.Run(fx, func(t *testing.T) {
			e := newEnv(t, []acct{{accounts.KindChatGPT, "cg"}})
			e.up.Set("cg", upstreamtest.Behavior{Stream: fx})
			resp := e.do("POST", "/v1/chat/completions", chatStreamBody)
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("status %d type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), readAll(t, resp))
			}
			got := chatData(t, resp.Body)
			resp.Body.Close()
			if len(got) < 3 || got[len(got)-1] != "[DONE]" {
				t.Fatalf("chunks %q", got)
			}
			want := fixtureChunks(t, fx, got[0], true)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("the client got\n%s\nthe translator makes\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if !strings.Contains(got[0], `"role":"assistant"`) || !strings.HasPrefix(got[0], `{"id":"chatcmpl-`) {
				t.Errorf("first chunk %s", got[0])
			}
			// Usage reaches usage.jsonl as for /v1/responses.
			rec := waitUsage(t, e, 1)[0]
			if rec.Status != 200 || rec.Tokens == nil || rec.Tokens.Output == 0 {
				t.Errorf("usage record %+v", rec)
			}
		})
	}
}

func TestChatStreamFinishReasonsAndUsageChunk(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"hello.sse":                 `"finish_reason":"stop"`,
		"tool_call.sse":             `"finish_reason":"tool_calls"`,
		"incomplete_max_tokens.sse": `"finish_reason":"length"`,
	}
	for fx, finish := range cases {
		e := newEnv(t, []acct{{accounts.KindChatGPT, "cg"}})
		e.up.Set("cg", upstreamtest.Behavior{Stream: fx})
		got := chatData(t, e.do("POST", "/v1/chat/completions", chatStreamBody).Body)
		n := len(got)
		if n < 3 || !strings.Contains(got[n-3], finish) || !strings.Contains(got[n-2], `"choices":[]`) ||
			!strings.Contains(got[n-2], `"prompt_tokens"`) || got[n-1] != "[DONE]" {
			t.Errorf("%s: last chunks %q", fx, got[max(n-3, 0):])
		}
	}
	// Without include_usage there is no usage chunk.
	e := newEnv(t, []acct{{accounts.KindChatGPT, "cg"}})
	got := chatData(t, e.do("POST", "/v1/chat/completions", `{"model":"gpt-5","stream":true,"messages":[{"role":"user","content":"hi"}]}`).Body)
	if chatContent(got) != helloText {
		t.Errorf("content %q", chatContent(got))
	}
	for _, c := range got {
		if strings.Contains(c, `"usage"`) && !strings.Contains(c, `"usage":null`) {
			t.Errorf("usage chunk without include_usage: %s", c)
		}
	}
}

func TestChatUpstreamGetsOneResponsesRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "cg"}})
	body := `{"model":"gpt-5","stream":true,"temperature":0.2,"max_tokens":100,"user":"u1",` +
		`"reasoning_effort":"high","response_format":{"type":"json_object"},` +
		`"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather.","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],` +
		`"tool_choice":{"type":"function","function":{"name":"get_weather"}},` +
		`"messages":[{"role":"system","content":"Be brief."},{"role":"developer","content":"Use tools."},` +
		`{"role":"user","content":[{"type":"text","text":"Weather in Paris?"},{"type":"image_url","image_url":{"url":"https://example.com/p.png","detail":"low"}}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"18C"}]}`
	resp := e.do("POST", "/v1/chat/completions", body, "session_id", "sess-1")
	readAll(t, resp)
	reqs := compatUpstreamBodies(e, "/backend-api/codex/responses")
	if len(reqs) != 1 {
		t.Fatalf("upstream got %d Responses requests", len(reqs))
	}
	want := `{"model":"gpt-5","instructions":"Be brief.\n\nUse tools.","input":[` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"Weather in Paris?"},{"type":"input_image","image_url":"https://example.com/p.png","detail":"low"}]},` +
		`{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},` +
		`{"type":"function_call_output","call_id":"call_1","output":"18C"}],` +
		`"tools":[{"type":"function","name":"get_weather","description":"Weather.","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}],` +
		`"tool_choice":{"type":"function","name":"get_weather"},` +
		`"text":{"format":{"type":"json_object"}},"reasoning":{"effort":"high","summary":"auto"},"stream":true,"store":false}`
	var gotV, wantV any
	if err := json.Unmarshal(reqs[0], &gotV); err != nil {
		t.Fatalf("upstream body is not JSON: %s", reqs[0])
	}
	json.Unmarshal([]byte(want), &wantV)
	gb, _ := json.Marshal(gotV)
	wb, _ := json.Marshal(wantV)
	if !bytes.Equal(gb, wb) {
		t.Errorf("upstream got\n%s\nwant\n%s", reqs[0], want)
	}
	for _, r := range e.up.Requests() {
		if r.Path == "/backend-api/codex/responses" && r.Header.Get("session_id") != "sess-1" {
			t.Errorf("session_id did not pass: %v", r.Header)
		}
	}
}

func TestChatNonStreamOnChatGPTAccountIsOneCompletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "cg"}})
	resp := e.do("POST", "/v1/chat/completions", chatPlainBody)
	body := readAll(t, resp)
	var c struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
			Total      int `json:"total_tokens"`
		} `json:"usage"`
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &c) != nil {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || c.Object != "chat.completion" ||
		!strings.HasPrefix(c.ID, "chatcmpl-") || c.Model != "gpt-5" || len(c.Choices) != 1 ||
		c.Choices[0].Message.Role != "assistant" || c.Choices[0].Message.Content != helloText ||
		c.Choices[0].FinishReason != "stop" || c.Usage.Prompt != 1280 || c.Usage.Completion != 9 || c.Usage.Total != 1289 {
		t.Errorf("completion %s", body)
	}
	rec := waitUsage(t, e, 1)[0]
	if rec.Tokens == nil || rec.Tokens.Input != 1280 || rec.Tokens.Output != 9 {
		t.Errorf("usage record %+v", rec)
	}
}

func TestChatOnAPIKeyAccountIsForwardedByteForByte(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	for _, body := range []string{chatStreamBody, chatPlainBody} {
		resp := e.do("POST", "/v1/chat/completions", body)
		got := readAll(t, resp)
		if resp.StatusCode != 200 || !strings.Contains(got, "Hello") {
			t.Errorf("status %d body %.300s", resp.StatusCode, got)
		}
	}
	reqs := compatUpstreamBodies(e, "/v1/chat/completions")
	if len(reqs) != 2 || string(reqs[0]) != chatStreamBody || string(reqs[1]) != chatPlainBody {
		t.Errorf("upstream bodies %q", reqs)
	}
	recs := waitUsage(t, e, 2)
	for _, rec := range recs {
		if rec.Tokens == nil || rec.Tokens.Input == 0 || rec.Tokens.Output == 0 {
			t.Errorf("usage not read from the chat answer: %+v", rec)
		}
	}
}

func TestChatStreamIsTranslatedAsItArrives(t *testing.T) {
	t.Parallel()
	// Each content delta leaves rotor when its event arrives: with the
	// upstream silent after the k-th event, the deltas among the first k
	// (events 5 to 10 of hello.sse) reach the client.
	for k := 5; k <= 10; k++ {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, []acct{{accounts.KindChatGPT, "cg"}}, stallTimeout(stallBound))
			e.up.Set("cg", upstreamtest.Behavior{StallAfter: k})
			expectBeforeStall(t, e, "/v1/chat/completions", chatStreamBody, k-4, func(line string) bool {
				return strings.Contains(line, `"delta":{"content":"`)
			})
		})
	}
}

func TestChatFailureAfterFirstByteEndsWithAnErrorChunk(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "cg"}})
	e.up.Set("cg", upstreamtest.Behavior{Stream: "failed_after_output.sse"})
	got := chatData(t, e.do("POST", "/v1/chat/completions", chatStreamBody).Body)
	n := len(got)
	if n < 3 || !strings.HasPrefix(got[n-2], `{"error":{`) || !strings.Contains(got[n-2], `"code":"server_error"`) || got[n-1] != "[DONE]" {
		t.Fatalf("chunks %q", got)
	}
	if chatContent(got) == "" {
		t.Error("the output before the failure was lost")
	}
	// A stream cut mid-way: the client still gets an error chunk.
	e2 := newEnv(t, []acct{{accounts.KindChatGPT, "cg"}})
	e2.up.Set("cg", upstreamtest.Behavior{ResetAfter: 5})
	got = chatData(t, e2.do("POST", "/v1/chat/completions", chatStreamBody).Body)
	if n := len(got); n < 2 || !strings.Contains(got[n-2], `"code":"stream_interrupted"`) || got[n-1] != "[DONE]" {
		t.Errorf("reset stream chunks %q", got)
	}
	eventually(t, 2*time.Second, "the broken stream charged to the account", func() bool {
		return e2.state(1).CooldownReason == rotation.CooldownNetworkError
	})
}

func TestChatFailoverIsTheResponsesFailover(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		bad  upstreamtest.Behavior
		mark func(st rotation.AccountState) bool
	}{
		{"usage limit", upstreamtest.Behavior{Status: 429}, func(st rotation.AccountState) bool { return !st.RateLimitedUntil.IsZero() }},
		{"5xx", upstreamtest.Behavior{Status: 500}, func(st rotation.AccountState) bool { return st.CooldownReason == rotation.CooldownServerError }},
		{"failed before output", upstreamtest.Behavior{Stream: "failed_overloaded.sse"}, func(st rotation.AccountState) bool { return st.CooldownReason == rotation.CooldownServerError }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, []acct{{accounts.KindChatGPT, "bad"}, {accounts.KindChatGPT, "good"}})
			e.up.Set("bad", c.bad)
			e.prefer(1)
			got := chatData(t, e.do("POST", "/v1/chat/completions", chatStreamBody).Body)
			if chatContent(got) != helloText {
				t.Fatalf("content %q", chatContent(got))
			}
			e.expectCounts(map[string]int{"bad": 1, "good": 1})
			if !c.mark(e.state(1)) {
				t.Errorf("account 1 state %+v", e.state(1))
			}
		})
	}
	t.Run("entitlement", func(t *testing.T) {
		e := newEnv(t, []acct{{accounts.KindChatGPT, "a"}, {accounts.KindChatGPT, "b"}})
		e.up.SetDefault(upstreamtest.Behavior{Status: 404, ErrorFixture: "usage_not_included_404.json"})
		expectError(t, e.do("POST", "/v1/chat/completions", chatStreamBody), 403, rerr.EntitlementError)
	})
	t.Run("every account at its limit", func(t *testing.T) {
		e := newEnv(t, []acct{{accounts.KindChatGPT, "a"}, {accounts.KindAPIKey, "b"}})
		e.up.SetDefault(upstreamtest.Behavior{Status: 429, ResetIn: time.Hour})
		got := expectError(t, e.do("POST", "/v1/chat/completions", chatStreamBody), 429, rerr.PoolExhausted)
		if got.Type != rerr.TypeUsageLimit || got.Extra["resets_at"] == nil {
			t.Errorf("payload %+v", got)
		}
	})
	t.Run("401 refresh", func(t *testing.T) {
		a := newEnv(t, []acct{{accounts.KindChatGPT, "old"}})
		f := newFakeRefresher(t, a, false)
		e := a.peer(withRefresher(f))
		e.up.Set("old", upstreamtest.Behavior{Status: 401})
		got := chatData(t, e.do("POST", "/v1/chat/completions", chatStreamBody).Body)
		if chatContent(got) != helloText || len(f.Calls()) != 1 {
			t.Errorf("content %q refreshes %v", chatContent(got), f.Calls())
		}
		e.expectCounts(map[string]int{"old": 1, "fresh-old": 1})
	})
}

func TestChatParametersOnlyAnAPIKeyCanServe(t *testing.T) {
	t.Parallel()
	body := `{"model":"gpt-5","n":2,"messages":[{"role":"user","content":"hi"}]}`
	e := newEnv(t, []acct{{accounts.KindChatGPT, "cg"}})
	got := expectError(t, e.do("POST", "/v1/chat/completions", body), 400, rerr.UnsupportedParameter)
	if got.Extra["param"] != "n" || !strings.Contains(got.Message, `"n"`) {
		t.Errorf("payload %+v", got)
	}
	e.expectCounts(map[string]int{"cg": 0})
	// With an API-key account in the pool, the request goes there.
	e2 := newEnv(t, []acct{{accounts.KindChatGPT, "cg"}, {accounts.KindAPIKey, "k"}})
	e2.prefer(1)
	resp := e2.do("POST", "/v1/chat/completions", body)
	readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
	e2.expectCounts(map[string]int{"cg": 0, "k": 1})
}

func TestModelsForGenericClientsAndCodex(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "cg"}})
	resp := e.do("GET", "/v1/models", "")
	body := readAll(t, resp)
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &list) != nil || list.Object != "list" || len(list.Data) == 0 {
		t.Fatalf("status %d body %.300s", resp.StatusCode, body)
	}
	for _, m := range list.Data {
		if m.ID == "" || m.Object != "model" || m.Created == 0 || m.OwnedBy == "" {
			t.Errorf("model %+v", m)
		}
	}
	// Codex CLI names its version and gets the catalog as it is.
	resp = e.do("GET", "/v1/models?client_version=0.169.0", "")
	body = readAll(t, resp)
	if !strings.HasPrefix(body, `{"models":[`) {
		t.Errorf("Codex got %.200s", body)
	}
	var sawVersion bool
	for _, r := range e.up.Requests() {
		if r.Path == "/backend-api/codex/models" && strings.Contains(r.RawQuery, "client_version=") {
			sawVersion = true
		}
	}
	if !sawVersion {
		t.Error("the Codex backend was asked for models without a client_version")
	}
}

// An unknown caller still learns nothing on the new route.
func TestChatRouteIsGuarded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "cg"}})
	req, _ := http.NewRequest("POST", e.base+"/v1/chat/completions", strings.NewReader(chatStreamBody))
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	expectError(t, resp, 401, rerr.ProxyUnauthorized)
	e.expectCounts(map[string]int{"cg": 0})
}
