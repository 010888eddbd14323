package upstreamtest

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
// doAndGiveUp sends req and gives up once the fake has received it (its
// Count for token grew), as a client whose patience ran out. A fixed
// timeout could run out before the request was sent on a busy machine.
func doAndGiveUp(s *Server, c *http.Client, req *http.Request, token string) (*http.Response, error) {
	before := s.Count(token)
	ctx, cancel := context.WithCancel(req.Context())
	defer cancel()
	go func() {
		defer cancel()
		giveUp := time.After(10 * time.Second) // never received: give up anyway
		for s.Count(token) == before {
			select {
			case <-ctx.Done():
			case <-giveUp:
			case <-time.After(5 * time.Millisecond):
				continue
			}
			return
		}
	}()
	return c.Do(req.WithContext(ctx))
}

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
	// must have been read long before the last was even sent (half of them
	// leaves room for a reader the machine's load holds up).
	if gap := lastAt - firstAt; gap < 650*time.Millisecond {
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
	s, c := start(t)
	s.Set("tok", Behavior{HangHeaders: true})
	req, _ := http.NewRequestWithContext(t.Context(), "POST", s.OpenAIBase()+"/responses", strings.NewReader(`{"stream":true}`))
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := doAndGiveUp(s, c, req, "tok")
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got a response (%d) from a hung upstream", resp.StatusCode)
	}
	waitOpen(t, s, 0)
}

func TestNonStreamAssembled(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	s, c := start(t)
	s.Set("tok", Behavior{Stream: "failed_overloaded.sse"})
	resp := do(t, t.Context(), c, "POST", s.OpenAIBase()+"/responses", "tok", `{"model":"gpt-5"}`)
	body := readBody(t, resp)
	if resp.StatusCode != 503 || !bytes.Contains(body, []byte(`"code":"server_is_overloaded"`)) {
		t.Errorf("status %d body %s", resp.StatusCode, body)
	}
}

func TestFailedStream(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	// The stream breaks off: it must not look like a complete answer.
	if rest, err := io.ReadAll(resp.Body); err == nil {
		t.Errorf("the stalled stream ended cleanly on Close (%q), want it cut", rest)
	}
	if err := s.Start("127.0.0.1:0"); err == nil {
		t.Error("Start after Close succeeded")
	}
}

// TestFixturesAreWellFormed checks every fixture the way a strict client
// would, so a hand edit that breaks the wire format fails here first.
func TestFixturesAreWellFormed(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

	req, _ = http.NewRequestWithContext(t.Context(), "POST", s.OpenAIBase()+"/responses", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer stall")
	if resp, err := doAndGiveUp(s, c, req, "stall"); err == nil {
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

// recordedModel is the model every success fixture was recorded with; the
// fake replaces it with the requested one.
const recordedModel = "gpt-5-2025-08-07"

// helloText is the answer of the hello fixtures, Responses and Chat alike;
// the end-to-end tests look for exactly this text.
const helloText = "Hello from the fake upstream."

// served is what the fake must send for the fixture testdata/name when asked
// for model ("" keeps the recorded one).
func served(t *testing.T, name, model string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testdata, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	if model == "" {
		return string(raw)
	}
	return strings.ReplaceAll(string(raw), `"model":"`+recordedModel+`"`, `"model":"`+model+`"`)
}

// chatBody is a Chat Completions request for model with extra top-level
// fields (each `"key":value`).
func chatBody(model string, fields ...string) string {
	parts := []string{`"model":"` + model + `"`, `"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Say hello"}]`}
	if model == "" {
		parts = parts[1:]
	}
	return "{" + strings.Join(append(parts, fields...), ",") + "}"
}

// chatAfterTool is a Chat Completions request whose last message is the
// tool's result, as a client sends it after running the tool.
const chatAfterTool = `{"model":"gpt-x","messages":[{"role":"user","content":"Weather in Paris?"},` +
	`{"role":"assistant","content":null,"tool_calls":[{"id":"call_123","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
	`{"role":"tool","tool_call_id":"call_123","content":"{\"temperature_c\":18}"}]}`

func TestChatCompletionsServesFixtures(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	s.Set("tool", Behavior{ChatStream: "tool_call.sse"})
	url := s.OpenAIBase() + "/chat/completions"
	stream, usage, noUsage := `"stream":true`, `"stream_options":{"include_usage":true}`, `"stream_options":{"include_usage":false}`
	for _, tc := range []struct {
		name, token, body, want, model, ctype string
	}{
		{"stream", "k", chatBody("gpt-x", stream), "chat/hello.sse", "gpt-x", "text/event-stream"},
		{"stream with usage", "k", chatBody("gpt-x", stream, usage), "chat/hello_usage.sse", "gpt-x", "text/event-stream"},
		{"stream, usage not asked for", "k", chatBody("gpt-x", stream, noUsage), "chat/hello.sse", "gpt-x", "text/event-stream"},
		{"object", "k", chatBody("gpt-x"), "chat/hello.json", "gpt-x", "application/json"},
		{"object, stream false", "k", chatBody("gpt-x", `"stream":false`), "chat/hello.json", "gpt-x", "application/json"},
		{"no model: the recorded one", "k", chatBody("", stream), "chat/hello.sse", "", "text/event-stream"},
		{"ChatStream", "tool", chatBody("gpt-x", stream), "chat/tool_call.sse", "gpt-x", "text/event-stream"},
		{"ChatStream with usage", "tool", chatBody("gpt-x", stream, usage), "chat/tool_call_usage.sse", "gpt-x", "text/event-stream"},
		{"ChatStream object", "tool", chatBody("gpt-x"), "chat/tool_call.json", "gpt-x", "application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !json.Valid([]byte(tc.body)) {
				t.Fatalf("the test's request is not JSON: %s", tc.body)
			}
			resp := do(t, t.Context(), c, "POST", url, tc.token, tc.body)
			got := string(readBody(t, resp))
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != tc.ctype {
				t.Fatalf("status %d content-type %q, want 200 %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), tc.ctype, got)
			}
			if want := served(t, tc.want, tc.model); got != want {
				t.Errorf("served:\n%s\nwant %s exactly:\n%s", got, tc.want, want)
			}
			if tc.model != "" && strings.Contains(got, recordedModel) {
				t.Errorf("the recorded model is left in the answer")
			}
		})
	}

	// The route is POST only, and a ChatStream without its file says so.
	resp := do(t, t.Context(), c, "GET", url, "k", "")
	if b := readBody(t, resp); resp.StatusCode != 404 || string(b) != string(invalidURLBody("GET", "/v1/chat/completions")) {
		t.Errorf("GET: %d %s", resp.StatusCode, b)
	}
	s.Set("typo", Behavior{ChatStream: "nope.sse"})
	for _, body := range []string{chatBody("m", stream), chatBody("m", stream, usage), chatBody("m")} {
		resp = do(t, t.Context(), c, "POST", url, "typo", body)
		if b := readBody(t, resp); resp.StatusCode != 500 || !bytes.Contains(b, []byte("chat/nope")) {
			t.Errorf("missing ChatStream fixture: %d %s", resp.StatusCode, b)
		}
	}
}

// readRaw reads the next events events of a stream and returns their bytes
// as sent, with the error that cut them short.
func readRaw(br *bufio.Reader, events int) (string, error) {
	var sb strings.Builder
	for range events {
		for {
			line, err := br.ReadString('\n')
			sb.WriteString(line)
			if err != nil {
				return sb.String(), err
			}
			if line == "\n" {
				break
			}
		}
	}
	return sb.String(), nil
}

func TestChatCompletionsStreamFaults(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	url := s.OpenAIBase() + "/chat/completions"
	body := chatBody("gpt-x", `"stream":true`)
	want := served(t, "chat/hello.sse", "gpt-x")
	events := strings.SplitAfter(want, "\n\n")
	events = events[:len(events)-1] // after the last separator: ""
	if len(events) != 9 {
		t.Fatalf("chat/hello.sse has %d events, the test expects 9", len(events))
	}

	t.Run("EventDelay", func(t *testing.T) {
		// The first chunk comes at once, the next only after the delay: a
		// delay far longer than the test shows the chunks are not batched.
		s.Set("slow", Behavior{EventDelay: time.Hour})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		resp := do(t, ctx, c, "POST", url, "slow", body)
		br := bufio.NewReader(resp.Body)
		first := make(chan string, 1)
		go func() {
			got, _ := readRaw(br, 1)
			first <- got
		}()
		select {
		case got := <-first:
			if got != events[0] {
				t.Errorf("first chunk %q, want %q", got, events[0])
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the first chunk did not come within 5s")
		}
		if n := s.Open(); n != 1 {
			t.Errorf("Open() while delaying = %d, want 1", n)
		}
		cancel()
		waitOpen(t, s, 0)
	})

	t.Run("StallAfter", func(t *testing.T) {
		for _, after := range []int{3, 100} {
			s.Set("stall", Behavior{StallAfter: after})
			ctx, cancel := context.WithCancel(t.Context())
			resp := do(t, ctx, c, "POST", url, "stall", body)
			br := bufio.NewReader(resp.Body)
			n := min(after, len(events))
			got, err := readRaw(br, n)
			if err != nil || got != strings.Join(events[:n], "") {
				t.Fatalf("StallAfter %d: %v\n%s", after, err, got)
			}
			next := make(chan error, 1)
			go func() {
				_, err := br.ReadByte()
				next <- err
			}()
			select {
			case err := <-next:
				t.Fatalf("StallAfter %d: the stream went on after %d events (%v)", after, n, err)
			case <-time.After(200 * time.Millisecond):
			}
			cancel()
			<-next // the read ends with the connection
			waitOpen(t, s, 0)
		}
	})

	t.Run("ResetAfter", func(t *testing.T) {
		for _, after := range []int{4, 100} {
			s.Set("reset", Behavior{ResetAfter: after})
			resp := do(t, t.Context(), c, "POST", url, "reset", body)
			got, err := io.ReadAll(resp.Body)
			n := min(after, len(events))
			if string(got) != strings.Join(events[:n], "") {
				t.Errorf("ResetAfter %d: got before the reset:\n%s", after, got)
			}
			if err == nil {
				t.Errorf("ResetAfter %d: the stream ended cleanly, want a reset", after)
			}
			waitOpen(t, s, 0)
		}
	})

	t.Run("HangHeaders", func(t *testing.T) {
		s.Set("hang", Behavior{HangHeaders: true})
		req, _ := http.NewRequestWithContext(t.Context(), "POST", url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer hang")
		if resp, err := doAndGiveUp(s, c, req, "hang"); err == nil {
			resp.Body.Close()
			t.Fatalf("got a response (%d) from a hung upstream", resp.StatusCode)
		}
		waitOpen(t, s, 0)
	})

	t.Run("Status", func(t *testing.T) {
		s.Set("err", Behavior{Status: 500})
		for _, b := range []string{body, chatBody("gpt-x")} {
			resp := do(t, t.Context(), c, "POST", url, "err", b)
			got := readBody(t, resp)
			if resp.StatusCode != 500 || resp.Header.Get("Content-Type") != "application/json" ||
				string(got) != served(t, "errors/server_error_500.json", "") {
				t.Errorf("status %d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), got)
			}
		}
	})
}

func TestChatCompletionsObjectFaults(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	url := s.OpenAIBase() + "/chat/completions"
	body := chatBody("gpt-x")

	s.Set("reset", Behavior{ResetAfter: 2})
	req, _ := http.NewRequestWithContext(t.Context(), "POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer reset")
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("reset: got status %d, want a transport error", resp.StatusCode)
	}

	s.Set("stall", Behavior{StallAfter: 2})
	req, _ = http.NewRequestWithContext(t.Context(), "POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer stall")
	if resp, err := doAndGiveUp(s, c, req, "stall"); err == nil {
		resp.Body.Close()
		t.Errorf("stall: got status %d, want a timeout", resp.StatusCode)
	}
	waitOpen(t, s, 0)

	// chat/hello.sse has 9 events: the object comes after the 8 delays the
	// stream would have taken.
	s.Set("slow", Behavior{EventDelay: 25 * time.Millisecond})
	begin := time.Now()
	resp := do(t, t.Context(), c, "POST", url, "slow", body)
	got := readBody(t, resp)
	if took := time.Since(begin); took < 8*25*time.Millisecond {
		t.Errorf("slow: answered after %v, want at least 200ms", took)
	}
	if resp.StatusCode != 200 || string(got) != served(t, "chat/hello.json", "gpt-x") {
		t.Errorf("slow: %d %s", resp.StatusCode, got)
	}
}

func TestToolRoundTrip(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	s.SetDefault(Behavior{ToolRoundTrip: true})
	s.Set("custom", Behavior{ToolRoundTrip: true, Stream: "reasoning_summary.sse", ChatStream: "hello.sse"})
	chat := s.OpenAIBase() + "/chat/completions"
	codex := s.ChatGPTBase() + "/codex/responses"
	responsesFirst := `{"model":"gpt-x","stream":true,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"Weather in Paris?"}]}]}`
	responsesAfterTool := `{"model":"gpt-x","stream":true,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"Weather in Paris?"}]},` +
		`{"type":"function_call","call_id":"call_123","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},` +
		`{"type":"function_call_output","call_id":"call_123","output":"{\"temperature_c\":18}"}]}`
	// A tool result earlier in the conversation, then a new user turn: the
	// model calls the tool again.
	chatNewTurn := strings.TrimSuffix(chatAfterTool, "]}") + `,{"role":"assistant","content":"18C"},{"role":"user","content":"And tomorrow?"}]}`
	for _, tc := range []struct {
		name, token, url, body, want string
	}{
		{"chat stream, first turn", "k", chat, chatBody("gpt-x", `"stream":true`), "chat/tool_call.sse"},
		{"chat stream, after the tool", "k", chat, strings.TrimSuffix(chatAfterTool, "}") + `,"stream":true}`, "chat/hello.sse"},
		{"chat stream with usage, first turn", "k", chat, chatBody("gpt-x", `"stream":true`, `"stream_options":{"include_usage":true}`), "chat/tool_call_usage.sse"},
		{"chat stream with usage, after the tool", "k", chat, strings.TrimSuffix(chatAfterTool, "}") + `,"stream":true,"stream_options":{"include_usage":true}}`, "chat/hello_usage.sse"},
		{"chat object, first turn", "k", chat, chatBody("gpt-x"), "chat/tool_call.json"},
		{"chat object, after the tool", "k", chat, chatAfterTool, "chat/hello.json"},
		{"chat object, a new turn", "k", chat, chatNewTurn, "chat/tool_call.json"},
		{"codex, first turn", "k", codex, responsesFirst, "sse/tool_call.sse"},
		{"codex, after the tool", "k", codex, responsesAfterTool, "sse/hello.sse"},
		{"codex, string input", "k", codex, `{"model":"gpt-x","stream":true,"input":"Weather in Paris?"}`, "sse/tool_call.sse"},
		{"responses, after the tool", "k", s.OpenAIBase() + "/responses", responsesAfterTool, "sse/hello.sse"},
		{"custom Stream after the tool", "custom", codex, responsesAfterTool, "sse/reasoning_summary.sse"},
		{"custom ChatStream after the tool", "custom", chat, chatAfterTool, "chat/hello.json"},
		{"custom, first turn", "custom", codex, responsesFirst, "sse/tool_call.sse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !json.Valid([]byte(tc.body)) {
				t.Fatalf("the test's request is not JSON: %s", tc.body)
			}
			resp := do(t, t.Context(), c, "POST", tc.url, tc.token, tc.body)
			got := string(readBody(t, resp))
			if want := served(t, tc.want, "gpt-x"); resp.StatusCode != 200 || got != want {
				t.Errorf("status %d, served:\n%s\nwant %s exactly:\n%s", resp.StatusCode, got, tc.want, want)
			}
		})
	}

	// Not streamed, on the Responses API: the function_call, then text.
	for _, tc := range []struct{ body, want string }{
		{strings.Replace(responsesFirst, `"stream":true`, `"stream":false`, 1), "function_call"},
		{strings.Replace(responsesAfterTool, `"stream":true`, `"stream":false`, 1), "message"},
	} {
		resp := do(t, t.Context(), c, "POST", s.OpenAIBase()+"/responses", "k", tc.body)
		var r struct {
			Output []struct{ Type, Name, CallID string }
		}
		if err := json.Unmarshal(readBody(t, resp), &r); err != nil || len(r.Output) != 1 || r.Output[0].Type != tc.want {
			t.Errorf("non-stream Responses: %v %+v, want one %s", err, r, tc.want)
		}
	}
}

func TestHeaderDelay(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	const delay = 300 * time.Millisecond

	// The answer comes, whole, after the delay: on every route, success or
	// error.
	s.Set("slow", Behavior{HeaderDelay: delay})
	s.Set("slow-err", Behavior{HeaderDelay: delay, Status: 500})
	for _, tc := range []struct {
		token, url, body, want string
		status                 int
	}{
		{"slow", s.OpenAIBase() + "/chat/completions", chatBody("gpt-x", `"stream":true`), "chat/hello.sse", 200},
		{"slow", s.OpenAIBase() + "/chat/completions", chatBody("gpt-x"), "chat/hello.json", 200},
		{"slow", s.ChatGPTBase() + "/codex/responses", `{"model":"gpt-x","stream":true}`, "sse/hello.sse", 200},
		{"slow", s.OpenAIBase() + "/responses", `{"model":"gpt-x","stream":true}`, "sse/hello.sse", 200},
		{"slow-err", s.OpenAIBase() + "/chat/completions", chatBody("gpt-x"), "errors/server_error_500.json", 500},
	} {
		began := time.Now()
		resp := do(t, t.Context(), c, "POST", tc.url, tc.token, tc.body)
		if d := time.Since(began); d < delay {
			t.Errorf("%s: headers after %v, want at least %v", tc.url, d, delay)
		}
		got := string(readBody(t, resp))
		if want := served(t, tc.want, "gpt-x"); resp.StatusCode != tc.status || got != want {
			t.Errorf("%s: status %d, served:\n%s\nwant %s", tc.url, resp.StatusCode, got, tc.want)
		}
	}

	// The wait is cancellable: a client that gives up ends the upstream
	// request, and so does Close.
	s.Set("stuck", Behavior{HeaderDelay: time.Hour})
	req, _ := http.NewRequestWithContext(t.Context(), "POST", s.OpenAIBase()+"/chat/completions", strings.NewReader(chatBody("gpt-x")))
	req.Header.Set("Authorization", "Bearer stuck")
	if resp, err := doAndGiveUp(s, c, req, "stuck"); err == nil {
		resp.Body.Close()
		t.Fatalf("got a response (%d) during an hour-long HeaderDelay", resp.StatusCode)
	}
	waitOpen(t, s, 0)
	if n := s.Count("stuck"); n != 1 {
		t.Errorf("Count(stuck) = %d: the delayed request must be recorded before the wait", n)
	}

	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("POST", s.ChatGPTBase()+"/codex/responses", strings.NewReader(`{"stream":true}`))
		req.Header.Set("Authorization", "Bearer stuck")
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("got a response (%d)", resp.StatusCode)
		} else {
			err = nil
		}
		errc <- err
	}()
	waitOpen(t, s, 1)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		t.Fatal("Close did not end a request waiting in HeaderDelay")
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("after Close: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the client did not see the connection end after Close")
	}
}

// TestChatFixturesAreWellFormed checks the Chat Completions fixtures the way
// a strict client would, and checks that each fixture set tells one story:
// the _usage stream is the plain one plus "usage":null on every chunk and
// the usage chunk, and the object says what the chunks add up to.
func TestChatFixturesAreWellFormed(t *testing.T) {
	t.Parallel()
	type chunk struct {
		ID, Object, Model string
		Created           int64
		SystemFingerprint *string `json:"system_fingerprint"`
		Usage             json.RawMessage
		Choices           []struct {
			Index int
			Delta struct {
				Role      *string
				Content   *string
				ToolCalls []struct {
					Index    int
					ID, Type string
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
			FinishReason *string `json:"finish_reason"`
		}
	}
	type completion struct {
		ID, Object, Model string
		Created           int64
		Choices           []struct {
			Message struct {
				Role      string
				Content   *string
				ToolCalls []struct {
					ID, Type string
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
			FinishReason string `json:"finish_reason"`
		}
		Usage json.RawMessage
	}
	// parse reads a stream fixture: every event a single data line, the
	// last one [DONE].
	parse := func(t *testing.T, name string) (chunks []chunk, raw []string) {
		t.Helper()
		body := served(t, name, "")
		if !strings.HasSuffix(body, "data: [DONE]\n\n") {
			t.Fatalf("%s does not end with data: [DONE] and a blank line", name)
		}
		events := strings.SplitAfter(body, "\n\n")
		events = events[:len(events)-2] // [DONE] and "" after it
		for i, ev := range events {
			data, ok := strings.CutPrefix(ev, "data: ")
			data = strings.TrimSuffix(data, "\n\n")
			if !ok || strings.Contains(data, "\n") {
				t.Fatalf("%s event %d is not one data line: %q", name, i, ev)
			}
			var c chunk
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				t.Fatalf("%s event %d: %v", name, i, err)
			}
			chunks = append(chunks, c)
			raw = append(raw, data)
		}
		return chunks, raw
	}

	for _, set := range []struct {
		base, text, finish string
		call               string // `name(arguments)` of the tool call, if any
	}{
		{"hello", helloText, "stop", ""},
		{"tool_call", "", "tool_calls", `get_weather({"city":"Paris"})`},
	} {
		t.Run(set.base, func(t *testing.T) {
			plain, plainRaw := parse(t, "chat/"+set.base+".sse")
			withUsage, usageRaw := parse(t, "chat/"+set.base+"_usage.sse")
			first := plain[0]
			if !strings.HasPrefix(first.ID, "chatcmpl-") || first.Model != recordedModel || first.Created == 0 {
				t.Errorf("first chunk: id %q model %q created %d", first.ID, first.Model, first.Created)
			}
			// The stream: one id, created and model; the role first; the text
			// or the call in pieces; one finish_reason, on the last chunk.
			var text, args strings.Builder
			var call string
			for i, c := range plain {
				if c.ID != first.ID || c.Created != first.Created || c.Model != first.Model || c.Object != "chat.completion.chunk" {
					t.Errorf("chunk %d: id %q created %d model %q object %q", i, c.ID, c.Created, c.Model, c.Object)
				}
				if c.Usage != nil {
					t.Errorf("chunk %d carries usage without include_usage: %s", i, plainRaw[i])
				}
				if len(c.Choices) != 1 {
					t.Fatalf("chunk %d has %d choices", i, len(c.Choices))
				}
				ch := c.Choices[0]
				if (ch.Delta.Role != nil) != (i == 0) || (ch.Delta.Role != nil && *ch.Delta.Role != "assistant") {
					t.Errorf("chunk %d: delta.role %v; want assistant on the first chunk only", i, ch.Delta.Role)
				}
				if (ch.FinishReason != nil) != (i == len(plain)-1) {
					t.Errorf("chunk %d: finish_reason %v; want one, on the last chunk", i, ch.FinishReason)
				}
				if ch.Delta.Content != nil {
					text.WriteString(*ch.Delta.Content)
				}
				for _, tc := range ch.Delta.ToolCalls {
					if tc.Index != 0 {
						t.Errorf("chunk %d: tool call index %d", i, tc.Index)
					}
					if tc.ID != "" {
						if call != "" || tc.ID != "call_123" || tc.Type != "function" {
							t.Errorf("chunk %d: tool call header id %q type %q (after %q)", i, tc.ID, tc.Type, call)
						}
						call = tc.Function.Name
					}
					args.WriteString(tc.Function.Arguments)
				}
			}
			if last := plain[len(plain)-1].Choices[0].FinishReason; last == nil || *last != set.finish {
				t.Errorf("finish_reason %v, want %s", last, set.finish)
			}
			if text.String() != set.text {
				t.Errorf("content deltas make %q, want %q", text.String(), set.text)
			}
			if got := call + "(" + args.String() + ")"; (call != "" || set.call != "") && got != set.call {
				t.Errorf("tool call %s, want %s", got, set.call)
			}
			if set.call != "" && len(plain) < 4 {
				t.Errorf("the arguments come in %d chunks; want them in pieces", len(plain)-2)
			}

			// The _usage stream: the same chunks with "usage":null, then the
			// usage chunk with no choices.
			if len(withUsage) != len(plain)+1 {
				t.Fatalf("%d chunks with usage, %d without: want exactly one more", len(withUsage), len(plain))
			}
			for i := range plain {
				if want := strings.TrimSuffix(plainRaw[i], "}") + `,"usage":null}`; usageRaw[i] != want {
					t.Errorf("_usage chunk %d:\n%s\nwant\n%s", i, usageRaw[i], want)
				}
			}
			u := withUsage[len(withUsage)-1]
			var usage struct {
				Prompt     int `json:"prompt_tokens"`
				Completion int `json:"completion_tokens"`
				Total      int `json:"total_tokens"`
				Details    struct {
					Cached *int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
				CompletionDetails struct {
					Reasoning *int `json:"reasoning_tokens"`
				} `json:"completion_tokens_details"`
			}
			if err := json.Unmarshal(u.Usage, &usage); err != nil || len(u.Choices) != 0 || u.ID != first.ID ||
				!strings.Contains(usageRaw[len(usageRaw)-1], `"choices":[]`) {
				t.Errorf("usage chunk: %v %s", err, usageRaw[len(usageRaw)-1])
			}
			if usage.Prompt == 0 || usage.Completion == 0 || usage.Total != usage.Prompt+usage.Completion ||
				usage.Details.Cached == nil || usage.CompletionDetails.Reasoning == nil {
				t.Errorf("usage %+v", usage)
			}

			// The object: what the chunks add up to, with the same usage.
			raw := served(t, "chat/"+set.base+".json", "")
			var obj completion
			if err := json.Unmarshal([]byte(raw), &obj); err != nil {
				t.Fatal(err)
			}
			if obj.Object != "chat.completion" || obj.ID != first.ID || obj.Model != recordedModel || obj.Created != first.Created ||
				len(obj.Choices) != 1 || obj.Choices[0].FinishReason != set.finish || obj.Choices[0].Message.Role != "assistant" {
				t.Errorf("object envelope: %s", raw)
			}
			if string(obj.Usage) != string(u.Usage) {
				t.Errorf("object usage %s, stream usage %s", obj.Usage, u.Usage)
			}
			m := obj.Choices[0].Message
			switch {
			case set.text != "" && (m.Content == nil || *m.Content != set.text || len(m.ToolCalls) != 0):
				t.Errorf("object message: %s", raw)
			case set.call != "" && (m.Content != nil || len(m.ToolCalls) != 1 || m.ToolCalls[0].ID != "call_123" ||
				m.ToolCalls[0].Type != "function" || m.ToolCalls[0].Function.Name+"("+m.ToolCalls[0].Function.Arguments+")" != set.call):
				t.Errorf("object tool call: %s", raw)
			}
		})
	}

	// Every file under testdata/chat/ belongs to a set checked above.
	files, _ := filepath.Glob(filepath.Join(testdata, "chat", "*"))
	if len(files) != 6 {
		t.Errorf("testdata/chat has %d files, the test checks 6: %v", len(files), files)
	}
}
