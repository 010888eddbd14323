package proxy

import (
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// The headers Codex CLI sends with a turn reach a ChatGPT upstream, and the
// ones it reads come back, on the wire (docs/codex.md).
func TestCodexHeadersPassBothWays(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "cg"}})
	sent := map[string]string{
		"x-codex-turn-state":      "turn-state-abc",
		"x-codex-turn-metadata":   `{"turn":3}`,
		"x-codex-window-id":       "window-7",
		"x-openai-subagent":       "review",
		"x-codex-installation-id": "inst-1234",
		"x-codex-beta-features":   "unified_exec,apply_patch",
		"session_id":              "sess-42",
	}
	back := map[string]string{
		"x-codex-turn-state":                  "turn-state-def",
		"x-codex-primary-used-percent":        "12.5",
		"x-codex-primary-window-minutes":      "300",
		"x-codex-primary-reset-after-seconds": "4000",
		"x-codex-secondary-used-percent":      "40",
		"x-codex-secondary-window-minutes":    "10080",
		"x-codex-credits-has-credits":         "true",
		"x-codex-credits-balance":             "17.5",
		"x-models-etag":                       `W/"models-9"`,
		"x-reasoning-included":                "true",
	}
	e.up.Set("cg", upstreamtest.Behavior{Headers: back})
	var hdr []string
	for k, v := range sent {
		hdr = append(hdr, k, v)
	}
	resp := e.do("POST", "/v1/responses", streamBody, hdr...)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	reqs := e.up.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	for k, v := range sent {
		if got := reqs[0].Header.Get(k); got != v {
			t.Errorf("upstream got %s = %q, want %q", k, got, v)
		}
	}
	for k, v := range back {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("client got %s = %q, want %q", k, got, v)
		}
	}
}

// A pool all at its limit answers Codex with 429 and the x-codex-* quota
// headers of the account that resets first, so Codex shows its own limit
// banner with real numbers.
func TestAllLimitedCarriesTheSoonestAccountsQuota(t *testing.T) {
	t.Parallel()
	e := allLimited(t)
	for round := range 2 { // the second answers from state, asking no upstream
		resp := e.do("POST", "/v1/responses", streamBody)
		expectError(t, resp, 429, rerr.PoolExhausted)
		if got := resp.Header.Get("x-codex-secondary-used-percent"); got != "55" {
			t.Errorf("round %d: x-codex-secondary-used-percent %q, want the soonest account's 55", round, got)
		}
		if got := resp.Header.Get("x-codex-primary-used-percent"); got != "100" {
			t.Errorf("round %d: x-codex-primary-used-percent %q", round, got)
		}
		after, err := strconv.Atoi(resp.Header.Get("x-codex-primary-reset-after-seconds"))
		if err != nil || after < 40*60-5 || after > 40*60 {
			t.Errorf("round %d: x-codex-primary-reset-after-seconds %q, want about 2400", round, resp.Header.Get("x-codex-primary-reset-after-seconds"))
		}
		at, err := strconv.ParseInt(resp.Header.Get("x-codex-primary-reset-at"), 10, 64)
		if err != nil || at < time.Now().Add(40*time.Minute-5*time.Second).Unix() || at > time.Now().Add(40*time.Minute+time.Second).Unix() {
			t.Errorf("round %d: x-codex-primary-reset-at %q", round, resp.Header.Get("x-codex-primary-reset-at"))
		}
		if resp.Header.Get("x-codex-plan-type") != "plus" || resp.Header.Get("x-codex-primary-window-minutes") != "300" {
			t.Errorf("round %d: plan %q window %q", round, resp.Header.Get("x-codex-plan-type"), resp.Header.Get("x-codex-primary-window-minutes"))
		}
	}
	e.expectCounts(map[string]int{"late": 1, "soon": 1})
}

// Headers a Connection header names are hop-by-hop (RFC 9110 section 7.6.1):
// dropped in both directions, as httputil.ReverseProxy does.
func TestConnectionNamedHeadersStopAtTheProxy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k"}})
	e.up.Set("k", upstreamtest.Behavior{Headers: map[string]string{
		"Connection": "x-up-hop", "x-up-hop": "secret-of-the-hop", "x-up-kept": "1"}})
	resp := e.do("POST", "/v1/responses", streamBody,
		"Connection", "keep-alive, X-Client-Hop", "x-client-hop", "secret-of-the-hop", "x-client-kept", "1")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	up := e.up.Requests()[0].Header
	if up.Get("x-client-hop") != "" || up.Get("x-client-kept") != "1" {
		t.Errorf("upstream got x-client-hop %q, x-client-kept %q", up.Get("x-client-hop"), up.Get("x-client-kept"))
	}
	if resp.Header.Get("x-up-hop") != "" || resp.Header.Get("x-up-kept") != "1" {
		t.Errorf("client got x-up-hop %q, x-up-kept %q", resp.Header.Get("x-up-hop"), resp.Header.Get("x-up-kept"))
	}
}

// allLimited is a pool of two ChatGPT accounts both at their usage limit:
// "late" back in 3 hours, "soon" in 40 minutes, each with its x-codex-*
// quota on its 429.
func allLimited(t *testing.T) *env {
	e := newEnv(t, []acct{{accounts.KindChatGPT, "late"}, {accounts.KindChatGPT, "soon"}})
	limit := func(used, weekly string) map[string]string {
		return map[string]string{
			"x-codex-primary-used-percent":        used,
			"x-codex-primary-window-minutes":      "300",
			"x-codex-primary-reset-after-seconds": "{{RESETS_IN}}",
			"x-codex-secondary-used-percent":      weekly,
			"x-codex-secondary-window-minutes":    "10080",
			"x-codex-plan-type":                   "plus",
		}
	}
	e.up.Set("late", upstreamtest.Behavior{Status: 429, ResetIn: 3 * time.Hour, Headers: limit("100", "90")})
	e.up.Set("soon", upstreamtest.Behavior{Status: 429, ResetIn: 40 * time.Minute, Headers: limit("100", "55")})
	return e
}
