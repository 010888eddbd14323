package proxy

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
)

// The real backends are served over TLS. A request reaches an upstream
// over HTTPS through the HTTP client, and a socket's turn through the
// WebSocket dialer, each checking the upstream's certificate against the
// roots the proxy was given. A proxy trusting only the system's roots
// refuses the same upstream: the certificate is checked, not waved
// through.
func TestUpstreamOverTLS(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, []acct{{accounts.KindAPIKey, "k1"}}, peerConfig{seed: 1, tls: true})
	if !strings.HasPrefix(e.up.URL(), "https://") {
		t.Fatalf("the upstream is at %s, want https", e.up.URL())
	}
	resp := e.do("POST", "/v1/responses", `{"model":"gpt-5","input":"hi","stream":true}`)
	if got := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(got, "response.completed") {
		t.Fatalf("HTTP over TLS: %d %.300s", resp.StatusCode, got)
	}
	c := e.openSocket()
	if got := types(turn(t, c, createFrame)); got[len(got)-1] != "response.completed" {
		t.Fatalf("a socket's turn over TLS: %v", got)
	}
	var ws bool
	for _, r := range e.up.Requests() {
		ws = ws || r.Method == "WS"
	}
	if !ws {
		t.Errorf("the turn did not go up on an upstream socket: %+v", e.up.Requests())
	}

	strict := e.peer(withSystemRoots())
	resp = strict.do("POST", "/v1/responses", `{"model":"gpt-5","input":"hi","stream":true}`)
	if got := readAll(t, resp); resp.StatusCode == 200 || strings.Contains(got, "response.completed") {
		t.Errorf("a proxy with the system's roots was answered by the fake: %d %.300s", resp.StatusCode, got)
	}
}

// A host that accepts a connection and never answers the TLS handshake is
// unreachable within the connect timeout, like one that refuses the
// connect: the request goes on to the next account, which is not blamed,
// and nothing waits for the (minutes long) response timeout.
func TestSilentTLSHostIsUnreachableWithinTheConnectTimeout(t *testing.T) {
	t.Parallel()
	silent := silentListener(t)
	e := newEnvWith(t, twoAPIKeys(), peerConfig{seed: 1, tls: true}, connectTimeout(300*time.Millisecond))
	e.setBaseURL(1, "https://"+silent+"/v1")
	e.prefer(1)
	start := time.Now()
	expectStream(t, e.do("POST", "/v1/responses", streamBody))
	if d := time.Since(start); d < 300*time.Millisecond || d > 3*time.Second {
		t.Errorf("failover past a silent TLS host took %s, want the connect timeout (300ms) and little more", d)
	}
	e.expectCounts(map[string]int{"bad": 0, "good": 1})
	if st := e.state(1); !st.CooldownUntil.IsZero() || len(st.Failures) != 0 {
		t.Errorf("the account behind a silent TLS host was marked: %+v", st)
	}
	if _, why := e.sel.Runtime().EndpointDownUntil("https://" + silent); !strings.Contains(why, "TLS handshake: no answer within 300ms") {
		t.Errorf("endpoint %s is marked unreachable for %q, want the handshake named", silent, why)
	}
}

// Every connection to a TLS host after the first resumes a session
// instead of verifying the host's certificates again, a socket's as well
// as the HTTP client's: they share the sessions.
func TestTLSConnectionsResumeTheirSession(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, []acct{{accounts.KindAPIKey, "k1"}}, peerConfig{seed: 1, tls: true})
	for range 3 {
		expectStream(t, e.do("POST", "/v1/responses", streamBody))
		e.srv.exits.CloseIdle() // the next request needs a new connection
	}
	if got := types(turn(t, e.openSocket(), createFrame)); got[len(got)-1] != "response.completed" {
		t.Fatalf("a socket's turn over TLS: %v", got)
	}
	var resumed []string
	for _, r := range e.up.Requests() {
		resumed = append(resumed, fmt.Sprintf("%s %v", r.Method, r.TLSResumed))
	}
	if want := []string{"POST false", "POST true", "POST true", "GET true", "WS true"}; !slices.Equal(resumed, want) {
		t.Errorf("connections resumed %v, want %v", resumed, want)
	}
}

// silentListener accepts connections on loopback and never reads or
// writes on them, until the test ends.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// connectTimeout sets Config.ConnectTimeout.
func connectTimeout(d time.Duration) envOption { return func(c *Config) { c.ConnectTimeout = d } }

// An upstream closes a keep-alive connection once it has been idle long
// enough, and may do so just as rotor takes it from the pool for the next
// request. That request is sent again on a new connection: it succeeds,
// no account is blamed and no other account is asked.
func TestUpstreamClosingIdleConnectionsCostsNothing(t *testing.T) {
	t.Parallel()
	for _, tlsOn := range []bool{true, false} {
		e := newEnvWith(t, twoAPIKeys(), peerConfig{seed: 1, tls: tlsOn, upstreamIdle: 50 * time.Millisecond})
		e.pin(1)
		for i := range 4 {
			expectStream(t, e.do("POST", "/v1/responses", streamBody))
			if i < 3 {
				time.Sleep(150 * time.Millisecond) // the fake closes the idle connection meanwhile
			}
		}
		e.expectCounts(map[string]int{"bad": 4, "good": 0})
		if st := e.state(1); !st.CooldownUntil.IsZero() || len(st.Failures) != 0 {
			t.Errorf("tls %v: account 1 was marked for its upstream closing idle connections: %+v", tlsOn, st)
		}
	}
}
