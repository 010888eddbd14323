package proxy

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// An input over the model's context window is the request's fault: every
// account refuses it alike. The ChatGPT backend says so in a 200 stream
// (response.created, then response.failed context_length_exceeded), which
// a stream's hold-back would otherwise take for an account that failed
// before any output: each account cooled down, the circuit opened after
// three, the client told the pool was exhausted and to retry, exactly
// when Codex needs to learn that its context is full.

const contextMessage = "Your input exceeds the context window of this model. Please adjust your input and try again."

// overWindow is a Responses request whose input the fake, with
// ContextWindow 100, counts as more tokens than that.
func overWindow(stream bool) string {
	s := ""
	if stream {
		s = `"stream":true,`
	}
	return `{"model":"gpt-5",` + s + `"input":"` + strings.Repeat("w", 1000) + `"}`
}

// smallWindows gives every account of e a context window of 100 tokens.
func smallWindows(e *env, tokens ...string) {
	for _, tok := range tokens {
		e.up.Set(tok, upstreamtest.Behavior{ContextWindow: 100})
	}
}

// expectNobodyMarked checks that every account of e is as it was.
func expectNobodyMarked(t *testing.T, e *env) {
	t.Helper()
	for i, s := range e.sel.Status() {
		if s.State != "available" {
			t.Errorf("account %d is %q after a request over the context window", i+1, s.State)
		}
	}
}

func TestStreamOverTheContextWindowReachesTheClientAsSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}, {accounts.KindChatGPT, "c2"}})
	smallWindows(e, "c1", "c2")
	compatPrefer(e, 1)
	resp := e.do("POST", "/v1/responses", overWindow(true))
	body := readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	types := sseEvents(t, strings.NewReader(body))
	if strings.Join(types, ",") != "response.created,response.in_progress,response.failed" {
		t.Errorf("events %v", types)
	}
	if !strings.Contains(body, `"error":{"code":"context_length_exceeded","message":"`+contextMessage+`"}`) {
		t.Errorf("the failure is not the upstream's: %.600s", body)
	}
	e.expectCounts(map[string]int{"c1": 1, "c2": 0})
	expectNobodyMarked(t, e)
	if rec := waitUsage(t, e, 1)[0]; rec.Status != 200 || rec.Code != "context_length_exceeded" || rec.AccountID != e.id(1) {
		t.Errorf("usage record %+v", rec)
	}
}

func TestAnswerOverTheContextWindowIsA400(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, path, body string }{
		{"one Response object", "/v1/responses", overWindow(false)},
		{"chat completion", "/v1/chat/completions", `{"model":"gpt-5","messages":[{"role":"user","content":"` + strings.Repeat("w", 1000) + `"}]}`},
		{"chat stream", "/v1/chat/completions", `{"model":"gpt-5","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("w", 1000) + `"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}, {accounts.KindChatGPT, "c2"}})
			smallWindows(e, "c1", "c2")
			compatPrefer(e, 1)
			resp := e.do("POST", tc.path, tc.body)
			if resp.StatusCode != 400 {
				t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
			}
			got := decodeError(t, resp)
			if got.Code != "context_length_exceeded" || got.Type != "invalid_request_error" || got.Message != contextMessage || got.Retryable {
				t.Errorf("error %+v", got)
			}
			e.expectCounts(map[string]int{"c1": 1, "c2": 0})
			expectNobodyMarked(t, e)
		})
	}
}

func TestAPIKeyOverTheContextWindowIsA400(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoAPIKeys())
	smallWindows(e, "bad", "good")
	e.prefer(1)
	resp := e.do("POST", "/v1/responses", overWindow(true))
	if resp.StatusCode != 400 {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
	}
	if got := decodeError(t, resp); got.Code != "context_length_exceeded" || got.Message != contextMessage {
		t.Errorf("error %+v", got)
	}
	e.expectCounts(map[string]int{"bad": 1, "good": 0})
	expectNobodyMarked(t, e)
}

func TestSocketOverTheContextWindowGetsTheFailedFrames(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}, {accounts.KindChatGPT, "c2"}})
	smallWindows(e, "c1", "c2")
	compatPrefer(e, 1)
	c := e.openSocket()
	got := turn(t, c, `{"type":"response.create","model":"gpt-5","input":"`+strings.Repeat("w", 1000)+`"}`)
	if ty := types(got); strings.Join(ty, ",") != "response.created,response.in_progress,response.failed" {
		t.Fatalf("frames %v", ty)
	}
	if code := gjson.GetBytes(got[2].data, "response.error.code").Str; code != "context_length_exceeded" {
		t.Errorf("failed frame: %s", got[2].data)
	}
	if c1, c2 := len(framesUp(e.up, "c1")), len(framesUp(e.up, "c2")); c1 != 1 || c2 != 0 {
		t.Errorf("requests upstream: c1 %d, c2 %d; want 1, 0", c1, c2)
	}
	expectNobodyMarked(t, e)
	// The socket goes on: the next request is answered.
	if ty := types(turn(t, c, `{"type":"response.create","model":"gpt-5","input":"hi"}`)); ty[len(ty)-1] != "response.completed" {
		t.Errorf("next turn %v", ty)
	}
}

// A stream that fails with usage_not_included (Codex CLI reads it there
// too) is the plan lacking Codex: the next account is tried, and the
// first is not held as rate-limited.
func TestStreamFailedForThePlanMovesOnWithoutALimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}, {accounts.KindChatGPT, "c2"}})
	e.up.Set("c1", upstreamtest.Behavior{Stream: "failed_usage_not_included.sse"})
	compatPrefer(e, 1)
	resp := e.do("POST", "/v1/responses", streamBody)
	body := readAll(t, resp)
	if types := sseEvents(t, strings.NewReader(body)); resp.StatusCode != 200 || types[len(types)-1] != "response.completed" {
		t.Fatalf("status %d, events %v", resp.StatusCode, types)
	}
	e.expectCounts(map[string]int{"c1": 1, "c2": 1})
	if s := e.sel.Status()[0]; s.State != "available" {
		t.Errorf("account 1 is %q: a plan without Codex is no limit to wait out", s.State)
	}

	// Alone, it is the entitlement error.
	solo := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}})
	solo.up.Set("c1", upstreamtest.Behavior{Stream: "failed_usage_not_included.sse"})
	resp = solo.do("POST", "/v1/responses", streamBody)
	if got := decodeError(t, resp); resp.StatusCode != 403 || got.Code != "entitlement_error" {
		t.Errorf("alone: %d %+v", resp.StatusCode, got)
	}
}
