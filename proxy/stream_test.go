package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// Tests of docs/selection.md after the first byte: no retry, broken and stalled
// streams are cut and charged to the account, a client that leaves cancels
// the upstream request; and of what a finished request leaves behind
// (usage.jsonl, quota).

// readStream reads an SSE answer to its end and returns its event types and
// the read error (nil for a cleanly terminated body).
func readStream(t *testing.T, r io.Reader) ([]string, error) {
	t.Helper()
	return sseTypes(r)
}

// streamAnswer sends a streamed request, which must be answered 200, and
// reads the answer to its end: the events the client got, and the read
// error (nil for a cleanly terminated body).
func streamAnswer(t *testing.T, e *env) ([]string, error) {
	t.Helper()
	resp := e.do("POST", "/v1/responses", streamBody)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return readStream(t, resp.Body)
}

func completed(types []string) bool {
	return len(types) > 0 && types[len(types)-1] == "response.completed"
}

// A stream the upstream breaks after output has started reaches the
// client cut, not ended, and the account is charged: whether the
// connection is reset or closed in good order without the stream's end
// (a FIN, or a TLS close_notify, and no terminating chunk).
func TestStreamBrokenMidwayIsCutAndCharged(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		b    upstreamtest.Behavior
		tls  bool
	}{
		{"reset", upstreamtest.Behavior{ResetAfter: 3}, true},
		{"closed", upstreamtest.Behavior{CloseAfter: 3}, true},
		{"reset over plain HTTP", upstreamtest.Behavior{ResetAfter: 3}, false},
		{"closed over plain HTTP", upstreamtest.Behavior{CloseAfter: 3}, false},
	} {
		b := c.b
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnvWith(t, twoAPIKeys(), peerConfig{seed: 1, tls: c.tls})
			e.up.Set("bad", b)
			e.prefer(1)
			start := time.Now()
			types, err := streamAnswer(t, e)
			if err == nil || completed(types) {
				t.Fatalf("a broken stream reached the client as ended (%v, err %v)", types, err)
			}
			if len(types) != 3 {
				t.Errorf("client got events %v (err %v), want the 3 sent before the break", types, err)
			}
			// Too late to fail over: the other account is never asked.
			e.expectCounts(map[string]int{"bad": 1, "good": 0})
			eventually(t, 2*time.Second, "account 1 charged with a network error", func() bool {
				return e.state(1).CooldownReason == rotation.CooldownNetworkError
			})
			st := e.state(1)
			near(t, "cooldown_until", st.CooldownUntil, start.Add(rotation.NetworkErrorCooldown), time.Second+time.Since(start))
			if len(st.Failures) != 1 {
				t.Errorf("failures %v", st.Failures)
			}
			rec := waitUsage(t, e, 1)[0]
			if rec.Status != 200 || rec.Code != "stream_interrupted" || rec.AccountID != e.id(1) {
				t.Errorf("usage record %+v", rec)
			}
		})
	}
}

func TestStalledStreamIsCutAndCharged(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoAPIKeys(), stallTimeout(300*time.Millisecond))
	e.up.Set("bad", upstreamtest.Behavior{StallAfter: 4})
	e.prefer(1)
	start := time.Now()
	types, err := streamAnswer(t, e)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("a stalled stream was cut only after %s (stall timeout 300ms)", d)
	}
	if err == nil || completed(types) {
		t.Fatalf("a stalled stream reached the client as ended (%v, err %v)", types, err)
	}
	if len(types) != 4 {
		t.Errorf("client got events %v (err %v), want the 4 sent before the stall", types, err)
	}
	e.expectCounts(map[string]int{"bad": 1, "good": 0})
	eventually(t, 2*time.Second, "account 1 charged with a network error", func() bool {
		return e.state(1).CooldownReason == rotation.CooldownNetworkError
	})
	eventually(t, 2*time.Second, "the stalled upstream request to end", func() bool { return e.up.Open() == 0 })
}

func TestClientGoneCancelsUpstreamWithoutBlamingAccount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}})
	e.up.Set("c1", upstreamtest.Behavior{EventDelay: 150 * time.Millisecond})
	resp := e.do("POST", "/v1/responses", streamBody)
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "event: response.created") {
		t.Fatalf("first line %q, %v", line, err)
	}
	if e.up.Open() != 1 {
		t.Fatalf("upstream has %d open requests, want 1", e.up.Open())
	}
	resp.Body.Close()
	eventually(t, 2*time.Second, "the upstream request to be cancelled", func() bool { return e.up.Open() == 0 })
	rec := waitUsage(t, e, 1)[0]
	if rec.Status != 499 || rec.Code != "client_closed" {
		t.Errorf("usage record %+v", rec)
	}
	st := e.state(1)
	if !st.CooldownUntil.IsZero() || len(st.Failures) > 0 || !st.CircuitOpenUntil.IsZero() {
		t.Errorf("the account was blamed for the client leaving: %+v", st)
	}
	if s := e.status(1); s.State != "available" {
		t.Errorf("state %q", s.State)
	}
}

func TestStreamFailingBeforeAnyOutputFailsOver(t *testing.T) {
	t.Parallel()
	// Bootstrap events (response.created, response.in_progress) are held
	// back, so a stream that dies before its first output event has not
	// reached the client yet and the next account can serve.
	cases := []struct {
		name   string
		b      upstreamtest.Behavior
		reason string
	}{
		{"reset after response.created", upstreamtest.Behavior{ResetAfter: 1}, "cooling-down:network-error"},
		{"closed after response.created", upstreamtest.Behavior{CloseAfter: 1}, "cooling-down:network-error"},
		{"stall after response.in_progress", upstreamtest.Behavior{StallAfter: 2}, "cooling-down:network-error"},
		{"response.failed overloaded", upstreamtest.Behavior{Stream: "failed_overloaded.sse"}, "cooling-down:server-error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, twoAPIKeys(), stallTimeout(300*time.Millisecond))
			e.up.Set("bad", c.b)
			e.prefer(1)
			resp := e.do("POST", "/v1/responses", streamBody)
			types, err := readStream(t, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || err != nil || !completed(types) || types[0] != "response.created" ||
				slices.Contains(types[1:], "response.created") {
				t.Fatalf("status %d events %v err %v: want one clean stream from the next account", resp.StatusCode, types, err)
			}
			e.expectCounts(map[string]int{"bad": 1, "good": 1})
			if s := e.status(1); s.State != c.reason {
				t.Errorf("state %q, want %q", s.State, c.reason)
			}
		})
	}
}

func TestClientGoneDuringUpstreamStallEndsByStallTimeout(t *testing.T) {
	t.Parallel()
	// fasthttp cannot see a client leave while nothing is written, so a
	// silent upstream is only given up at the stall timeout; that bound
	// must hold.
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}}, stallTimeout(300*time.Millisecond))
	e.up.Set("k1", upstreamtest.Behavior{StallAfter: 4})
	resp := e.do("POST", "/v1/responses", streamBody)
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "event: response.created") {
		t.Fatalf("first line %q, %v", line, err)
	}
	resp.Body.Close()
	eventually(t, 2*time.Second, "the upstream request to end", func() bool { return e.up.Open() == 0 })
}

// waitUsage waits until usage.jsonl has n records and returns them.
func waitUsage(t *testing.T, e *env, n int) []usage.Record {
	t.Helper()
	var recs []usage.Record
	eventually(t, 2*time.Second, "usage.jsonl records", func() bool {
		recs = readUsage(t, e.store.Dir())
		return len(recs) >= n
	})
	if len(recs) != n {
		t.Fatalf("usage.jsonl has %d records, want %d: %+v", len(recs), n, recs)
	}
	return recs
}

func readUsage(t *testing.T, dir string) []usage.Record {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, home.UsageFile))
	if err != nil {
		t.Fatal(err)
	}
	var out []usage.Record
	for line := range bytes.Lines(data) {
		var u usage.Record
		if err := json.Unmarshal(line, &u); err != nil {
			t.Fatalf("usage.jsonl line %q: %v", line, err)
		}
		out = append(out, u)
	}
	return out
}

func TestUsageRecordedAfterCompletedStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}})
	expectStream(t, e.do("POST", "/v1/responses", `{"model":"gpt-5-codex","stream":true,"input":"hi"}`))
	rec := waitUsage(t, e, 1)[0]
	if rec.AccountID != e.id(1) || rec.Model != "gpt-5-codex" || rec.Status != 200 || rec.Code != "" || rec.RequestID == "" {
		t.Errorf("usage record %+v", rec)
	}
	want := usage.Tokens{Input: 1280, Cached: 1024, Output: 9, Reasoning: 0, Total: 1289}
	if rec.Tokens == nil || *rec.Tokens != want {
		t.Errorf("tokens %+v, want %+v", rec.Tokens, want)
	}
	if time.Since(rec.Time) > time.Minute {
		t.Errorf("time %s", rec.Time)
	}
	st := e.state(1)
	if st.LastUsed.IsZero() || st.LastStatus != 200 {
		t.Errorf("last used %s status %d", st.LastUsed, st.LastStatus)
	}
}

func TestNonStreamedAnswerHasLengthAndUsage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	resp := e.do("POST", "/v1/responses", `{"model":"gpt-5","stream":false,"input":"hi"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("content-type %q", ct)
	}
	if resp.ContentLength <= 0 || len(resp.TransferEncoding) > 0 {
		t.Errorf("content-length %d transfer-encoding %v: want a sized answer", resp.ContentLength, resp.TransferEncoding)
	}
	body := readAll(t, resp)
	if int64(len(body)) != resp.ContentLength {
		t.Errorf("body %d bytes, content-length %d", len(body), resp.ContentLength)
	}
	var r struct {
		Object string `json:"object"`
		Status string `json:"status"`
		Model  string `json:"model"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.Object != "response" || r.Status != "completed" || r.Model != "gpt-5" {
		t.Errorf("answer %+v (%v): %.200s", r, err, body)
	}
	rec := waitUsage(t, e, 1)[0]
	want := usage.Tokens{Input: 1280, Cached: 1024, Output: 9, Total: 1289}
	if rec.Status != 200 || rec.Model != "gpt-5" || rec.AccountID != e.id(1) || rec.Tokens == nil || *rec.Tokens != want {
		t.Errorf("usage record %+v tokens %+v", rec, rec.Tokens)
	}
	if st := e.state(1); st.LastStatus != 200 || !st.CooldownUntil.IsZero() {
		t.Errorf("state %+v", st)
	}
}

func TestQuotaFromHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}})
	e.up.Set("c1", upstreamtest.Behavior{ResetIn: 90 * time.Minute, Headers: map[string]string{
		"x-codex-primary-used-percent":          "37.5",
		"x-codex-primary-window-minutes":        "300",
		"x-codex-primary-reset-at":              "{{RESETS_AT}}",
		"x-codex-secondary-used-percent":        "12",
		"x-codex-secondary-window-minutes":      "10080",
		"x-codex-secondary-reset-after-seconds": "86400",
		"x-codex-plan-type":                     "pro",
	}})
	start := time.Now()
	expectStream(t, e.do("POST", "/v1/responses", streamBody))
	q := e.state(1).Quota
	if q == nil || q.Primary == nil || q.Secondary == nil {
		t.Fatalf("quota %+v", q)
	}
	if q.Primary.UsedPercent != 37.5 || q.Primary.WindowMinutes != 300 || q.PlanType != "pro" {
		t.Errorf("primary %+v plan %q", *q.Primary, q.PlanType)
	}
	near(t, "primary resets_at", q.Primary.ResetsAt, start.Add(90*time.Minute), 2*time.Second)
	if q.Secondary.UsedPercent != 12 || q.Secondary.WindowMinutes != 10080 {
		t.Errorf("secondary %+v", *q.Secondary)
	}
	near(t, "secondary resets_at", q.Secondary.ResetsAt, start.Add(24*time.Hour), 2*time.Second)
	if s := e.status(1); s.Quota == nil || s.Quota.Primary.UsedPercent != 37.5 {
		t.Errorf("status quota %+v", s.Quota)
	}
}

func TestQuotaFromRateLimitsEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}})
	e.up.Set("c1", upstreamtest.Behavior{Stream: "rate_limits_first.sse", ResetIn: 45 * time.Minute})
	start := time.Now()
	expectStream(t, e.do("POST", "/v1/responses", streamBody))
	var q *rotation.Quota
	eventually(t, 2*time.Second, "a quota snapshot", func() bool { q = e.state(1).Quota; return q != nil })
	if q.Primary == nil || q.Primary.UsedPercent != 42 || q.Primary.WindowMinutes != 300 || q.PlanType != "plus" {
		t.Fatalf("quota %+v primary %+v", q, q.Primary)
	}
	near(t, "primary resets_at", q.Primary.ResetsAt, start.Add(45*time.Minute), 2*time.Second)
	if q.Secondary == nil || q.Secondary.UsedPercent != 17 || q.Secondary.WindowMinutes != 10080 {
		t.Fatalf("secondary %+v", q.Secondary)
	}
	near(t, "secondary resets_at", q.Secondary.ResetsAt, start.Add(518400*time.Second), 2*time.Second)
}

// Requests, relays and held-back bytes are recycled: a stream still
// being relayed keeps its own, whatever the requests answered meanwhile
// reuse. Each stream's usage record carries its own id and model.
func TestRecycledRequestsKeepTheirOwn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "a"}})
	e.up.SetDefault(upstreamtest.Behavior{EventDelay: 20 * time.Millisecond})
	const n = 30
	type sent struct{ id, model string }
	streams := make(chan sent, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			model := fmt.Sprintf("gpt-5-%d", i)
			resp := e.do("POST", "/v1/responses", `{"model":"`+model+`","stream":true,"input":"hi"}`)
			defer resp.Body.Close()
			if _, err := sseTypes(resp.Body); err != nil || resp.StatusCode != 200 {
				t.Errorf("%s: status %d err %v", model, resp.StatusCode, err)
			}
			streams <- sent{resp.Header.Get("x-request-id"), model}
		})
		wg.Go(func() { // answered while the streams are open
			resp := e.do("POST", "/v1/responses", `{"model":"other","input":`)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	close(streams)
	recs := map[string]usage.Record{}
	for _, r := range waitCompatUsage(t, e, 2*n) {
		if _, dup := recs[r.RequestID]; dup {
			t.Errorf("two records of request %s", r.RequestID)
		}
		recs[r.RequestID] = r
	}
	for s := range streams {
		if r, ok := recs[s.id]; !ok || r.Model != s.model || r.Status != 200 {
			t.Errorf("stream %s (%s): record %+v", s.id, s.model, r)
		}
	}
}
