package proxy

import (
	"context"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/rotation"
)

type peerConfig struct {
	clock     clock.Clock
	seed      uint64
	refresher Refresher
	adopter   Adopter
	// secrets, when set, stands between the proxy and the home's secrets
	// (a planted bug, say).
	secrets func(SecretSource) SecretSource
	// usage, when set, stands between the proxy and the usage log.
	usage func(UsageSink) UsageSink
	// tls serves the fake upstream over TLS, with a certificate only the
	// proxy's Config.RootCAs trusts; systemRoots leaves RootCAs nil, so
	// the proxy trusts the system's roots only.
	tls, systemRoots bool
	log              io.Writer // the proxy's log; nil: none
	// upstreamIdle is the fake's idle timeout for keep-alive connections
	// (upstreamtest.Server.SetIdleTimeout); zero: none.
	upstreamIdle time.Duration
}

// peerOption configures a proxy started by env.peer.
type peerOption func(*peerConfig)

// withClock gives the proxy, its selector and its runtime state clock c.
func withClock(c clock.Clock) peerOption { return func(p *peerConfig) { p.clock = c } }

// withSystemRoots makes the proxy trust the system's roots only, not the
// fake upstream's certificate.
func withSystemRoots() peerOption { return func(p *peerConfig) { p.systemRoots = true } }

// withRefresher gives the proxy a token refresher.
func withRefresher(r Refresher) peerOption { return func(p *peerConfig) { p.refresher = r } }

// stallTimeout sets Config.StallTimeout.
func stallTimeout(d time.Duration) envOption { return func(c *Config) { c.StallTimeout = d } }

// responseTimeout sets Config.ResponseTimeout.
func responseTimeout(d time.Duration) envOption {
	return func(c *Config) { c.ResponseTimeout = d }
}

// peer starts a second proxy on e's ROTOR_HOME and in front of e's fake
// upstream: its own store handle, secrets, runtime state, selector and
// usage log, like a second `rotor serve` on the same machine. The returned
// env shares e's upstream and (initial) pool; it is shut down with the test.
func (e *env) peer(opts ...peerOption) *env {
	e.t.Helper()
	pc := peerConfig{seed: 2}
	for _, o := range opts {
		o(&pc)
	}
	return startProxy(e.t, e.up, e.store.Dir(), pc)
}

// watch runs rotation.Watch for e's proxy, as `rotor serve` does, until the
// test ends.
func (e *env) watch() {
	t := e.t
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rotation.Watch(ctx, e.store, e.sel, rotation.WatchInterval, func(err error) {
			t.Logf("watch: %v", err)
		}, e.aliases.Refresh)
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// prefer makes account i the selector's first choice by marking every other
// account as just used (the idle term of the score then favours i by far
// more than the per-process tie-breaker).
func (e *env) prefer(i int) {
	for j := 1; j <= len(e.pool.Accounts); j++ {
		if j != i {
			e.sel.Runtime().Used(e.id(j), 200)
		}
	}
}

// state returns the runtime state of the account at index i.
func (e *env) state(i int) rotation.AccountState { return e.sel.Runtime().Snapshot(e.id(i)) }

// status returns the `rotation status` view of the account at index i.
func (e *env) status(i int) rotation.AccountStatus { return e.sel.Status()[i-1] }

// setBaseURL points the account at index i to base in accounts.json and
// installs the new pool.
func (e *env) setBaseURL(i int, base string) {
	e.t.Helper()
	id := e.id(i)
	p, err := e.store.Update(func(p *accounts.Pool) error {
		p.At(p.IndexOf(id)).BaseURL = base
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.sel.SetPool(p)
}

// pin sets (or with i == 0 clears) the manual pin in accounts.json and
// installs the new pool.
func (e *env) pin(i int) {
	e.t.Helper()
	var id *string
	if i > 0 {
		s := e.id(i)
		id = &s
	}
	p, err := e.store.Update(func(p *accounts.Pool) error {
		p.PinnedAccountID = id
		p.AffinityGeneration++
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.sel.SetPool(p)
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// near fails the test unless got is within tol of want.
func near(t *testing.T, what string, got, want time.Time, tol time.Duration) {
	t.Helper()
	if d := got.Sub(want); d < -tol || d > tol {
		t.Errorf("%s = %s, want %s ± %s (off by %s)", what, got.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano), tol, d)
	}
}

// nearNum fails the test unless the JSON number v is within tol of want.
func nearNum(t *testing.T, what string, v any, want, tol float64) {
	t.Helper()
	f, ok := v.(float64)
	if !ok {
		t.Errorf("%s = %#v, want a number near %v", what, v, want)
		return
	}
	if math.Abs(f-want) > tol {
		t.Errorf("%s = %v, want %v ± %v", what, f, want, tol)
	}
}

// expectError checks a proxy-made error answer: status, code, that
// error.request_id is the x-request-id header, and returns the error.
func expectError(t *testing.T, resp *http.Response, status int, code string) apiError {
	t.Helper()
	rid := resp.Header.Get("x-request-id")
	if rid == "" {
		t.Error("no x-request-id header")
	}
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, readAll(t, resp))
	}
	got := decodeError(t, resp)
	if got.Code != code {
		t.Fatalf("code %q, want %q (error %+v)", got.Code, code, got.Extra)
	}
	if got.RequestID != rid {
		t.Errorf("error.request_id %q, x-request-id %q", got.RequestID, rid)
	}
	return got
}

// expectRetryHeaders checks retry-after-ms and Retry-After against a wait
// of about want.
func expectRetryHeaders(t *testing.T, resp *http.Response, want, tol time.Duration) {
	t.Helper()
	ms, err := strconv.ParseInt(resp.Header.Get("retry-after-ms"), 10, 64)
	if err != nil {
		t.Errorf("retry-after-ms %q", resp.Header.Get("retry-after-ms"))
	} else if d := time.Duration(ms)*time.Millisecond - want; d < -tol || d > tol {
		t.Errorf("retry-after-ms %d, want %d ± %s", ms, want.Milliseconds(), tol)
	}
	sec, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
	if err != nil {
		t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
	} else if d := time.Duration(sec)*time.Second - want; d < -tol-time.Second || d > tol+time.Second {
		t.Errorf("Retry-After %d, want %s ± %s", sec, want, tol)
	}
	if want < time.Minute-tol && resp.Header.Get("x-should-retry") != "" {
		t.Errorf("x-should-retry %q on a %s wait: clients should retry short waits", resp.Header.Get("x-should-retry"), want)
	}
}

// expectNoRetryHeaders checks that an answer promises no wait.
func expectNoRetryHeaders(t *testing.T, resp *http.Response) {
	t.Helper()
	for _, h := range []string{"retry-after-ms", "Retry-After"} {
		if v := resp.Header.Get(h); v != "" {
			t.Errorf("unexpected %s: %q", h, v)
		}
	}
}

// expectStream reads a 200 SSE answer to its end and checks it completed.
func expectStream(t *testing.T, resp *http.Response) {
	t.Helper()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d, want 200: %s", resp.StatusCode, readAll(t, resp))
	}
	if resp.Header.Get("x-request-id") == "" {
		t.Error("no x-request-id header")
	}
	defer resp.Body.Close()
	types := sseEvents(t, resp.Body)
	if len(types) == 0 || types[len(types)-1] != "response.completed" {
		t.Fatalf("stream events %v, want a completed stream", types)
	}
}

// counts returns how many requests the fake saw for each token.
func (e *env) counts(tokens ...string) []int {
	out := make([]int, len(tokens))
	for i, tok := range tokens {
		out[i] = e.up.Count(tok)
	}
	return out
}

// expectCounts checks how many requests each token reached the upstream with.
func (e *env) expectCounts(want map[string]int) {
	e.t.Helper()
	for tok, n := range want {
		if got := e.up.Count(tok); got != n {
			e.t.Errorf("upstream saw %d requests with %s, want %d", got, tok, n)
		}
	}
}

// skipReasons reads error.account_skip_reasons.
func skipReasons(t *testing.T, e apiError) map[string]string {
	t.Helper()
	raw, ok := e.Extra["account_skip_reasons"].(map[string]any)
	if !ok {
		t.Fatalf("account_skip_reasons = %#v", e.Extra["account_skip_reasons"])
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		s, _ := v.(string)
		out[k] = s
	}
	return out
}
