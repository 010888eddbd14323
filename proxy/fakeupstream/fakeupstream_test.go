package fakeupstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const testdata = "../../testdata"

// start runs a fake on a free loopback port for the test's lifetime and
// returns it with a client that does not share connections with other tests.
func start(t *testing.T) (*Server, *http.Client) {
	t.Helper()
	s := New(testdata)
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if n := s.Open(); n != 0 {
			t.Errorf("Open() after Close = %d, want 0", n)
		}
	})
	return s, &http.Client{Transport: tr}
}

func do(t *testing.T, ctx context.Context, c *http.Client, method, url, token, body string) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

type sseEvent struct{ typ, data string }

// readEvent reads one event ("event:"/"data:" lines up to a blank line).
func readEvent(br *bufio.Reader) (sseEvent, error) {
	var ev sseEvent
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if ev.typ != "" || ev.data != "" {
				return ev, nil
			}
			continue
		}
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			ev.typ = v
		} else if v, ok := strings.CutPrefix(line, "data: "); ok {
			ev.data = v
		}
	}
}

// waitOpen polls Open() until it is want, for at most 2 s.
func waitOpen(t *testing.T, s *Server, want int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for s.Open() != want {
		if time.Now().After(deadline) {
			t.Fatalf("Open() = %d after 2s, want %d", s.Open(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readBody(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestStreamArrivesEventByEvent(t *testing.T) {
	s, c := start(t)
	s.Set("tok", Behavior{EventDelay: 100 * time.Millisecond, Headers: map[string]string{"x-codex-primary-used-percent": "12.5"}})

	begin := time.Now()
	resp := do(t, t.Context(), c, "POST", s.OpenAIBase()+"/responses", "tok", `{"model":"gpt-test","stream":true,"input":"hi"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content-type %q", ct)
	}
	if id := resp.Header.Get("x-request-id"); !strings.HasPrefix(id, "req_") {
		t.Errorf("x-request-id %q", id)
	}
	if v := resp.Header.Get("x-codex-primary-used-percent"); v != "12.5" {
		t.Errorf("behavior header = %q", v)
	}
	br := bufio.NewReader(resp.Body)
	var events []sseEvent
	var firstAt, lastAt time.Duration
	for {
		ev, err := readEvent(br)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(events) == 0 {
			firstAt = time.Since(begin)
		}
		lastAt = time.Since(begin)
		events = append(events, ev)
	}
	if len(events) != 14 {
		t.Fatalf("got %d events, want 14", len(events))
	}
	// 13 delays of 100 ms separate the first event from the last: the first
	// must have been read long before the last was even sent.
	if gap := lastAt - firstAt; gap < time.Second {
		t.Errorf("first event at %v, last at %v: not streamed event by event", firstAt, lastAt)
	}
	if events[0].typ != "response.created" || events[13].typ != "response.completed" {
		t.Errorf("first/last events %q/%q", events[0].typ, events[13].typ)
	}
	var text strings.Builder
	for _, ev := range events {
		if ev.typ == "response.output_text.delta" {
			var d struct{ Delta string }
			if err := json.Unmarshal([]byte(ev.data), &d); err != nil {
				t.Fatal(err)
			}
			text.WriteString(d.Delta)
		}
	}
	if text.String() != "Hello from the fake upstream." {
		t.Errorf("deltas make %q", text.String())
	}
	var done struct {
		Response struct {
			Model string
			Usage struct {
				TotalTokens int `json:"total_tokens"`
			}
		}
	}
	if err := json.Unmarshal([]byte(events[13].data), &done); err != nil {
		t.Fatal(err)
	}
	if done.Response.Model != "gpt-test" {
		t.Errorf("model not echoed: %q", done.Response.Model)
	}
	if done.Response.Usage.TotalTokens == 0 {
		t.Error("completed event has no usage")
	}
}

func TestCodexRouteOnlyStreams(t *testing.T) {
	s, c := start(t)
	resp := do(t, t.Context(), c, "POST", s.ChatGPTBase()+"/codex/responses", "tok", `{"model":"gpt-5-codex","input":[]}`)
	if resp.StatusCode != 400 {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
	if b := readBody(t, resp); string(b) != `{"detail":"Stream must be set to true"}` {
		t.Errorf("body %s", b)
	}

	resp = do(t, t.Context(), c, "POST", s.ChatGPTBase()+"/codex/responses", "tok", `{"model":"gpt-5-codex","stream":true}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if b := readBody(t, resp); !bytes.Contains(b, []byte("event: response.completed\n")) {
		t.Errorf("stream has no response.completed:\n%s", b)
	}
}

func TestRateLimitsStreamPlaceholders(t *testing.T) {
	s, c := start(t)
	s.Set("tok", Behavior{Stream: "rate_limits_first.sse", ResetIn: 2 * time.Hour})
	now := time.Now().Unix()
	resp := do(t, t.Context(), c, "POST", s.ChatGPTBase()+"/codex/responses", "tok", `{"model":"gpt-5-codex","stream":true}`)
	ev, err := readEvent(bufio.NewReader(resp.Body))
	if err != nil {
		t.Fatal(err)
	}
	if ev.typ != "codex.rate_limits" {
		t.Fatalf("first event %q", ev.typ)
	}
	var rl struct {
		RateLimits struct {
			Primary struct {
				UsedPercent       float64 `json:"used_percent"`
				ResetAt           int64   `json:"reset_at"`
				ResetAfterSeconds int64   `json:"reset_after_seconds"`
			}
		} `json:"rate_limits"`
	}
	if err := json.Unmarshal([]byte(ev.data), &rl); err != nil {
		t.Fatalf("%v: %s", err, ev.data)
	}
	p := rl.RateLimits.Primary
	if p.ResetAfterSeconds != 7200 || p.ResetAt < now+7190 || p.ResetAt > now+7210 || p.UsedPercent == 0 {
		t.Errorf("primary window %+v (now %d)", p, now)
	}
}

func TestErrorFixtures(t *testing.T) {
	s, c := start(t)
	tests := []struct {
		status  int
		fixture string
		ctype   string
		want    string // substring of the body
	}{
		{429, "usage_limit_429.json", "application/json", `"type":"usage_limit_reached"`},
		{429, "rate_limit_exceeded_429.json", "application/json", `"code": "rate_limit_exceeded"`},
		{404, "usage_limit_404.json", "application/json", `"code":"usage_limit_reached"`},
		{404, "usage_not_included_404.json", "application/json", `usage_not_included`},
		{401, "unauthorized_401.json", "application/json", `token_expired`},
		{401, "token_invalidated_401.json", "application/json", `"code":"token_invalidated"`},
		{402, "deactivated_workspace_402.json", "application/json", `deactivated_workspace`},
		{403, "cloudflare_403.html", "text/html; charset=UTF-8", `<title>Just a moment...</title>`},
		{500, "server_error_500.json", "application/json", `"type": "server_error"`},
		{400, "bad_request_400.json", "application/json", `"param": "temperature"`},
		{400, "stream_required_400.json", "application/json", `Stream must be set to true`},
	}
	for i, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			tok := "tok" + strconv.Itoa(i)
			s.Set(tok, Behavior{
				Status: tc.status, ErrorFixture: tc.fixture, ResetIn: 90 * time.Second,
				Headers: map[string]string{"retry-after": "{{RESETS_IN}}"},
			})
			now := time.Now().Unix()
			for _, url := range []string{s.ChatGPTBase() + "/codex/responses", s.OpenAIBase() + "/responses"} {
				resp := do(t, t.Context(), c, "POST", url, tok, `{"model":"gpt-5","stream":true}`)
				body := readBody(t, resp)
				if resp.StatusCode != tc.status {
					t.Errorf("%s: status %d, want %d", url, resp.StatusCode, tc.status)
				}
				if ct := resp.Header.Get("Content-Type"); ct != tc.ctype {
					t.Errorf("%s: content-type %q, want %q", url, ct, tc.ctype)
				}
				if !strings.HasPrefix(resp.Header.Get("x-request-id"), "req_") {
					t.Errorf("no x-request-id")
				}
				if ra := resp.Header.Get("retry-after"); ra != "90" {
					t.Errorf("retry-after %q, want 90", ra)
				}
				if !bytes.Contains(body, []byte(tc.want)) {
					t.Errorf("body lacks %s:\n%s", tc.want, body)
				}
				if bytes.Contains(body, []byte("{{")) {
					t.Errorf("placeholder left in body:\n%s", body)
				}
				if strings.HasSuffix(tc.fixture, ".html") {
					if resp.Header.Get("cf-mitigated") != "challenge" {
						t.Errorf("cloudflare page without cf-mitigated: challenge")
					}
					continue
				}
				var v map[string]any
				if err := json.Unmarshal(body, &v); err != nil {
					t.Errorf("body is not JSON: %v\n%s", err, body)
				}
				if e, ok := v["error"].(map[string]any); ok && e["resets_at"] != nil {
					at, in := e["resets_at"].(float64), e["resets_in_seconds"].(float64)
					if in != 90 || int64(at) < now+85 || int64(at) > now+95 {
						t.Errorf("resets_at %v resets_in_seconds %v (now %d)", at, in, now)
					}
				}
			}
		})
	}
}

func TestDefaultErrorFixture(t *testing.T) {
	s, c := start(t)
	s.SetDefault(Behavior{Status: 429})
	resp := do(t, t.Context(), c, "POST", s.OpenAIBase()+"/responses", "any", `{}`)
	if b := readBody(t, resp); resp.StatusCode != 429 || !bytes.Contains(b, []byte("usage_limit_reached")) {
		t.Errorf("status %d body %s", resp.StatusCode, b)
	}
	s.Set("good", Behavior{})
	resp = do(t, t.Context(), c, "POST", s.OpenAIBase()+"/responses", "good", `{}`)
	if resp.StatusCode != 200 {
		t.Errorf("explicit success behaviour: status %d", resp.StatusCode)
	}
}

func TestStallKeepsConnectionOpenUntilClientLeaves(t *testing.T) {
	s, c := start(t)
	s.Set("tok", Behavior{StallAfter: 3})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp := do(t, ctx, c, "POST", s.ChatGPTBase()+"/codex/responses", "tok", `{"stream":true}`)
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		if _, err := readEvent(br); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	next := make(chan error, 1)
	go func() {
		_, err := readEvent(br)
		next <- err
	}()
	select {
	case err := <-next:
		t.Fatalf("stalled stream went on: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if n := s.Open(); n != 1 {
		t.Errorf("Open() during stall = %d, want 1", n)
	}
	cancel() // the client goes away
	if err := <-next; err == nil {
		t.Error("read after cancel succeeded")
	}
	waitOpen(t, s, 0)
}

func TestResetAbortsMidStream(t *testing.T) {
	s, c := start(t)
	s.Set("tok", Behavior{ResetAfter: 4})
	resp := do(t, t.Context(), c, "POST", s.OpenAIBase()+"/responses", "tok", `{"stream":true}`)
	br := bufio.NewReader(resp.Body)
	got := 0
	var err error
	for {
		if _, err = readEvent(br); err != nil {
			break
		}
		got++
	}
	if got != 4 {
		t.Errorf("got %d events before the reset, want 4", got)
	}
	if errors.Is(err, io.EOF) {
		t.Errorf("stream ended cleanly (%v), want an abort", err)
	}
	t.Logf("stream ended with: %v", err)
	waitOpen(t, s, 0)
}

func TestHangHeadersUntilClientLeaves(t *testing.T) {
	s, c := start(t)
	s.Set("tok", Behavior{HangHeaders: true})
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", s.OpenAIBase()+"/responses", strings.NewReader(`{"stream":true}`))
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got a response (%d) from a hung upstream", resp.StatusCode)
	}
	waitOpen(t, s, 0)
}

func TestNonStreamAssembled(t *testing.T) {
	s, c := start(t)
	resp := do(t, t.Context(), c, "POST", s.OpenAIBase()+"/responses", "tok", `{"model":"gpt-5-mini","input":"hi"}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var r struct {
		ID, Object, Status, Model string
		Output                    []struct {
			Type    string
			Content []struct{ Type, Text string }
		}
		Usage struct {
			InputTokens        int `json:"input_tokens"`
			InputTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"input_tokens_details"`
			OutputTokens        int `json:"output_tokens"`
			OutputTokensDetails struct {
				ReasoningTokens *int `json:"reasoning_tokens"`
			} `json:"output_tokens_details"`
			TotalTokens int `json:"total_tokens"`
		}
	}
	if err := json.Unmarshal(readBody(t, resp), &r); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.ID, "resp_") || r.Object != "response" || r.Status != "completed" || r.Model != "gpt-5-mini" {
		t.Errorf("envelope %q %q %q %q", r.ID, r.Object, r.Status, r.Model)
	}
	if len(r.Output) != 1 || r.Output[0].Type != "message" || len(r.Output[0].Content) != 1 ||
		r.Output[0].Content[0].Text != "Hello from the fake upstream." {
		t.Errorf("output %+v", r.Output)
	}
	u := r.Usage
	if u.InputTokens == 0 || u.InputTokensDetails.CachedTokens == 0 || u.OutputTokens == 0 ||
		u.OutputTokensDetails.ReasoningTokens == nil || u.TotalTokens != u.InputTokens+u.OutputTokens {
		t.Errorf("usage %+v", u)
	}

	s.Set("tool", Behavior{Stream: "tool_call.sse"})
	resp = do(t, t.Context(), c, "POST", s.OpenAIBase()+"/responses", "tool", `{"model":"gpt-5","stream":false}`)
	var tr struct {
		Output []struct {
			Type, Name, Arguments string
			CallID                string `json:"call_id"`
		}
	}
	body := readBody(t, resp)
	if err := json.Unmarshal(body, &tr); err != nil {
		t.Fatal(err)
	}
	if len(tr.Output) != 1 || tr.Output[0].Type != "function_call" || tr.Output[0].Arguments != `{"city":"Paris"}` ||
		tr.Output[0].Name != "get_weather" || tr.Output[0].CallID != "call_123" {
		t.Errorf("tool output %s", body)
	}
}

func TestNonStreamFailedIsAnError(t *testing.T) {
	s, c := start(t)
	s.Set("tok", Behavior{Stream: "failed_overloaded.sse"})
	resp := do(t, t.Context(), c, "POST", s.OpenAIBase()+"/responses", "tok", `{"model":"gpt-5"}`)
	body := readBody(t, resp)
	if resp.StatusCode != 503 || !bytes.Contains(body, []byte(`"code":"server_is_overloaded"`)) {
		t.Errorf("status %d body %s", resp.StatusCode, body)
	}
}

func TestFailedStream(t *testing.T) {
	s, c := start(t)
	s.Set("tok", Behavior{Stream: "failed_overloaded.sse"})
	resp := do(t, t.Context(), c, "POST", s.ChatGPTBase()+"/codex/responses", "tok", `{"stream":true}`)
	br := bufio.NewReader(resp.Body)
	var types []string
	var last sseEvent
	for {
		ev, err := readEvent(br)
		if err != nil {
			break
		}
		types = append(types, ev.typ)
		last = ev
	}
	if strings.Join(types, ",") != "response.created,response.in_progress,response.failed" {
		t.Fatalf("events %v", types)
	}
	if !strings.Contains(last.data, `"code":"server_is_overloaded"`) || !strings.Contains(last.data, `"output":[]`) {
		t.Errorf("failed event %s", last.data)
	}
}

func TestAuthRoutesAndRecording(t *testing.T) {
	s, c := start(t)

	resp := do(t, t.Context(), c, "POST", s.OpenAIBase()+"/responses?x=1", "", `{"stream":true}`)
	if resp.StatusCode != 401 {
		t.Errorf("no bearer: status %d", resp.StatusCode)
	}
	resp = do(t, t.Context(), c, "GET", s.OpenAIBase()+"/models", "k1", "")
	if b := readBody(t, resp); resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"object":"list"`)) {
		t.Errorf("/v1/models %d %s", resp.StatusCode, b)
	}
	resp = do(t, t.Context(), c, "GET", s.ChatGPTBase()+"/codex/models?client_version=0.99.0", "k1", "")
	var cm struct{ Models []struct{ Slug string } }
	if err := json.Unmarshal(readBody(t, resp), &cm); err != nil || resp.StatusCode != 200 || len(cm.Models) == 0 {
		t.Errorf("codex models %d %v %+v", resp.StatusCode, err, cm)
	}
	for _, url := range []string{s.OpenAIBase() + "/responses/compact", s.ChatGPTBase() + "/codex/responses/compact"} {
		resp = do(t, t.Context(), c, "POST", url, "k2", `{"model":"gpt-5","input":[]}`)
		var cp struct {
			Object string
			Output []struct{ Type string }
		}
		if err := json.Unmarshal(readBody(t, resp), &cp); err != nil || resp.StatusCode != 200 ||
			cp.Object != "response.compaction" || len(cp.Output) == 0 || cp.Output[len(cp.Output)-1].Type != "compaction" {
			t.Errorf("%s: %d %v %+v", url, resp.StatusCode, err, cp)
		}
	}
	resp = do(t, t.Context(), c, "GET", s.OpenAIBase()+"/nope", "k1", "")
	if resp.StatusCode != 404 {
		t.Errorf("unknown route: %d", resp.StatusCode)
	}
	resp = do(t, t.Context(), c, "GET", s.OpenAIBase()+"/responses", "k1", "")
	if resp.StatusCode != 404 {
		t.Errorf("wrong method: %d", resp.StatusCode)
	}

	if got := s.Count(""); got != 1 {
		t.Errorf("Count(\"\") = %d", got)
	}
	if got := s.Count("k1"); got != 4 {
		t.Errorf("Count(k1) = %d", got)
	}
	if got := s.Count("k2"); got != 2 {
		t.Errorf("Count(k2) = %d", got)
	}
	reqs := s.Requests()
	if len(reqs) != 7 {
		t.Fatalf("%d recorded requests", len(reqs))
	}
	first := reqs[0]
	if first.Method != "POST" || first.Path != "/v1/responses" || first.RawQuery != "x=1" ||
		string(first.Body) != `{"stream":true}` || first.Token != "" || first.Header.Get("Content-Type") != "application/json" {
		t.Errorf("first recorded %+v", first)
	}
	reqs[0].Body[0] = 'X' // copies: must not change the server's record
	if s.Requests()[0].Body[0] != '{' {
		t.Error("Requests returned shared memory")
	}
}

func TestRecordedRingIsBounded(t *testing.T) {
	s := New(testdata)
	for i := range maxRecorded + 5 {
		s.record(Recorded{Path: fmt.Sprint(i), Token: "t"})
	}
	reqs := s.Requests()
	if len(reqs) != maxRecorded || reqs[0].Path != "5" || reqs[maxRecorded-1].Path != fmt.Sprint(maxRecorded+4) {
		t.Errorf("ring: len %d first %s last %s", len(reqs), reqs[0].Path, reqs[len(reqs)-1].Path)
	}
	if s.Count("t") != maxRecorded+5 {
		t.Errorf("Count = %d", s.Count("t"))
	}
}

func TestCloseEndsStalledRequests(t *testing.T) {
	s := New(testdata)
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	s.Set("tok", Behavior{StallAfter: 1})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("POST", s.ChatGPTBase()+"/codex/responses", strings.NewReader(`{"stream":true}`))
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := readEvent(bufio.NewReader(resp.Body)); err != nil {
		t.Fatal(err)
	}
	waitOpen(t, s, 1)
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("Close did not end the stalled request")
	}
	if s.Open() != 0 {
		t.Errorf("Open() = %d after Close", s.Open())
	}
	if err := s.Start("127.0.0.1:0"); err == nil {
		t.Error("Start after Close succeeded")
	}
}

// TestFixturesAreWellFormed checks every fixture the way a strict client
// would, so a hand edit that breaks the wire format fails here first.
func TestFixturesAreWellFormed(t *testing.T) {
	fill := newFiller(time.Now(), time.Minute)
	files, _ := filepath.Glob(filepath.Join(testdata, "sse", "*.sse"))
	if len(files) < 4 {
		t.Fatalf("found %d SSE fixtures", len(files))
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fx, err := parseSSE(fill.bytes(raw))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !bytes.HasSuffix(raw, []byte("\n\n")) {
			t.Errorf("%s: does not end with a blank line", f)
		}
		seq := 0
		for i, ev := range fx.events {
			if !bytes.HasPrefix(ev.data, []byte(`{"type":"`+ev.typ+`"`)) {
				t.Errorf("%s event %d: data does not start with its type %q: %.80s", f, i, ev.typ, ev.data)
			}
			var v struct {
				SequenceNumber *int `json:"sequence_number"`
			}
			if err := json.Unmarshal(ev.data, &v); err != nil {
				t.Errorf("%s event %d: %v", f, i, err)
				continue
			}
			if strings.HasPrefix(ev.typ, "response.") {
				if v.SequenceNumber == nil || *v.SequenceNumber != seq {
					t.Errorf("%s event %d (%s): sequence_number %v, want %d", f, i, ev.typ, v.SequenceNumber, seq)
				}
				seq++
			}
		}
		// Every stream ends with a final event (response.incomplete is a
		// final one: max_output_tokens); truncated_* fixtures end early on
		// purpose (a broken upstream).
		last := fx.events[len(fx.events)-1].typ
		if !strings.HasPrefix(filepath.Base(f), "truncated_") && last != "response.completed" && last != "response.incomplete" && last != "response.failed" {
			t.Errorf("%s: ends with %s", f, last)
		}
	}
	errs, _ := filepath.Glob(filepath.Join(testdata, "errors", "*.json"))
	if len(errs) < 10 {
		t.Fatalf("found %d error fixtures", len(errs))
	}
	for _, f := range errs {
		raw, _ := os.ReadFile(f)
		if !json.Valid(fill.bytes(raw)) {
			t.Errorf("%s: not JSON once filled", f)
		}
	}
}

func TestNonStreamFaults(t *testing.T) {
	s, c := start(t)
	s.Set("reset", Behavior{ResetAfter: 2})
	s.Set("stall", Behavior{StallAfter: 2})
	s.Set("slow", Behavior{EventDelay: 20 * time.Millisecond})

	req, _ := http.NewRequestWithContext(t.Context(), "POST", s.OpenAIBase()+"/responses", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer reset")
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("reset: got status %d, want a transport error", resp.StatusCode)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, "POST", s.OpenAIBase()+"/responses", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer stall")
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("stall: got status %d, want a timeout", resp.StatusCode)
	}

	begin := time.Now()
	resp := do(t, t.Context(), c, "POST", s.OpenAIBase()+"/responses", "slow", `{}`)
	readBody(t, resp)
	if took := time.Since(begin); resp.StatusCode != 200 || took < 13*20*time.Millisecond {
		t.Errorf("slow: status %d after %v, want 200 after at least 260ms", resp.StatusCode, took)
	}
	waitOpen(t, s, 0)
}

func TestChatCompletionsRoute(t *testing.T) {
	s, c := start(t)
	ctx := context.Background()
	base := s.OpenAIBase() + "/chat/completions"
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	// Streamed: the recorded chunks, model echoed, usage only when asked.
	body := string(readBody(t, do(t, ctx, c, "POST", base, "k", `{"model":"gpt-x","stream":true,`+msgs+`}`)))
	if !strings.HasSuffix(body, "data: [DONE]\n\n") || strings.Contains(body, `"usage":{`) ||
		!strings.Contains(body, `"model":"gpt-x"`) || strings.Contains(body, "gpt-5-2025-08-07") {
		t.Errorf("stream without usage: %s", body)
	}
	body = string(readBody(t, do(t, ctx, c, "POST", base, "k", `{"model":"gpt-x","stream":true,"stream_options":{"include_usage":true},`+msgs+`}`)))
	if !strings.Contains(body, `"choices":[],"usage":{"prompt_tokens":1280`) {
		t.Errorf("stream with usage: %s", body)
	}
	// Not streamed: one chat.completion.
	body = string(readBody(t, do(t, ctx, c, "POST", base, "k", `{"model":"gpt-x",`+msgs+`}`)))
	if !strings.HasPrefix(body, `{"id":"chatcmpl-`) || !strings.Contains(body, `"content":"Hello from the fake upstream."`) {
		t.Errorf("completion: %s", body)
	}
}

func TestToolRoundTrip(t *testing.T) {
	s, c := start(t)
	s.SetDefault(Behavior{ToolRoundTrip: true})
	ctx := context.Background()
	for _, tc := range []struct{ url, first, then, wantCall, wantText string }{
		{s.OpenAIBase() + "/chat/completions",
			`{"model":"m","messages":[{"role":"user","content":"w?"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"w?"},{"role":"assistant","tool_calls":[]},{"role":"tool","tool_call_id":"call_123","content":"18C"}]}`,
			`"name":"get_weather"`, `Hello from the fake upstream.`},
		{s.ChatGPTBase() + "/codex/responses",
			`{"model":"m","stream":true,"input":[{"type":"message","role":"user","content":"w?"}]}`,
			`{"model":"m","stream":true,"input":[{"type":"function_call","call_id":"call_123"},{"type":"function_call_output","call_id":"call_123","output":"18C"}]}`,
			`"name":"get_weather"`, `"delta":"Hello"`},
	} {
		if b := string(readBody(t, do(t, ctx, c, "POST", tc.url, "k", tc.first))); !strings.Contains(b, tc.wantCall) {
			t.Errorf("%s first turn: %.300s", tc.url, b)
		}
		if b := string(readBody(t, do(t, ctx, c, "POST", tc.url, "k", tc.then))); !strings.Contains(b, tc.wantText) || strings.Contains(b, tc.wantCall) {
			t.Errorf("%s after the tool result: %.300s", tc.url, b)
		}
	}
}

func TestHeaderDelay(t *testing.T) {
	s, c := start(t)
	s.SetDefault(Behavior{HeaderDelay: 300 * time.Millisecond})
	began := time.Now()
	resp := do(t, context.Background(), c, "POST", s.OpenAIBase()+"/responses", "k", `{"model":"m","stream":true}`)
	if d := time.Since(began); d < 250*time.Millisecond || resp.StatusCode != 200 {
		t.Errorf("headers after %s, status %d", d, resp.StatusCode)
	}
	readBody(t, resp)
}
