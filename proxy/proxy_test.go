package proxy

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

func TestStreamsAnswerThroughAPIKeyAccount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	resp := e.do("POST", "/v1/responses", streamBody)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("content-type %q", ct)
	}
	if resp.Header.Get("x-request-id") == "" {
		t.Error("no x-request-id")
	}
	types := sseEvents(t, resp.Body)
	resp.Body.Close()
	if len(types) == 0 || types[0] != "response.created" || types[len(types)-1] != "response.completed" {
		t.Fatalf("events %v", types)
	}
	reqs := e.up.Requests()
	if len(reqs) != 1 || reqs[0].Path != "/v1/responses" || reqs[0].Token != "k1" {
		t.Fatalf("upstream saw %+v", reqs)
	}
	if got := string(reqs[0].Body); got != streamBody {
		t.Errorf("body not forwarded byte for byte: %q", got)
	}
}

func TestChatGPTAdapterHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}})
	resp := e.do("POST", "/v1/responses", streamBody,
		"session_id", "sess-1", "x-api-key", testKey, "Cookie", "a=b", "OpenAI-Organization", "org-x", "version", "0.50.0")
	readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	r := e.up.Requests()[0]
	if r.Path != "/backend-api/codex/responses" {
		t.Errorf("path %s", r.Path)
	}
	want := map[string]string{
		"Authorization": "Bearer c1", "Chatgpt-Account-Id": "cg-c1", "Openai-Beta": "responses=experimental",
		"Originator": "codex_cli_rs", "Session_id": "sess-1", "Version": "0.50.0",
	}
	for k, v := range want {
		if got := r.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	for _, k := range []string{"X-Api-Key", "Cookie", "Openai-Organization"} {
		if got := r.Header.Get(k); got != "" {
			t.Errorf("header %s leaked upstream: %q", k, got)
		}
	}
}

func TestStreamIsIncremental(t *testing.T) {
	e := newEnv(t, []acct{{accounts.KindAPIKey, "slow"}})
	e.up.Set("slow", upstreamtest.Behavior{EventDelay: 200 * time.Millisecond})
	start := time.Now()
	resp := e.do("POST", "/v1/responses", streamBody)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "event: response.created") {
		t.Fatalf("first line %q, %v", line, err)
	}
	first := time.Since(start)
	types := sseEvents(t, br)
	total := time.Since(start)
	// 14 events 200 ms apart: the whole stream takes over 2.4 s; the first
	// event must not wait for it.
	if total < 2*time.Second {
		t.Fatalf("stream took only %s; the fake did not delay", total)
	}
	if first > 1500*time.Millisecond {
		t.Fatalf("first event after %s, whole stream %s: the proxy buffered", first, total)
	}
	if types[len(types)-1] != "response.completed" {
		t.Fatalf("events %v", types)
	}
}

// Host headers that only start like a loopback name, or hide another
// host behind a port, are refused before anything else (docs/selection.md). They
// go raw: net/http would not send some of them.
func TestGuardRefusesHostsThatOnlyLookLoopback(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	for _, host := range []string{"localhost.evil.example", "127.0.0.1.nip.io", "127.0.0.1.nip.io:8787",
		"localhost:80@evil.com", "localhost:x", "[::1]:80@evil.com", "[::1]x"} {
		out := e.rawRequest("GET /v1/models HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + testKey + "\r\nConnection: close\r\n\r\n")
		if !strings.HasPrefix(out, "HTTP/1.1 403") || !strings.Contains(out, rerr.ProxyForbiddenHost) {
			t.Errorf("Host %q: %.80q", host, out)
		}
	}
	for _, host := range []string{"localhost:8787", "127.0.0.1", "[::1]:8787", "localhost"} {
		if out := e.rawRequest("GET /v1/models HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + testKey + "\r\nConnection: close\r\n\r\n"); !strings.HasPrefix(out, "HTTP/1.1 200") {
			t.Errorf("Host %q refused: %.80q", host, out)
		}
	}
}

func TestGuards(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	cases := []struct {
		name   string
		method string
		path   string
		hdr    []string
		noKey  bool
		status int
		code   string
	}{
		{"no key", "POST", "/v1/responses", nil, true, 401, rerr.ProxyUnauthorized},
		{"wrong key", "POST", "/v1/responses", []string{"Authorization", "Bearer nope"}, false, 401, rerr.ProxyUnauthorized},
		{"unknown path without key", "GET", "/admin", nil, true, 401, rerr.ProxyUnauthorized},
		{"x-api-key", "GET", "/v1/models", []string{"Authorization", "", "x-api-key", testKey}, false, 200, ""},
		{"unknown path", "GET", "/v1/chat/completions", nil, false, 404, rerr.ProxyNotFound},
		{"wrong method", "GET", "/v1/responses", nil, false, 404, rerr.ProxyNotFound},
		{"foreign host", "POST", "/v1/responses", []string{"Host", "evil.example:8787"}, false, 403, rerr.ProxyForbiddenHost},
		{"foreign origin", "POST", "/v1/responses", []string{"Origin", "https://evil.example"}, false, 403, rerr.ProxyForbiddenHost},
		{"loopback origin", "POST", "/v1/responses", []string{"Origin", "http://localhost:3000"}, false, 200, ""},
		// Names that only start like a loopback one are someone else's.
		{"origin localhost.evil", "POST", "/v1/responses", []string{"Origin", "http://localhost.evil.example"}, false, 403, rerr.ProxyForbiddenHost},
		{"origin 127.0.0.1.nip.io", "POST", "/v1/responses", []string{"Origin", "http://127.0.0.1.nip.io:8787"}, false, 403, rerr.ProxyForbiddenHost},
		{"localhost host", "POST", "/responses", []string{"Host", "localhost:1"}, false, 200, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, e.base+c.path, strings.NewReader(streamBody))
			if !c.noKey {
				req.Header.Set("Authorization", "Bearer "+testKey)
			}
			for i := 0; i+1 < len(c.hdr); i += 2 {
				if c.hdr[i] == "Host" {
					req.Host = c.hdr[i+1]
					continue
				}
				req.Header.Set(c.hdr[i], c.hdr[i+1])
			}
			resp, err := testClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, readAll(t, resp))
			}
			if resp.Header.Get("x-request-id") == "" {
				t.Error("no x-request-id")
			}
			if c.code == "" {
				readAll(t, resp)
				return
			}
			if got := decodeError(t, resp); got.Code != c.code || got.RequestID != resp.Header.Get("x-request-id") {
				t.Fatalf("error %+v", got)
			}
		})
	}
	t.Run("absolute-form target", func(t *testing.T) {
		out := e.rawRequest("POST http://evil.example/v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + testKey + "\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
		if !strings.HasPrefix(out, "HTTP/1.1 403") || !strings.Contains(out, rerr.ProxyForbiddenHost) {
			t.Fatalf("got %q", out)
		}
	})
}

func TestPayloadTooLarge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}}, func(c *Config) { c.MaxBody = 1024 })
	big := `{"input":"` + strings.Repeat("x", 4096) + `"}`
	resp := e.do("POST", "/v1/responses", big)
	if resp.StatusCode != 413 {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
	}
	got := decodeError(t, resp)
	if got.Code != rerr.ProxyPayloadTooLarge || got.Extra["max_bytes"] != float64(1024) {
		t.Fatalf("error %+v", got)
	}
	if e.up.Count("k1") != 0 {
		t.Fatal("oversized request reached the upstream")
	}
}

// panicSecrets stands for a bug on the request path.
type panicSecrets struct{}

func (panicSecrets) Get(string) (secrets.Secret, error) { panic("boom: sk-secret-in-panic") }

// A panic on the request path answers 500 codex_runtime_rotation_proxy_error
// without leaking anything, and the proxy keeps serving.
func TestPanicBecomes500(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, []acct{{accounts.KindAPIKey, "k1"}}, peerConfig{seed: 1,
		secrets: func(SecretSource) SecretSource { return panicSecrets{} }})
	for range 2 { // the second request proves the process survived
		resp := e.do("POST", "/v1/responses", streamBody)
		if resp.StatusCode != 500 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		body := readAll(t, resp)
		if strings.Contains(body, "sk-secret") || strings.Contains(body, "goroutine") || !strings.Contains(body, rerr.ProxyError) {
			t.Fatalf("body %s", body)
		}
	}
}

// SetClientKey swaps the key a running proxy checks: from then on the old
// key gets the usual 401 payload and the new one is served. A key too
// short to be one is refused and leaves the old key in force.
func TestSetClientKeySwapsTheKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	models := func(key string) *http.Response {
		req, _ := http.NewRequest("GET", e.base+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if err := e.srv.SetClientKey("short"); err == nil {
		t.Error("a 5-character key was taken")
	}
	if r := models(testKey); r.StatusCode != 200 {
		t.Fatalf("before the swap: %d %s", r.StatusCode, readAll(t, r))
	} else {
		readAll(t, r)
	}
	next := "rotated-client-key-0123456789abcdef0123456789"
	if err := e.srv.SetClientKey(next); err != nil {
		t.Fatal(err)
	}
	r := models(testKey)
	if got := decodeError(t, r); r.StatusCode != 401 || got.Code != rerr.ProxyUnauthorized {
		t.Errorf("old key after the swap: %d %+v", r.StatusCode, got)
	}
	if r := models(next); r.StatusCode != 200 {
		t.Errorf("new key after the swap: %d %s", r.StatusCode, readAll(t, r))
	} else {
		readAll(t, r)
	}
}
