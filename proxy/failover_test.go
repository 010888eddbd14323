package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock/clocktest"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation"
)

// Tests of docs/selection.md's failover table, one row at a time, against a real
// listening proxy in front of the fake upstream: what the client gets, which
// accounts the upstream saw, and what state each account is left in.

func twoAPIKeys() []acct { return []acct{{accounts.KindAPIKey, "bad"}, {accounts.KindAPIKey, "good"}} }

func TestFailoverUsageLimitRateLimitsUntilReset(t *testing.T) {
	t.Parallel()
	httpDate := func(d time.Duration) string { return time.Now().Add(d).UTC().Format(http.TimeFormat) }
	cases := []struct {
		name string
		b    func() upstreamtest.Behavior
		// wait is how long the account must be rate-limited; tol how
		// precisely.
		wait, tol time.Duration
	}{
		{"codex 429 body resets_at", func() upstreamtest.Behavior {
			return upstreamtest.Behavior{Status: 429, ResetIn: 2 * time.Hour}
		}, 2 * time.Hour, 2 * time.Second},
		{"codex 404 usage_limit_reached", func() upstreamtest.Behavior {
			return upstreamtest.Behavior{Status: 404, ErrorFixture: "usage_limit_404.json", ResetIn: 30 * time.Minute}
		}, 30 * time.Minute, 2 * time.Second},
		{"429 rate_limit_exceeded retry-after seconds", func() upstreamtest.Behavior {
			return upstreamtest.Behavior{Status: 429, ErrorFixture: "rate_limit_exceeded_429.json",
				Headers: map[string]string{"retry-after": "17"}}
		}, 17 * time.Second, time.Second},
		{"404 rate_limit_exceeded retry-after seconds", func() upstreamtest.Behavior {
			return upstreamtest.Behavior{Status: 404, ErrorFixture: "rate_limit_exceeded_429.json",
				Headers: map[string]string{"retry-after": "23"}}
		}, 23 * time.Second, time.Second},
		{"429 retry-after-ms", func() upstreamtest.Behavior {
			return upstreamtest.Behavior{Status: 429, ErrorFixture: "rate_limit_exceeded_429.json",
				Headers: map[string]string{"retry-after-ms": "45500", "retry-after": "999"}}
		}, 45500 * time.Millisecond, time.Second},
		{"429 Retry-After HTTP date", func() upstreamtest.Behavior {
			return upstreamtest.Behavior{Status: 429, ErrorFixture: "rate_limit_exceeded_429.json",
				Headers: map[string]string{"Retry-After": httpDate(3 * time.Minute)}}
		}, 3 * time.Minute, 2 * time.Second},
		{"429 x-codex-primary-reset-at of a full window", func() upstreamtest.Behavior {
			return upstreamtest.Behavior{Status: 429, ErrorFixture: "server_error_500.json", ResetIn: 40 * time.Minute,
				Headers: map[string]string{"x-codex-primary-used-percent": "100", "x-codex-primary-reset-at": "{{RESETS_AT}}"}}
		}, 40 * time.Minute, 2 * time.Second},
		{"429 without any signal: 60 s default", func() upstreamtest.Behavior {
			return upstreamtest.Behavior{Status: 429, ErrorFixture: "rate_limit_exceeded_429.json"}
		}, rotation.DefaultRateLimit, time.Second},
		{"429 asking for 30 days: clamped to 7", func() upstreamtest.Behavior {
			return upstreamtest.Behavior{Status: 429, ErrorFixture: "rate_limit_exceeded_429.json",
				Headers: map[string]string{"retry-after": strconv.Itoa(30 * 24 * 3600)}}
		}, rotation.MaxRateLimit, time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, twoAPIKeys())
			e.up.Set("bad", c.b())
			e.prefer(1)
			start := time.Now()
			expectStream(t, e.do("POST", "/v1/responses", streamBody))
			e.expectCounts(map[string]int{"bad": 1, "good": 1})
			st := e.state(1)
			near(t, "rate_limited_until", st.RateLimitedUntil, start.Add(c.wait), c.tol+time.Since(start))
			if s := e.status(1); s.State != rotation.SkipRateLimited {
				t.Errorf("account 1 state %q, want rate-limited", s.State)
			}
			if s := e.status(2); s.State != "available" {
				t.Errorf("account 2 state %q, want available", s.State)
			}
			// The limited account is not asked again while limited.
			expectStream(t, e.do("POST", "/v1/responses", streamBody))
			e.expectCounts(map[string]int{"bad": 1, "good": 2})
		})
	}
}

func TestPoolExhaustedWhenEveryAccountIsRateLimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "a"}, {accounts.KindChatGPT, "b"}, {accounts.KindAPIKey, "c"}})
	e.up.Set("a", upstreamtest.Behavior{Status: 429, ResetIn: 2 * time.Hour})
	e.up.Set("b", upstreamtest.Behavior{Status: 429, ResetIn: 30 * time.Minute})
	e.up.Set("c", upstreamtest.Behavior{Status: 429, ErrorFixture: "rate_limit_exceeded_429.json", Headers: map[string]string{"retry-after": "3600"}})
	start := time.Now()
	first := start.Add(30 * time.Minute)

	check := func(resp *http.Response) {
		t.Helper()
		got := expectError(t, resp, 429, rerr.PoolExhausted)
		if got.Type != rerr.TypeUsageLimit || got.Category != rerr.CategoryRateLimit || !got.Retryable {
			t.Errorf("type %q category %q retryable %v", got.Type, got.Category, got.Retryable)
		}
		if got.Extra["reason"] != "rate-limit" {
			t.Errorf("reason %v", got.Extra["reason"])
		}
		if got.Extra["hint"] != `run "rotor rotation status"` {
			t.Errorf("hint %v", got.Extra["hint"])
		}
		left := time.Until(first)
		nearNum(t, "resets_at", got.Extra["resets_at"], float64(first.Unix()), 2)
		nearNum(t, "resets_in_seconds", got.Extra["resets_in_seconds"], left.Seconds(), 2)
		nearNum(t, "retry_after_ms", got.Extra["retry_after_ms"], float64(left.Milliseconds()), 2000)
		want := map[string]string{"1": "rate-limited", "2": "rate-limited", "3": "rate-limited"}
		if sr := skipReasons(t, got); len(sr) != 3 || sr["1"] != want["1"] || sr["2"] != want["2"] || sr["3"] != want["3"] {
			t.Errorf("account_skip_reasons %v, want %v", sr, want)
		}
		expectRetryHeaders(t, resp, left, 2*time.Second)
		// A 30-minute wait: SDKs must raise RateLimitError, not sleep.
		if v := resp.Header.Get("x-should-retry"); v != "false" {
			t.Errorf("x-should-retry %q, want false for a %s wait", v, left.Round(time.Second))
		}
	}
	check(e.do("POST", "/v1/responses", streamBody))
	e.expectCounts(map[string]int{"a": 1, "b": 1, "c": 1})
	for i, want := range []time.Duration{2 * time.Hour, 30 * time.Minute, time.Hour} {
		near(t, "rate_limited_until of account "+strconv.Itoa(i+1), e.state(i+1).RateLimitedUntil, start.Add(want), 2*time.Second+time.Since(start))
	}
	// Known limits answer at once, without asking any upstream.
	check(e.do("POST", "/v1/responses", streamBody))
	e.expectCounts(map[string]int{"a": 1, "b": 1, "c": 1})
}

func TestEntitlementSkipsAccountWithoutRateLimiting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoAPIKeys())
	e.up.Set("bad", upstreamtest.Behavior{Status: 404, ErrorFixture: "usage_not_included_404.json"})
	e.prefer(1)
	expectStream(t, e.do("POST", "/v1/responses", streamBody))
	e.expectCounts(map[string]int{"bad": 1, "good": 1})
	st := e.state(1)
	if !st.RateLimitedUntil.IsZero() || !st.CooldownUntil.IsZero() || !st.CircuitOpenUntil.IsZero() {
		t.Errorf("entitlement changed the account's state: %+v", st)
	}
	if s := e.status(1); s.State != "available" {
		t.Errorf("account 1 state %q, want available", s.State)
	}
}

func TestEntitlementErrorWhenNoAccountHasIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "x"}, {accounts.KindChatGPT, "y"}})
	for _, tok := range []string{"x", "y"} {
		e.up.Set(tok, upstreamtest.Behavior{Status: 404, ErrorFixture: "usage_not_included_404.json"})
	}
	resp := e.do("POST", "/v1/responses", streamBody)
	got := expectError(t, resp, 403, rerr.EntitlementError)
	nearNum(t, "upstream_status", got.Extra["upstream_status"], 404, 0)
	e.expectCounts(map[string]int{"x": 1, "y": 1})
	for i := 1; i <= 2; i++ {
		if s := e.status(i); s.State != "available" {
			t.Errorf("account %d state %q, want available", i, s.State)
		}
	}
}

func TestUnauthorizedCoolsDownAndRotates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "bad"}, {accounts.KindChatGPT, "good"}})
	e.up.Set("bad", upstreamtest.Behavior{Status: 401})
	e.prefer(1)
	start := time.Now()
	expectStream(t, e.do("POST", "/v1/responses", streamBody))
	e.expectCounts(map[string]int{"bad": 1, "good": 1})
	st := e.state(1)
	if st.CooldownReason != rotation.CooldownAuthFailure {
		t.Errorf("cooldown reason %q", st.CooldownReason)
	}
	near(t, "cooldown_until", st.CooldownUntil, start.Add(rotation.AuthFailureCooldown), time.Second+time.Since(start))
	if s := e.status(1); s.State != "cooling-down:auth-failure" {
		t.Errorf("state %q", s.State)
	}
	if !st.RateLimitedUntil.IsZero() {
		t.Error("a 401 rate-limited the account")
	}
}

func TestTokenInvalidatedStopsWithoutRotating(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "bad"}, {accounts.KindChatGPT, "good"}})
	e.up.Set("bad", upstreamtest.Behavior{Status: 401, ErrorFixture: "token_invalidated_401.json"})
	e.prefer(1)
	start := time.Now()
	resp := e.do("POST", "/v1/responses", streamBody)
	got := expectError(t, resp, 401, rerr.TokenInvalidated)
	nearNum(t, "account_index", got.Extra["account_index"], 1, 0)
	if got.Type != rerr.TypeAuthentication {
		t.Errorf("type %q", got.Type)
	}
	e.expectCounts(map[string]int{"bad": 1, "good": 0})

	st := e.state(1)
	if st.CooldownReason != rotation.CooldownTokenInvalidated {
		t.Errorf("cooldown reason %q", st.CooldownReason)
	}
	near(t, "cooldown_until", st.CooldownUntil, start.Add(rotation.InvalidatedCooldown), time.Second+time.Since(start))
	p, err := e.store.Load()
	if err != nil {
		t.Fatal(err)
	}
	a := p.At(p.IndexOf(e.id(1)))
	if r, ok := a.Flagged(); !ok || r != accounts.FlagTokenInvalid {
		t.Errorf("accounts.json flag %q %v, want token-invalid", r, ok)
	}
	if !a.Enabled {
		t.Error("token-invalid account was disabled")
	}
	if s := e.status(1); s.State != rotation.SkipFlagged || s.Reason != accounts.FlagTokenInvalid {
		t.Errorf("status %q (%q), want flagged (token-invalid)", s.State, s.Reason)
	}
	// The next request goes to the other account.
	expectStream(t, e.do("POST", "/v1/responses", streamBody))
	e.expectCounts(map[string]int{"bad": 1, "good": 1})
}

func TestDeactivatedWorkspaceDisablesAndRotates(t *testing.T) {
	t.Parallel()
	for _, status := range []int{402, 403} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			e := newEnv(t, []acct{{accounts.KindChatGPT, "bad"}, {accounts.KindChatGPT, "good"}})
			e.up.Set("bad", upstreamtest.Behavior{Status: status, ErrorFixture: "deactivated_workspace_402.json"})
			e.prefer(1)
			expectStream(t, e.do("POST", "/v1/responses", streamBody))
			e.expectCounts(map[string]int{"bad": 1, "good": 1})
			p, err := e.store.Load()
			if err != nil {
				t.Fatal(err)
			}
			a := p.At(p.IndexOf(e.id(1)))
			if r, ok := a.Flagged(); !ok || r != accounts.FlagDeactivated || a.Enabled {
				t.Errorf("accounts.json: flag %q %v enabled %v, want flagged and disabled", r, ok, a.Enabled)
			}
			if s := e.status(1); s.State != rotation.SkipDisabled {
				t.Errorf("state %q, want disabled", s.State)
			}
			expectStream(t, e.do("POST", "/v1/responses", streamBody))
			e.expectCounts(map[string]int{"bad": 1, "good": 2})
		})
	}
}

func TestCloudflareChallengeIsBlockedWithoutBlamingTheAccount(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		b    upstreamtest.Behavior
	}{
		{"challenge page", upstreamtest.Behavior{Status: 403}},
		{"html without cf-mitigated", upstreamtest.Behavior{Status: 403, Headers: map[string]string{"cf-mitigated": "no"}}},
		{"cf-mitigated on a JSON body", upstreamtest.Behavior{Status: 403, ErrorFixture: "bad_request_400.json",
			Headers: map[string]string{"cf-mitigated": "challenge"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, []acct{{accounts.KindChatGPT, "bad"}, {accounts.KindChatGPT, "good"}})
			e.up.Set("bad", c.b)
			e.prefer(1)
			resp := e.do("POST", "/v1/responses", streamBody)
			got := expectError(t, resp, 502, rerr.UpstreamBlocked)
			if got.Type != rerr.TypeServer {
				t.Errorf("type %q", got.Type)
			}
			expectNoRetryHeaders(t, resp)
			e.expectCounts(map[string]int{"bad": 1, "good": 0})
			if st := e.state(1); !st.RateLimitedUntil.IsZero() || !st.CooldownUntil.IsZero() ||
				!st.CircuitOpenUntil.IsZero() || len(st.Failures) > 0 || (!st.HealthAt.IsZero() && st.Health < 100) {
				t.Errorf("account state touched: %+v", st)
			}
			if s := e.status(1); s.State != "available" {
				t.Errorf("state %q", s.State)
			}
		})
	}
}

func TestServerErrorCoolsDownAndRotates(t *testing.T) {
	t.Parallel()
	for _, status := range []int{500, 502, 503} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			e := newEnv(t, twoAPIKeys())
			e.up.Set("bad", upstreamtest.Behavior{Status: status})
			e.prefer(1)
			start := time.Now()
			expectStream(t, e.do("POST", "/v1/responses", streamBody))
			e.expectCounts(map[string]int{"bad": 1, "good": 1})
			st := e.state(1)
			if st.CooldownReason != rotation.CooldownServerError || len(st.Failures) != 1 {
				t.Errorf("state %+v", st)
			}
			near(t, "cooldown_until", st.CooldownUntil, start.Add(rotation.ServerErrorCooldown), time.Second+time.Since(start))
			if s := e.status(1); s.State != "cooling-down:server-error" {
				t.Errorf("state %q", s.State)
			}
		})
	}
}

func TestThreeServerErrorsOpenTheCircuit(t *testing.T) {
	t.Parallel()
	clk := clocktest.Real()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "bad"}}).peer(withClock(clk))
	e.up.Set("bad", upstreamtest.Behavior{Status: 500})
	for i := 1; i <= 3; i++ {
		resp := e.do("POST", "/v1/responses", streamBody)
		got := expectError(t, resp, 503, rerr.PoolExhausted)
		if got.Extra["reason"] != "server-error" {
			t.Errorf("request %d: reason %v", i, got.Extra["reason"])
		}
		if e.up.Count("bad") != i {
			t.Fatalf("request %d: upstream saw %d requests", i, e.up.Count("bad"))
		}
		s := e.status(1)
		if i < 3 {
			if s.State != "cooling-down:server-error" {
				t.Fatalf("after %d failures: state %q", i, s.State)
			}
			// Let the 4 s cooldown pass, well within the 60 s window.
			clk.Advance(rotation.ServerErrorCooldown + 500*time.Millisecond)
			continue
		}
		if s.State != rotation.SkipCircuitOpen {
			t.Fatalf("after 3 failures: state %q, want circuit-open", s.State)
		}
		near(t, "circuit_open_until", e.state(1).CircuitOpenUntil, clk.Now().Add(rotation.CircuitOpen), time.Second)
	}
	// Past the cooldown but inside the open circuit: nothing is sent.
	clk.Advance(rotation.ServerErrorCooldown + time.Second)
	resp := e.do("POST", "/v1/responses", streamBody)
	got := expectError(t, resp, 503, rerr.PoolExhausted)
	if sr := skipReasons(t, got); sr["1"] != rotation.SkipCircuitOpen {
		t.Errorf("skip reasons %v", sr)
	}
	if got.Extra["reason"] != "server-error" {
		t.Errorf("reason %v", got.Extra["reason"])
	}
	expectRetryHeaders(t, resp, rotation.CircuitOpen-rotation.ServerErrorCooldown-time.Second, 2*time.Second)
	if e.up.Count("bad") != 3 {
		t.Errorf("an open circuit let a request through")
	}
	// Once the circuit closes, the account is tried again.
	clk.Advance(rotation.CircuitOpen)
	e.up.Set("bad", upstreamtest.Behavior{})
	expectStream(t, e.do("POST", "/v1/responses", streamBody))
}

func TestConnectErrorMarksTheEndpointNotTheAccount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoAPIKeys())
	dead := closedPort(t)
	e.setBaseURL(1, "http://"+dead+"/v1")
	e.prefer(1)
	expectStream(t, e.do("POST", "/v1/responses", streamBody))
	e.expectCounts(map[string]int{"bad": 0, "good": 1})
	// The account did nothing wrong: no cooldown, no failure on record.
	if st := e.state(1); !st.CooldownUntil.IsZero() || len(st.Failures) != 0 {
		t.Fatalf("the account behind an unreachable endpoint was marked: %+v", st)
	}
	if !e.srv.endpoints.IsDown("http://" + dead) {
		t.Errorf("endpoint %s is not marked unreachable", dead)
	}
}

func TestHungUpstreamMarksItsEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoAPIKeys(), stallTimeout(100*time.Millisecond), responseTimeout(300*time.Millisecond))
	e.up.Set("bad", upstreamtest.Behavior{HangHeaders: true})
	// The same fake under another name is another endpoint: the good
	// account is reached there.
	e.setBaseURL(2, strings.Replace(e.up.OpenAIBase(), "127.0.0.1", "localhost", 1))
	e.prefer(1)
	start := time.Now()
	expectStream(t, e.do("POST", "/v1/responses", streamBody))
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("failover after a hung upstream took %s", d)
	}
	e.expectCounts(map[string]int{"bad": 1, "good": 1})
	if st := e.state(1); !st.CooldownUntil.IsZero() {
		t.Errorf("account 1 was marked: %+v", st)
	}
	eventually(t, 2*time.Second, "the hung upstream request to end", func() bool { return e.up.Open() == 0 })
}

func TestOtherClientErrorsAreReturnedAsIs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		b        upstreamtest.Behavior
		code     string
		message  string
		wantType string
	}{
		{"422", upstreamtest.Behavior{Status: 422, ErrorFixture: "bad_request_400.json"}, "unsupported_parameter",
			"Unsupported parameter: 'temperature' is not supported with this model.", rerr.TypeInvalidRequest},
		{"404 model not found", upstreamtest.Behavior{Status: 404, ErrorFixture: "bad_request_400.json"}, "unsupported_parameter",
			"Unsupported parameter: 'temperature' is not supported with this model.", rerr.TypeInvalidRequest},
		{"400 detail string", upstreamtest.Behavior{Status: 400, ErrorFixture: "stream_required_400.json"}, "upstream_error",
			"Stream must be set to true", rerr.TypeInvalidRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, twoAPIKeys())
			e.up.Set("bad", c.b)
			e.prefer(1)
			resp := e.do("POST", "/v1/responses", streamBody)
			got := expectError(t, resp, c.b.Status, c.code)
			if got.Message != c.message || got.Type != c.wantType {
				t.Errorf("message %q type %q", got.Message, got.Type)
			}
			nearNum(t, "upstream_status", got.Extra["upstream_status"], float64(c.b.Status), 0)
			e.expectCounts(map[string]int{"bad": 1, "good": 0})
			if s := e.status(1); s.State != "available" {
				t.Errorf("state %q", s.State)
			}
		})
	}
}

func TestClientErrorIsReturnedNormalized(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoAPIKeys())
	e.up.Set("bad", upstreamtest.Behavior{Status: 400})
	e.prefer(1)
	resp := e.do("POST", "/v1/responses", streamBody)
	got := expectError(t, resp, 400, "unsupported_parameter")
	if got.Message != "Unsupported parameter: 'temperature' is not supported with this model." {
		t.Errorf("message %q", got.Message)
	}
	if got.Type != rerr.TypeInvalidRequest || got.Retryable {
		t.Errorf("type %q retryable %v", got.Type, got.Retryable)
	}
	nearNum(t, "upstream_status", got.Extra["upstream_status"], 400, 0)
	if id, _ := got.Extra["upstream_request_id"].(string); len(id) < 5 || id[:4] != "req_" {
		t.Errorf("upstream_request_id %v", got.Extra["upstream_request_id"])
	}
	if got.Extra["param"] != "temperature" {
		t.Errorf("param %v", got.Extra["param"])
	}
	expectNoRetryHeaders(t, resp)
	e.expectCounts(map[string]int{"bad": 1, "good": 0})
	if st := e.state(1); !st.CooldownUntil.IsZero() || !st.RateLimitedUntil.IsZero() || len(st.Failures) > 0 {
		t.Errorf("a client error changed the account's state: %+v", st)
	}
}

func TestAtMostFourAttempts(t *testing.T) {
	t.Parallel()
	toks := []string{"e1", "e2", "e3", "e4", "e5"}
	var accts []acct
	for _, tok := range toks {
		accts = append(accts, acct{accounts.KindAPIKey, tok})
	}
	e := newEnv(t, accts)
	e.up.SetDefault(upstreamtest.Behavior{Status: 500})
	resp := e.do("POST", "/v1/responses", streamBody)
	got := expectError(t, resp, 503, rerr.PoolExhausted)
	if got.Extra["reason"] != "server-error" || got.Type != rerr.TypeServer || !got.Retryable {
		t.Errorf("reason %v type %q retryable %v", got.Extra["reason"], got.Type, got.Retryable)
	}
	total, tried := 0, 0
	for _, tok := range toks {
		n := e.up.Count(tok)
		total += n
		if n > 0 {
			tried++
		}
	}
	if total != DefaultMaxAttempts || tried != DefaultMaxAttempts {
		t.Errorf("upstream saw %d requests on %d accounts, want 4 on 4", total, tried)
	}
	sr := skipReasons(t, got)
	cooling := 0
	for k, v := range sr {
		if v == "cooling-down:server-error" {
			cooling++
		} else if v == "" {
			t.Errorf("account %s has an empty skip reason", k)
		}
	}
	if cooling != 4 || len(sr) != 4 {
		t.Errorf("skip reasons %v, want 4 accounts cooling-down:server-error", sr)
	}
	// The fifth account could serve at once: only this request's attempt
	// budget is spent, so no wait is promised.
	nearNum(t, "retry_after_ms", got.Extra["retry_after_ms"], 0, 0)
	expectNoRetryHeaders(t, resp)
	// The next request gets the fifth account.
	e.up.SetDefault(upstreamtest.Behavior{})
	expectStream(t, e.do("POST", "/v1/responses", streamBody))
}

func TestAttemptBudgetSpentOnUsageLimits(t *testing.T) {
	t.Parallel()
	toks := []string{"e1", "e2", "e3", "e4", "e5"}
	var accts []acct
	for _, tok := range toks {
		accts = append(accts, acct{accounts.KindAPIKey, tok})
	}
	e := newEnv(t, accts)
	e.up.SetDefault(upstreamtest.Behavior{Status: 429, ResetIn: time.Hour})
	resp := e.do("POST", "/v1/responses", streamBody)
	got := expectError(t, resp, 503, rerr.PoolExhausted)
	if sr := skipReasons(t, got); len(sr) != 4 {
		t.Errorf("account_skip_reasons %v, want the 4 limited accounts", sr)
	}
	// One account is untried and usable: not "come back in an hour".
	nearNum(t, "retry_after_ms", got.Extra["retry_after_ms"], 0, 0)
	expectNoRetryHeaders(t, resp)
	// The reason is what this request met (usage limits), so Codex CLI
	// reads usage_limit_reached; but the reset it is told is now, since an
	// account can still serve, and the status is not 429.
	if got.Extra["reason"] != "rate-limit" || got.Type != rerr.TypeUsageLimit {
		t.Errorf("reason %v type %q, want rate-limit / usage_limit_reached", got.Extra["reason"], got.Type)
	}
	nearNum(t, "resets_in_seconds", got.Extra["resets_in_seconds"], 0, 0)
	nearNum(t, "resets_at", got.Extra["resets_at"], float64(time.Now().Unix()), 2)
	// The next request meets the last limit: now every account is limited.
	got = expectError(t, e.do("POST", "/v1/responses", streamBody), 429, rerr.PoolExhausted)
	if got.Extra["reason"] != "rate-limit" || len(skipReasons(t, got)) != 5 {
		t.Errorf("reason %v skip reasons %v", got.Extra["reason"], got.Extra["account_skip_reasons"])
	}
	total := 0
	for _, tok := range toks {
		total += e.up.Count(tok)
	}
	if total != 5 {
		t.Errorf("upstream saw %d requests, want 5", total)
	}
}

func TestPinnedAccountUnavailable(t *testing.T) {
	t.Parallel()
	for _, source := range []string{rotation.PinManual, rotation.PinProcess} {
		t.Run(source, func(t *testing.T) {
			e := newEnv(t, []acct{{accounts.KindChatGPT, "p1"}, {accounts.KindChatGPT, "p2"}, {accounts.KindAPIKey, "p3"}})
			if source == rotation.PinManual {
				e.pin(2)
			} else {
				e.sel.SetProcessPin(e.id(2))
			}
			e.up.Set("p2", upstreamtest.Behavior{Status: 429, ResetIn: 90 * time.Minute})
			reset := time.Now().Add(90 * time.Minute)
			check := func(resp *http.Response) {
				t.Helper()
				got := expectError(t, resp, 503, rerr.PinnedUnavailable)
				nearNum(t, "pinned_account_index", got.Extra["pinned_account_index"], 2, 0)
				if got.Extra["pin_source"] != source || got.Extra["reason"] != rotation.SkipRateLimited {
					t.Errorf("pin_source %v reason %v", got.Extra["pin_source"], got.Extra["reason"])
				}
				left := time.Until(reset)
				nearNum(t, "retry_after_ms", got.Extra["retry_after_ms"], float64(left.Milliseconds()), 2000)
				at, err := time.Parse(time.RFC3339, got.Extra["reset_at"].(string))
				if err != nil {
					t.Errorf("reset_at %v: %v", got.Extra["reset_at"], err)
				}
				near(t, "reset_at", at, reset, 2*time.Second)
				if sr := skipReasons(t, got); sr["2"] != rotation.SkipRateLimited {
					t.Errorf("account_skip_reasons %v", sr)
				}
				if !strings.Contains(got.Message, "rotor rotation status") || !strings.Contains(got.Message, "rotor unpin") {
					t.Errorf("message %q", got.Message)
				}
				expectRetryHeaders(t, resp, left, 2*time.Second)
			}
			// The pinned account's own 429 does not rotate.
			check(e.do("POST", "/v1/responses", streamBody))
			e.expectCounts(map[string]int{"p1": 0, "p2": 1, "p3": 0})
			// Known limited: refused without a call.
			check(e.do("POST", "/v1/responses", streamBody))
			e.expectCounts(map[string]int{"p1": 0, "p2": 1, "p3": 0})
		})
	}
	t.Run("server error", func(t *testing.T) {
		e := newEnv(t, twoAPIKeys())
		e.pin(1)
		e.up.Set("bad", upstreamtest.Behavior{Status: 500})
		resp := e.do("POST", "/v1/responses", streamBody)
		got := expectError(t, resp, 503, rerr.PinnedUnavailable)
		if got.Extra["reason"] != "cooling-down:server-error" || got.Extra["pin_source"] != rotation.PinManual {
			t.Errorf("reason %v pin_source %v", got.Extra["reason"], got.Extra["pin_source"])
		}
		e.expectCounts(map[string]int{"bad": 1, "good": 0})
	})
	t.Run("auth failure", func(t *testing.T) {
		e := newEnv(t, []acct{{accounts.KindChatGPT, "bad"}, {accounts.KindChatGPT, "good"}})
		e.sel.SetProcessPin(e.id(1))
		e.up.Set("bad", upstreamtest.Behavior{Status: 401})
		resp := e.do("POST", "/v1/responses", streamBody)
		got := expectError(t, resp, 503, rerr.PinnedUnavailable)
		if got.Extra["reason"] != "cooling-down:auth-failure" || got.Extra["pin_source"] != rotation.PinProcess {
			t.Errorf("reason %v pin_source %v", got.Extra["reason"], got.Extra["pin_source"])
		}
		e.expectCounts(map[string]int{"bad": 1, "good": 0})
	})
}

func TestPinnedHealthyAccountIsTheOnlyOneUsed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "h1"}, {accounts.KindAPIKey, "h2"}, {accounts.KindAPIKey, "h3"}})
	e.pin(2)
	for range 10 {
		expectStream(t, e.do("POST", "/v1/responses", streamBody))
	}
	e.expectCounts(map[string]int{"h1": 0, "h2": 10, "h3": 0})
	// A process pin wins over the manual pin.
	e.sel.SetProcessPin(e.id(3))
	for range 10 {
		expectStream(t, e.do("POST", "/v1/responses", streamBody))
	}
	e.expectCounts(map[string]int{"h1": 0, "h2": 10, "h3": 10})
	// Unpinned again: the load spreads.
	e.sel.SetProcessPin("")
	e.pin(0)
	for range 6 {
		expectStream(t, e.do("POST", "/v1/responses", streamBody))
	}
	if e.up.Count("h1") == 0 {
		t.Errorf("account 1 unused after unpinning: %v", e.counts("h1", "h2", "h3"))
	}
}

// fakeRefresher renews a token by prefixing it with "fresh-" and stores
// it, as accounts/oauth does, or fails.
type fakeRefresher struct {
	store secrets.Store
	mu    sync.Mutex
	calls []string // stale access tokens it was asked to renew
	fail  bool
}

func newFakeRefresher(t *testing.T, e *env, fail bool) *fakeRefresher {
	t.Helper()
	st, err := secrets.Open(e.store.Dir(), "file", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeRefresher{store: st, fail: fail}
}

func (f *fakeRefresher) Refresh(_ context.Context, a accounts.Account, stale secrets.Secret) (secrets.Secret, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, stale.AccessToken)
	if f.fail {
		return secrets.Secret{}, rerr.AuthRefreshFailed(true, errors.New("token endpoint down"))
	}
	next := secrets.Secret{AccessToken: "fresh-" + stale.AccessToken, RefreshToken: "r2"}
	if err := f.store.Set(a.ID, next); err != nil {
		return secrets.Secret{}, err
	}
	return next, nil
}

func (f *fakeRefresher) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func TestUnauthorizedRefreshesOnceOnTheSameAccount(t *testing.T) {
	t.Parallel()
	t.Run("refresh works", func(t *testing.T) {
		a := newEnv(t, []acct{{accounts.KindChatGPT, "old"}, {accounts.KindChatGPT, "other"}})
		ref := newFakeRefresher(t, a, false)
		e := a.peer(withRefresher(ref))
		e.up.Set("old", upstreamtest.Behavior{Status: 401})
		e.prefer(1)
		expectStream(t, e.do("POST", "/v1/responses", streamBody))
		e.expectCounts(map[string]int{"old": 1, "fresh-old": 1, "other": 0})
		if c := ref.Calls(); len(c) != 1 || c[0] != "old" {
			t.Errorf("refresher calls %v", c)
		}
		st := e.state(1)
		if !st.CooldownUntil.IsZero() || st.TokensAt.IsZero() {
			t.Errorf("state %+v: want no cooldown and tokens_at set", st)
		}
		// The renewed token is used from then on.
		e.sel.SetProcessPin(e.id(1))
		expectStream(t, e.do("POST", "/v1/responses", streamBody))
		e.expectCounts(map[string]int{"old": 1, "fresh-old": 2})
	})
	t.Run("refresh fails", func(t *testing.T) {
		a := newEnv(t, []acct{{accounts.KindChatGPT, "old"}, {accounts.KindChatGPT, "other"}})
		ref := newFakeRefresher(t, a, true)
		e := a.peer(withRefresher(ref))
		e.up.Set("old", upstreamtest.Behavior{Status: 401})
		e.prefer(1)
		expectStream(t, e.do("POST", "/v1/responses", streamBody))
		e.expectCounts(map[string]int{"old": 1, "other": 1})
		if c := ref.Calls(); len(c) != 1 {
			t.Errorf("refresher calls %v", c)
		}
		if s := e.status(1); s.State != "cooling-down:auth-failure" {
			t.Errorf("state %q", s.State)
		}
	})
	t.Run("renewed token refused too", func(t *testing.T) {
		a := newEnv(t, []acct{{accounts.KindChatGPT, "old"}, {accounts.KindChatGPT, "other"}})
		ref := newFakeRefresher(t, a, false)
		e := a.peer(withRefresher(ref))
		e.up.Set("old", upstreamtest.Behavior{Status: 401})
		e.up.Set("fresh-old", upstreamtest.Behavior{Status: 401})
		e.prefer(1)
		expectStream(t, e.do("POST", "/v1/responses", streamBody))
		e.expectCounts(map[string]int{"old": 1, "fresh-old": 1, "fresh-fresh-old": 0, "other": 1})
		if c := ref.Calls(); len(c) != 1 {
			t.Errorf("refresher calls %v: want exactly one refresh", c)
		}
		if s := e.status(1); s.State != "cooling-down:auth-failure" {
			t.Errorf("state %q", s.State)
		}
	})
}
