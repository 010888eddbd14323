package proxy

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/accounts"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// Guards a plausible slip in the code would break with no other test
// failing.

// A key that is most of the client key, or the key and more, is a wrong
// key: 401 over HTTP, either way it is sent, and on the WebSocket
// handshake, and nothing reaches an upstream.
func TestNearlyTheClientKeyIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	for name, key := range map[string]string{
		"its first 8 characters": testKey[:8],
		"all but its last":       testKey[:len(testKey)-1],
		"the key and an x":       testKey + "x",
	} {
		for _, as := range []string{"Authorization", "x-api-key"} {
			v := key
			if as == "Authorization" {
				v = "Bearer " + key
			}
			resp := e.do("POST", "/v1/responses", streamBody, "Authorization", "", as, v)
			if got := decodeError(t, resp); resp.StatusCode != 401 || got.Code != rerr.ProxyUnauthorized {
				t.Errorf("%s as %s: %d %+v, want 401", name, as, resp.StatusCode, got)
			}
		}
		_, resp, err := e.dialSocket("/v1/responses", "Authorization", "Bearer "+key)
		if err == nil || resp == nil || resp.StatusCode != 401 {
			t.Errorf("%s on the handshake: %v (%v), want 401 before any upgrade", name, resp, err)
		}
	}
	if n := len(e.up.Requests()); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
}

// A socket's pool, all at its limit, answers with an error frame that
// carries the x-codex-* quota of the account that resets first, as the HTTP
// answer carries them as headers (TestAllLimitedCarriesTheSoonestAccountsQuota).
func TestAllLimitedFrameCarriesTheSoonestAccountsQuota(t *testing.T) {
	t.Parallel()
	e := allLimited(t)
	c := e.openSocket()
	for round := range 2 { // the second answers from state, asking no upstream
		fs := turn(t, c, createFrame)
		f := fs[len(fs)-1].data
		if gjson.GetBytes(f, "type").Str != "error" || gjson.GetBytes(f, "status").Int() != 429 ||
			gjson.GetBytes(f, "error.code").Str != rerr.PoolExhausted {
			t.Fatalf("round %d: frame %s, want the 429 pool-exhausted error frame", round, f)
		}
		h := gjson.GetBytes(f, "headers")
		if got := h.Get("x-codex-secondary-used-percent").Str; got != "55" {
			t.Errorf("round %d: x-codex-secondary-used-percent %q, want the soonest account's 55", round, got)
		}
		if got := h.Get("x-codex-primary-used-percent").Str; got != "100" {
			t.Errorf("round %d: x-codex-primary-used-percent %q", round, got)
		}
		after, err := strconv.Atoi(h.Get("x-codex-primary-reset-after-seconds").Str)
		if err != nil || after < 40*60-5 || after > 40*60 {
			t.Errorf("round %d: x-codex-primary-reset-after-seconds %q, want about 2400", round, h.Get("x-codex-primary-reset-after-seconds").Str)
		}
		at, err := strconv.ParseInt(h.Get("x-codex-primary-reset-at").Str, 10, 64)
		if err != nil || at < time.Now().Add(40*time.Minute-5*time.Second).Unix() || at > time.Now().Add(40*time.Minute+time.Second).Unix() {
			t.Errorf("round %d: x-codex-primary-reset-at %q", round, h.Get("x-codex-primary-reset-at").Str)
		}
		if h.Get("x-codex-plan-type").Str != "plus" || h.Get("x-codex-primary-window-minutes").Str != "300" {
			t.Errorf("round %d: headers %s", round, h.Raw)
		}
		if h.Get("retry-after-ms").Str == "" {
			t.Errorf("round %d: no retry-after-ms in %s", round, h.Raw)
		}
	}
}

// A request one account refused for want of entitlement and another for
// its usage limit is not an entitlement error (which says no account will
// ever serve it, and is not retried): one account will, once its limit
// resets. It gets the retryable pool-exhausted answer of a pool at its
// limit (429, a usage limit with when to come back, the x-codex-* quota),
// whichever order the two were tried in.
func TestEntitlementAndUsageLimitIsRetryablePoolExhausted(t *testing.T) {
	t.Parallel()
	for _, first := range []int{1, 2} {
		t.Run("account "+strconv.Itoa(first)+" first", func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, []acct{{accounts.KindChatGPT, "plain"}, {accounts.KindChatGPT, "limited"}})
			e.up.Set("plain", upstreamtest.Behavior{Status: 404, ErrorFixture: "usage_not_included_404.json"})
			e.up.Set("limited", upstreamtest.Behavior{Status: 429, ResetIn: 30 * time.Minute, Headers: map[string]string{
				"x-codex-primary-used-percent": "100", "x-codex-primary-reset-after-seconds": "{{RESETS_IN}}"}})
			e.prefer(first)
			resp := e.do("POST", "/v1/responses", streamBody)
			got := decodeError(t, resp)
			if resp.StatusCode != http.StatusTooManyRequests || got.Code != rerr.PoolExhausted || !got.Retryable ||
				got.Extra["reason"] != "rate-limit" {
				t.Fatalf("%d %+v, want 429 pool exhausted, retryable, reason rate-limit", resp.StatusCode, got)
			}
			if got.Type != rerr.TypeUsageLimit {
				t.Errorf("type %q, want %q", got.Type, rerr.TypeUsageLimit)
			}
			nearNum(t, "resets_in_seconds", got.Extra["resets_in_seconds"], 30*60, 5)
			expectRetryHeaders(t, resp, 30*time.Minute, 5*time.Second)
			if resp.Header.Get("x-codex-primary-used-percent") == "" {
				t.Errorf("no x-codex-* quota of the limited account: %v", resp.Header)
			}
			e.expectCounts(map[string]int{"plain": 1, "limited": 1})
		})
	}
}

// TestLoopbackHostPort holds which Host headers are loopback: the
// literals clients send, any other loopback address, with or without a
// port, and nothing with a zone, a trailing dot or another host after it.
func TestLoopbackHostPort(t *testing.T) {
	for hp, want := range map[string]bool{
		"127.0.0.1": true, "127.0.0.1:8080": true, "localhost": true, "LocalHost:80": true,
		"127.1.2.3": true, "[::1]:80": true, "[::ffff:127.0.0.1]": true, "[0:0:0:0:0:0:0:1]": true,
		"[::1%25lo]": false, "[::1%lo]:80": false, "127.0.0.1.": false, "127.0.0.01": false,
		"localhost:80@evil.com": false, "1.2.3.4": false, "": false, "[::1]x": false, "localhost.": false,
	} {
		if got := loopbackHostPort([]byte(hp)); got != want {
			t.Errorf("loopbackHostPort(%q) = %v, want %v", hp, got, want)
		}
	}
}
