package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation"
)

// Tests of docs/selection.md under load and faults: only upstream faults mark an
// account, rotor's own limits answer 503 overloaded, the guard runs before
// the body is read, and the limits on headers and bodies.

// expectUnmarked fails when account i carries any mark of blame.
func expectUnmarked(t *testing.T, e *env, i int) {
	t.Helper()
	st := e.state(i)
	if !st.CooldownUntil.IsZero() || !st.RateLimitedUntil.IsZero() || !st.CircuitOpenUntil.IsZero() || len(st.Failures) > 0 {
		t.Errorf("account %d was marked: %+v", i, st)
	}
}

func TestEveryAccountOnAnUnreachableEndpointIsSkippedAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "a"}, {accounts.KindAPIKey, "b"}})
	dead := closedPort(t)
	e.setBaseURL(1, "http://"+dead+"/v1")
	e.setBaseURL(2, "http://"+dead+"/v1")
	got := expectError(t, e.do("POST", "/v1/responses", streamBody), 503, rerr.PoolExhausted)
	if got.Extra["reason"] != "network-error" {
		t.Errorf("reason %v", got.Extra["reason"])
	}
	// One attempt: the second account behind the same endpoint is not
	// tried, it is skipped for the endpoint's sake.
	sr := skipReasons(t, got)
	if len(sr) != 2 || !strings.Contains(sr["1"]+sr["2"], rotation.SkipAlreadyAttempted) ||
		!strings.Contains(sr["1"]+sr["2"], rotation.CoolingDown(rotation.CooldownNetworkError)) {
		t.Errorf("skip reasons %v, want one attempted and one skipped for the endpoint", sr)
	}
	if !strings.Contains(got.Message, dead) || !strings.Contains(got.Message, "connection refused") {
		t.Errorf("message %q does not name the endpoint and the OS error", got.Message)
	}
	expectUnmarked(t, e, 1)
	expectUnmarked(t, e, 2)
}

// An unreachable endpoint is seen, by this serve and another on the same
// home within a second of watching (docs/selection.md): its accounts show as
// cooling-down:network-error with until when, the endpoint and the OS
// error, and the other serve skips them as its own would.
func TestUnreachableEndpointIsSharedAndShown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoAPIKeys())
	other := e.peer()
	e.watch()
	other.watch()
	dead := closedPort(t)
	e.setBaseURL(1, "http://"+dead+"/v1")
	other.setBaseURL(1, "http://"+dead+"/v1")
	e.prefer(1)
	start := time.Now()
	expectStream(t, e.do("POST", "/v1/responses", streamBody))
	e.expectCounts(map[string]int{"bad": 0, "good": 1})
	shown := func(x *env) bool {
		st := x.status(1)
		return st.State == rotation.CoolingDown(rotation.CooldownNetworkError) && st.Endpoint == "http://"+dead &&
			strings.Contains(st.Error, "connection refused")
	}
	if !shown(e) {
		t.Errorf("this serve shows account 1 as %+v", e.status(1))
	}
	withinWatch(t, "the other serve sees the endpoint down", func() bool { return shown(other) }, e, other)
	// Until the first wait (1 s) passes, the other serve skips the
	// endpoint as its own would; after, its next request may probe it.
	if !other.srv.endpoints.IsDown("http://"+dead) && time.Since(start) < rotation.EndpointBackoff/2 {
		t.Error("the other serve would try the endpoint again at once")
	}
	other.prefer(1)
	expectStream(t, other.do("POST", "/v1/responses", streamBody))
	e.expectCounts(map[string]int{"bad": 0, "good": 2})
	if st := other.status(2); st.State != "available" {
		t.Errorf("account 2 on a live endpoint shows %+v", st)
	}
	expectUnmarked(t, e, 1)
}

func TestUnreachableEndpointIsProbedWhenNothingElseCanServe(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "a"}})
	dead := closedPort(t)
	e.setBaseURL(1, "http://"+dead+"/v1")
	expectError(t, e.do("POST", "/v1/responses", streamBody), 503, rerr.PoolExhausted)
	if !e.srv.endpoints.IsDown("http://" + dead) {
		t.Fatal("endpoint not marked")
	}
	// The network comes back: the very next request gets through.
	back := upstreamtest.New("../testdata")
	if err := back.Start(dead); err != nil {
		t.Skipf("cannot listen on %s again: %v", dead, err)
	}
	t.Cleanup(func() { back.Close() })
	expectStream(t, e.do("POST", "/v1/responses", streamBody))
	if e.srv.endpoints.IsDown("http://" + dead) {
		t.Error("endpoint still marked after it answered")
	}
	expectUnmarked(t, e, 1)
}

func TestSlowNonStreamAnswerIsWaitedForNotRetried(t *testing.T) {
	t.Parallel()
	// A stream:false answer starts only once it is complete: here after
	// about a second, far past the stall timeout.
	e := newEnv(t, twoAPIKeys(), stallTimeout(200*time.Millisecond))
	e.up.Set("bad", upstreamtest.Behavior{EventDelay: 100 * time.Millisecond})
	e.prefer(1)
	resp := e.do("POST", "/v1/responses", `{"model":"gpt-5","input":"hi"}`)
	body := readAll(t, resp)
	if resp.StatusCode != 200 || !strings.Contains(body, "Hello from the fake upstream.") {
		t.Fatalf("status %d body %.200s", resp.StatusCode, body)
	}
	e.expectCounts(map[string]int{"bad": 1, "good": 0})
	// Slow headers before a stream: the same.
	e.up.Set("bad", upstreamtest.Behavior{HeaderDelay: 600 * time.Millisecond})
	e.sel.SetProcessPin(e.id(1)) // a pin never rotates: a cut would be a 503
	expectStream(t, e.do("POST", "/v1/responses", streamBody))
	e.expectCounts(map[string]int{"bad": 2, "good": 0})
	expectUnmarked(t, e, 1)
}

func TestClientThatLeavesEndsTheFailover(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoAPIKeys(), stallTimeout(400*time.Millisecond))
	// Account 1's stream stalls before any output: without a client the
	// stall must not be charged, nor the request sent on to account 2.
	e.up.Set("bad", upstreamtest.Behavior{StallAfter: 1})
	e.prefer(1)
	// The client leaves once account 1 holds the request, not after a
	// fixed time: on a busy machine that could pass before it was sent.
	postAndLeave(t, e, streamBody)
	rec := waitUsage(t, e, 1)[0]
	if rec.Status != statusClientClosed || rec.Code != codeClientClosed {
		t.Errorf("usage record %+v", rec)
	}
	e.expectCounts(map[string]int{"bad": 1, "good": 0})
	expectUnmarked(t, e, 1)
	expectUnmarked(t, e, 2)
}

func TestOwnConnectionLimitAnswersOverloadedAndMarksNobody(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoAPIKeys(), func(c *Config) { c.MaxUpstreamConns, c.ConnWait = 1, 200*time.Millisecond })
	e.up.SetDefault(upstreamtest.Behavior{EventDelay: 300 * time.Millisecond})
	e.prefer(1)
	first := e.do("POST", "/v1/responses", streamBody) // holds the only connection while it streams
	defer first.Body.Close()
	start := time.Now()
	resp := e.do("POST", "/v1/responses", streamBody)
	got := expectError(t, resp, 503, rerr.ProxyOverloaded)
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("answered after %s: the request did not wait for a connection", d)
	}
	if !got.Retryable || got.Extra["retry_after_ms"] == nil || resp.Header.Get("retry-after-ms") == "" {
		t.Errorf("overloaded payload %+v, headers %v", got, resp.Header)
	}
	types, err := readStream(t, first.Body)
	if err != nil || !completed(types) {
		t.Errorf("the first stream did not complete: %v %v", types, err)
	}
	expectUnmarked(t, e, 1)
	expectUnmarked(t, e, 2)
}

// rawExchange writes raw to the proxy and reads the answer's head.
func rawExchange(t *testing.T, e *env, raw string) (status int, head string, conn net.Conn, br *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(e.base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br = bufio.NewReader(c)
	var b strings.Builder
	for {
		line, err := br.ReadString('\n')
		b.WriteString(line)
		if err != nil || line == "\r\n" {
			break
		}
	}
	head = b.String()
	fmt.Sscanf(head, "HTTP/1.1 %d", &status)
	return status, head, c, br
}

func TestGuardAnswersBeforeTheBodyIsRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoAPIKeys())
	// Headers announcing 60 MiB (or chunks without end) and only the
	// first 16 KiB of it: the answer can only come if the guard does not
	// wait for the body.
	const announced = "Content-Length: 62914560\r\n\r\n"
	chunked := "Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n", 1<<20)
	for _, c := range []struct{ name, hdr, framing, code string }{
		{"foreign origin", "Host: 127.0.0.1\r\nOrigin: https://evil.example\r\nAuthorization: Bearer " + testKey, announced, rerr.ProxyForbiddenHost},
		{"no key", "Host: 127.0.0.1", announced, rerr.ProxyUnauthorized},
		{"no key, chunked", "Host: 127.0.0.1", chunked, rerr.ProxyUnauthorized},
	} {
		status, head, conn, br := rawExchange(t, e, "POST /v1/responses HTTP/1.1\r\n"+c.hdr+"\r\nContent-Type: application/json\r\n"+c.framing+strings.Repeat("x", 16<<10))
		want := map[string]int{rerr.ProxyForbiddenHost: 403, rerr.ProxyUnauthorized: 401}[c.code]
		if status != want || !strings.Contains(strings.ToLower(head), "connection: close") {
			t.Errorf("%s: head %q", c.name, head)
		}
		body, _ := io.ReadAll(io.LimitReader(br, 4096))
		if !strings.Contains(string(body), c.code) {
			t.Errorf("%s: body %q", c.name, body)
		}
		conn.Close()
	}
	e.expectCounts(map[string]int{"bad": 0, "good": 0})
}

func TestHeaderAndBodyLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoAPIKeys(), func(c *Config) { c.MaxBody = 1 << 20 })
	pad := func(n int) string { return strings.Repeat("x", n) }
	// Headers a legitimate client may send are served, up to 64 KiB.
	for _, n := range []int{16 << 10, 60 << 10} {
		resp := e.do("POST", "/v1/responses", streamBody, "x-padding", pad(n))
		expectStream(t, resp)
	}
	// Larger ones get 431, whatever the guard would have said.
	for _, hdr := range []string{"Host: 127.0.0.1", "Host: evil.example"} {
		status, _, _, br := rawExchange(t, e, "GET /v1/models HTTP/1.1\r\n"+hdr+"\r\nx-padding: "+pad(80<<10)+"\r\n\r\n")
		body, _ := io.ReadAll(io.LimitReader(br, 4096))
		if status != 431 || !strings.Contains(string(body), rerr.ProxyHeadersTooLarge) {
			t.Errorf("oversized headers (%s): status %d body %q", hdr, status, body)
		}
	}
	// A chunked body over the cap gets 413, not a read of all of it.
	chunk := pad(64 << 10)
	var raw strings.Builder
	raw.WriteString("POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + testKey + "\r\nTransfer-Encoding: chunked\r\n\r\n")
	for range 20 {
		fmt.Fprintf(&raw, "%x\r\n%s\r\n", len(chunk), chunk)
	}
	status, _, _, br := rawExchange(t, e, raw.String())
	body, _ := io.ReadAll(io.LimitReader(br, 4096))
	if status != 413 || !strings.Contains(string(body), rerr.ProxyPayloadTooLarge) {
		t.Errorf("over-cap chunked body: status %d body %q", status, body)
	}
	// A chunked body that breaks its framing is the client's error.
	status, _, _, br = rawExchange(t, e, "POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "+testKey+
		"\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
	body, _ = io.ReadAll(io.LimitReader(br, 4096))
	if status != 400 || !strings.Contains(string(body), rerr.ProxyBadRequest) || !strings.Contains(string(body), "cannot read the request body") {
		t.Errorf("broken chunked body: status %d body %q", status, body)
	}
	if n := e.up.Count("bad") + e.up.Count("good"); n != 2 {
		t.Errorf("upstream saw %d requests, want the 2 with headers in bounds", n)
	}
}

func TestHTTP10ClientGetsABodyThatEndsAtClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoAPIKeys())
	status, head, _, br := rawExchange(t, e, "POST /v1/responses HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "+testKey+
		"\r\nContent-Type: application/json\r\nContent-Length: "+fmt.Sprint(len(streamBody))+"\r\n\r\n"+streamBody)
	if status != 200 || strings.Contains(strings.ToLower(head), "chunked") || !strings.Contains(strings.ToLower(head), "connection: close") {
		t.Fatalf("head %q", head)
	}
	types, err := readStream(t, br)
	if err != nil || !completed(types) {
		t.Errorf("events %v err %v", types, err)
	}
	waitUsage(t, e, 1)
}

const echoKey = "sk-test-echo-0123456789abcdef"

func TestAccountSecretsNeverReachTheClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, echoKey}})
	e.up.Set(echoKey, upstreamtest.Behavior{Status: 400, ErrorFixture: "key_echo_400.json"})
	resp := e.do("POST", "/v1/responses", streamBody)
	body := readAll(t, resp)
	if resp.StatusCode != 400 || strings.Contains(body, echoKey) || !strings.Contains(body, "[redacted]") {
		t.Errorf("status %d body %s", resp.StatusCode, body)
	}
	e.up.Set(echoKey, upstreamtest.Behavior{Headers: map[string]string{
		"Set-Cookie": "session=" + echoKey, "Authorization": "Bearer " + echoKey, "WWW-Authenticate": "Bearer", "x-kept": "yes",
		// Any header may quote it: a gateway that reflects what it got.
		"X-Echo-Authorization": "Bearer " + echoKey}})
	resp = e.do("POST", "/v1/responses", streamBody)
	readAll(t, resp)
	for k, v := range resp.Header {
		if strings.Contains(strings.Join(v, " "), echoKey) {
			t.Errorf("header %s carries the account's key", k)
		}
	}
	if resp.Header.Get("x-kept") != "yes" || resp.Header.Get("X-Echo-Authorization") != "Bearer [redacted]" {
		t.Errorf("want ordinary headers kept and the echo redacted: %v", resp.Header)
	}
}

func TestAffinityKeysAreFixedSizeDigests(t *testing.T) {
	t.Parallel()
	var h fasthttp.RequestHeader
	big := strings.Repeat("k", 1<<20)
	for _, body := range []string{`{"prompt_cache_key":"` + big + `"}`, `{"previous_response_id":"` + big + `"}`} {
		if k := affinityKey(&h, fieldsOf([]byte(body))); len(k) != 33 {
			t.Errorf("key of %d bytes", len(k))
		}
	}
	h.Set("session_id", big)
	if k := affinityKey(&h, bodyFields{}); len(k) != 33 {
		t.Errorf("session key of %d bytes", len(k))
	}
	var other fasthttp.RequestHeader
	other.Set("session_id", big+"!")
	if affinityKey(&h, bodyFields{}) == affinityKey(&other, bodyFields{}) {
		t.Error("different sessions share a key")
	}
}

func TestNoEnabledAccountIsAConfigurationError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	resp := e.do("POST", "/v1/responses", streamBody)
	got := expectError(t, resp, 503, rerr.PoolExhausted)
	if got.Extra["reason"] != "no-account" || got.Category != rerr.CategoryConfiguration || got.Retryable {
		t.Errorf("payload %+v", got)
	}
	for _, cmd := range []string{"rotor login", "rotor import codex", "rotor add-key"} {
		if !strings.Contains(got.Message, cmd) {
			t.Errorf("message %q does not name %s", got.Message, cmd)
		}
	}
	expectNoRetryHeaders(t, resp)
}

func TestHealthzAnswersWithoutAnAccount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoAPIKeys())
	resp := e.do("GET", "/healthz", "")
	if body := readAll(t, resp); resp.StatusCode != 200 || body != `{"status":"ok"}` {
		t.Errorf("status %d body %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("GET", e.base+"/healthz", nil)
	if resp, err := testClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Errorf("healthz without the key: %v %v", resp, err)
	}
	e.expectCounts(map[string]int{"bad": 0, "good": 0})
}

func TestNotFoundNamesWhatWasAsked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoAPIKeys())
	got := expectError(t, e.do("DELETE", "/v1/files/abc", ""), 404, rerr.ProxyNotFound)
	if !strings.Contains(got.Message, "DELETE /v1/files/abc") || !strings.Contains(got.Message, "/v1/chat/completions") {
		t.Errorf("message %q", got.Message)
	}
}

// TestConcurrentStreamsPastTheOldPoolLimit runs more concurrent streams
// than fasthttp's default of 512 connections per host: every one
// completes and no account is marked.
func TestConcurrentStreamsPastTheOldPoolLimit(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("load test")
	}
	e := newEnv(t, twoAPIKeys())
	e.up.SetDefault(upstreamtest.Behavior{EventDelay: 50 * time.Millisecond})
	const n = 600
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxConnsPerHost: n, MaxIdleConnsPerHost: n, DisableCompression: true}}
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", e.base+"/v1/responses", strings.NewReader(streamBody))
			req.Header.Set("Authorization", "Bearer "+testKey)
			resp, err := client.Do(req)
			if err != nil {
				errs <- err.Error()
				return
			}
			defer resp.Body.Close()
			types, err := sseTypes(resp.Body)
			if resp.StatusCode != 200 || err != nil || len(types) == 0 || types[len(types)-1] != "response.completed" {
				errs <- fmt.Sprintf("status %d err %v", resp.StatusCode, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	failed := 0
	for msg := range errs {
		if failed++; failed <= 3 {
			t.Error(msg)
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d streams failed", failed, n)
	}
	expectUnmarked(t, e, 1)
	expectUnmarked(t, e, 2)
}

// sseTypes reads an SSE body's event types without a testing.T, for
// goroutines.
func sseTypes(r io.Reader) ([]string, error) {
	var types []string
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			types = append(types, strings.TrimSpace(v))
		}
		if err == io.EOF {
			return types, nil
		}
		if err != nil {
			return types, err
		}
	}
}

// Every spelling of the session header a client uses keys the same
// conversation: newer Codex CLIs send session-id.
func TestAffinityKeyFromEverySessionHeader(t *testing.T) {
	t.Parallel()
	want := ""
	for _, name := range []string{"session_id", "session-id", "conversation_id"} {
		var h fasthttp.RequestHeader
		h.Set(name, "conv-1")
		k := affinityKey(&h, fieldsOf([]byte(`{"prompt_cache_key":"other"}`)))
		if want == "" {
			want = k
		}
		if k != want {
			t.Errorf("%s keys another conversation than session_id", name)
		}
	}
}

// A conversation's prompt_cache_key keeps it on one account, on the
// Responses route and on the Chat Completions route alike, while other
// traffic still spreads.
func TestPromptCacheKeyKeepsAConversationOnOneAccount(t *testing.T) {
	t.Parallel()
	for _, route := range []struct{ path, body string }{
		{"/v1/responses", `{"model":"gpt-5","stream":false,"input":"hi","prompt_cache_key":"conv-9"}`},
		{"/v1/chat/completions", `{"model":"gpt-5","messages":[{"role":"user","content":"hi"}],"prompt_cache_key":"conv-9"}`},
	} {
		t.Run(route.path, func(t *testing.T) {
			e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}, {accounts.KindAPIKey, "k2"}})
			for range 6 {
				resp := e.do("POST", route.path, route.body)
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("status %d", resp.StatusCode)
				}
			}
			if c := e.counts("k1", "k2"); c[0]*c[1] != 0 || c[0]+c[1] != 6 {
				t.Errorf("one conversation went to both accounts: %v", c)
			}
		})
	}
}

// Every upstream connect runs on a goroutine of its own (upstream's connector.dial); none
// is left behind. Not parallel: it counts the process's goroutines.
func TestDialsLeaveNoGoroutineBehind(t *testing.T) {
	e := newEnv(t, []acct{{accounts.KindAPIKey, "a"}})
	one := func() {
		r := e.do("POST", "/v1/responses", streamBody)
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if r.StatusCode != 200 {
			t.Fatalf("status %d", r.StatusCode)
		}
		e.srv.exits.CloseIdle() // the next request dials
	}
	one()
	before := runtime.NumGoroutine()
	for range 20 {
		one()
	}
	eventually(t, 5*time.Second, "goroutines back to their number before 20 dials", func() bool {
		return runtime.NumGoroutine() <= before
	})
}

// Every fixed hop-by-hop header is the client's connection's, never the
// upstream's (RFC 9110 section 7.6.1), whatever the Connection header says.
func TestHopByHopHeadersNeverReachTheUpstream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	hop := []string{"Proxy-Authorization: Basic eDp5", "TE: trailers", "Upgrade: h2c", "Keep-Alive: timeout=5", "Trailer: x-t",
		"Proxy-Connection: keep-alive"}
	out := e.rawRequest("POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + testKey +
		"\r\n" + strings.Join(hop, "\r\n") + "\r\nx-kept: yes\r\nContent-Type: application/json\r\nContent-Length: " +
		fmt.Sprint(len(streamBody)) + "\r\nConnection: close\r\n\r\n" + streamBody)
	if !strings.HasPrefix(out, "HTTP/1.1 200") {
		t.Fatalf("answer %.200q", out)
	}
	rec := e.up.Requests()
	if len(rec) != 1 || rec[0].Header.Get("x-kept") != "yes" {
		t.Fatalf("upstream got %+v", rec)
	}
	for _, h := range hop {
		name, _, _ := strings.Cut(h, ":")
		if v := rec[0].Header.Get(name); v != "" {
			t.Errorf("%s reached the upstream: %q", name, v)
		}
	}
}

// The relay writes every event as it arrives: spread out upstream, the
// events reach the client spread out, not in one burst at the end.
func TestRelayIsTimedEventByEvent(t *testing.T) {
	t.Parallel()
	// For every k from the first output event (the third; the two before it
	// are held back with it) to the last but one, so a relay that buffers
	// any number of events, or bytes, fails for some k.
	const events = 14 // data lines in testdata/sse/hello.sse
	for k := 3; k < events; k++ {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}}, stallTimeout(stallBound))
			e.up.Set("k1", upstreamtest.Behavior{StallAfter: k})
			expectBeforeStall(t, e, "/v1/responses", streamBody, k, func(line string) bool {
				return strings.HasPrefix(line, "data: ")
			})
		})
	}
}

// stallBound is the stall timeout of the tests that use expectBeforeStall:
// far longer than any wait they allow.
const stallBound = 20 * time.Second

// expectBeforeStall sends body to path on e, whose upstream goes silent
// after some events (Behavior.StallAfter) for stallBound, and expects want
// lines matching match to reach the client well before the stall ends:
// they can only if each event was written as it came. No timing luck: a
// loaded machine delays them by far less than the stall.
func expectBeforeStall(t *testing.T, e *env, path, body string, want int, match func(string) bool) {
	t.Helper()
	t.Cleanup(func() { e.up.Close() }) // ends the stall before the proxy's drain
	start := time.Now()
	resp := e.do("POST", path, body)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	got := 0
	for got < want && sc.Scan() {
		if match(sc.Text()) {
			got++
		}
	}
	if got != want {
		t.Fatalf("client got %d of the %d lines sent before the stall (%v)", got, want, sc.Err())
	}
	if d := time.Since(start); d > stallBound/2 {
		t.Errorf("the %d lines sent before a stall took %s to arrive: the relay held them", want, d)
	}
}

// An upstream whose quota headers hold what state.json cannot (a used
// share of NaN, a reset thousands of years away) costs nothing but those
// values: the answer goes through, the rest of the quota is kept, and the
// state is still written for every process on the home.
func TestMalformedQuotaHeadersLeaveTheStateWritable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	e.up.Set("k1", upstreamtest.Behavior{Headers: map[string]string{
		"x-codex-primary-used-percent": "NaN", "x-codex-primary-window-minutes": "300",
		"x-codex-secondary-used-percent": "40", "x-codex-secondary-reset-at": "999999999999",
		"x-codex-plan-type": "plus",
	}})
	expectStream(t, e.do("POST", "/v1/responses", streamBody))
	q := e.state(1).Quota
	if q == nil || q.Primary != nil || q.Secondary == nil || q.Secondary.UsedPercent != 40 || !q.Secondary.ResetsAt.IsZero() {
		t.Errorf("quota kept: %+v", q)
	}
	if err := e.sel.Runtime().Sync(nil); err != nil {
		t.Errorf("state.json not written: %v", err)
	}
}

// A usage limit whose wait no Duration can hold (Inf, or centuries) is
// the longest limit rotor keeps (rotation.MaxRateLimit), not a wait that
// overflowed into the past and became the 60 s default.
func TestUsageLimitTooLongToHoldIsTheLongestKept(t *testing.T) {
	t.Parallel()
	for _, h := range []map[string]string{
		{"retry-after-ms": "Inf"},
		{"Retry-After": "1e300"},
	} {
		e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
		e.up.Set("k1", upstreamtest.Behavior{Status: 429, Headers: h})
		start := time.Now()
		readAll(t, e.do("POST", "/v1/responses", streamBody))
		near(t, fmt.Sprint(h), e.state(1).RateLimitedUntil, start.Add(rotation.MaxRateLimit), time.Minute)
	}
}
