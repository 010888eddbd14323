package proxy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock/clocktest"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation"
)

// usagePaths are the two paths Codex CLI reads its usage limits from: the
// first when its chatgpt_base_url contains /backend-api, the second
// otherwise (codex-rs/backend-client/src/client.rs, PathStyle).
var usagePaths = []string{"/backend-api/wham/usage", "/api/codex/usage"}

// codexRateLimitStatus mirrors Codex CLI's RateLimitStatusPayload
// (codex-rs/codex-backend-openapi-models/src/models/rate_limit_status_payload.rs,
// rate_limit_status_details.rs, rate_limit_window_snapshot.rs) with every
// member Codex knows. decodeCodexUsage reads an answer into it with
// unknown members refused, so a member rotor renames fails, and with
// Codex's i32 members as int32, so a fraction fails as it does in serde.
type codexRateLimitStatus struct {
	PlanType              string                     `json:"plan_type"`
	RateLimit             *codexRateLimitDetails     `json:"rate_limit"`
	Credits               json.RawMessage            `json:"credits"`
	AdditionalRateLimits  json.RawMessage            `json:"additional_rate_limits"`
	RateLimitReachedType  *codexRateLimitReachedType `json:"rate_limit_reached_type"`
	SpendControl          json.RawMessage            `json:"spend_control"`
	RateLimitResetCredits json.RawMessage            `json:"rate_limit_reset_credits"`
	CurrentUsageNudge     json.RawMessage            `json:"current_usage_limit_nudge"`
	RateLimitUpsell       json.RawMessage            `json:"rate_limit_upsell"`
	AccountID             json.RawMessage            `json:"account_id"`
	UserID                json.RawMessage            `json:"user_id"`
}

type codexRateLimitDetails struct {
	Allowed         bool                  `json:"allowed"`
	LimitReached    bool                  `json:"limit_reached"`
	PrimaryWindow   *codexRateLimitWindow `json:"primary_window"`
	SecondaryWindow *codexRateLimitWindow `json:"secondary_window"`
}

type codexRateLimitReachedType struct {
	Type string `json:"type"`
}

type codexRateLimitWindow struct {
	UsedPercent        int32 `json:"used_percent"`
	LimitWindowSeconds int32 `json:"limit_window_seconds"`
	ResetAfterSeconds  int32 `json:"reset_after_seconds"`
	ResetAt            int32 `json:"reset_at"`
}

// codexPlans are the plan_type values Codex's PlanType names; newer Codex
// reads any other as unknown, older ones refuse the whole answer.
var codexPlans = map[string]bool{"guest": true, "free": true, "go": true, "plus": true, "pro": true,
	"prolite": true, "free_workspace": true, "team": true, "self_serve_business_usage_based": true,
	"business": true, "enterprise_cbp_usage_based": true, "education": true, "quorum": true, "k12": true,
	"enterprise": true, "edu": true, "unknown": true}

// decodeCodexUsage reads an answer of the usage routes as Codex does,
// failing the test where Codex would fail to parse it: a member it
// requires missing (serde's non-Option fields), one it does not know, a
// wrong type.
func decodeCodexUsage(t *testing.T, resp *http.Response) codexRateLimitStatus {
	t.Helper()
	body := readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("content-type %q", ct)
	}
	require := func(raw json.RawMessage, where string, names ...string) {
		t.Helper()
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("%s is not an object: %s", where, raw)
		}
		for _, n := range names {
			if v, ok := m[n]; !ok || string(v) == "null" {
				t.Errorf("%s lacks %q, which Codex requires: %s", where, n, raw)
			}
		}
	}
	require([]byte(body), "the answer", "plan_type")
	var top map[string]json.RawMessage
	json.Unmarshal([]byte(body), &top)
	if rl := top["rate_limit"]; rl != nil && string(rl) != "null" {
		require(rl, "rate_limit", "allowed", "limit_reached")
		var wins map[string]json.RawMessage
		json.Unmarshal(rl, &wins)
		for _, k := range []string{"primary_window", "secondary_window"} {
			if w := wins[k]; w != nil && string(w) != "null" {
				require(w, k, "used_percent", "limit_window_seconds", "reset_after_seconds", "reset_at")
			}
		}
	}
	var p codexRateLimitStatus
	dec := json.NewDecoder(bytes.NewReader([]byte(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("Codex could not read %s: %v", body, err)
	}
	if !codexPlans[p.PlanType] {
		t.Errorf("plan_type %q is not one Codex names", p.PlanType)
	}
	if p.AccountID != nil || p.UserID != nil {
		t.Errorf("the answer names an account or user: %s", body)
	}
	return p
}

// getUsage asks e for its usage limits on path, as Codex does.
func getUsage(t *testing.T, e *env, path string) codexRateLimitStatus {
	t.Helper()
	return decodeCodexUsage(t, e.do("GET", path, ""))
}

// expectWindow fails unless w is a window of the given length, used
// percent and reset, at now.
func expectWindow(t *testing.T, what string, w *codexRateLimitWindow, used int32, length time.Duration, reset, now time.Time) {
	t.Helper()
	if w == nil {
		t.Errorf("%s: no window, want %d%% of %s resetting at %s", what, used, length, reset.UTC())
		return
	}
	want := codexRateLimitWindow{UsedPercent: used, LimitWindowSeconds: int32(length / time.Second),
		ResetAfterSeconds: int32(reset.Sub(now) / time.Second), ResetAt: int32(reset.Unix())}
	if *w != want {
		t.Errorf("%s = %+v, want %+v", what, *w, want)
	}
}

func TestUsageLimitsAnswerInTheBackendShape(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "a"}})
	// The quota comes the way it does in use: headers of an answer.
	e.up.Set("a", upstreamtest.Behavior{ResetIn: 72 * time.Hour, Headers: map[string]string{
		"x-codex-plan-type":                   "pro",
		"x-codex-primary-used-percent":        "42.4",
		"x-codex-primary-window-minutes":      "300",
		"x-codex-primary-reset-after-seconds": "3600",
		"x-codex-secondary-used-percent":      "7",
		"x-codex-secondary-window-minutes":    "10080",
		"x-codex-secondary-reset-at":          "{{RESETS_AT}}",
	}})
	resp := e.do("POST", "/v1/responses", streamBody)
	readAll(t, resp)
	eventually(t, 5*time.Second, "the quota of the answer", func() bool { return e.state(1).Quota != nil })
	now := time.Now()
	for _, path := range usagePaths {
		p := getUsage(t, e, path)
		if p.PlanType != "pro" {
			t.Errorf("%s: plan_type %q, want pro", path, p.PlanType)
		}
		rl := p.RateLimit
		if rl == nil || !rl.Allowed || rl.LimitReached || rl.PrimaryWindow == nil || rl.SecondaryWindow == nil {
			t.Fatalf("%s: rate_limit %+v, want allowed with both windows", path, rl)
		}
		if w := rl.PrimaryWindow; w.UsedPercent != 42 || w.LimitWindowSeconds != 5*3600 ||
			w.ResetAfterSeconds < 3590 || w.ResetAfterSeconds > 3600 || int64(w.ResetAt) < now.Add(3590*time.Second).Unix() {
			t.Errorf("%s: primary_window %+v, want 42%% of 5 h resetting in an hour", path, *w)
		}
		if w := rl.SecondaryWindow; w.UsedPercent != 7 || w.LimitWindowSeconds != 7*24*3600 ||
			int64(w.ResetAt) < now.Add(72*time.Hour-10*time.Second).Unix() || int64(w.ResetAt) > now.Add(72*time.Hour+10*time.Second).Unix() {
			t.Errorf("%s: secondary_window %+v, want 7%% of a week resetting in 72 h", path, *w)
		}
		if p.RateLimitReachedType != nil {
			t.Errorf("%s: rate_limit_reached_type %+v while an account can serve", path, *p.RateLimitReachedType)
		}
	}
	if n := e.up.Count("a"); n != 1 {
		t.Errorf("upstream asked %d times, want 1: rotor answers usage itself", n)
	}
}

func TestUsageLimitsNeedTheClientKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "a"}})
	for _, path := range usagePaths {
		resp, err := testClient.Get(e.base + path)
		if err != nil {
			t.Fatal(err)
		}
		expectError(t, resp, 401, rerr.ProxyUnauthorized)
		// Only GET: the route is read-only.
		expectError(t, e.do("POST", path, "{}"), 404, rerr.ProxyNotFound)
	}
}

// frozenEnv is a proxy over accts whose clock stands at t0 until the test
// moves it, so windows and resets compare exactly.
func frozenEnv(t *testing.T, accts []acct) (*env, *clocktest.Fake, time.Time) {
	t0 := time.Now().Truncate(time.Second)
	clk := clocktest.Frozen(t0)
	return newEnv(t, accts).peer(withClock(clk)), clk, t0
}

func TestUsageLimitsShowTheAccountPickedNext(t *testing.T) {
	t.Parallel()
	e, _, t0 := frozenEnv(t, []acct{{accounts.KindChatGPT, "a"}, {accounts.KindChatGPT, "b"}})
	rt := e.sel.Runtime()
	rt.SetQuota(e.id(1), rotation.Quota{PlanType: "plus",
		Primary:   &rotation.Window{UsedPercent: 10, WindowMinutes: 300, ResetsAt: t0.Add(4 * time.Hour)},
		Secondary: &rotation.Window{UsedPercent: 20, WindowMinutes: 10080, ResetsAt: t0.Add(96 * time.Hour)}})
	rt.SetQuota(e.id(2), rotation.Quota{PlanType: "team",
		Primary:   &rotation.Window{UsedPercent: 55, WindowMinutes: 300, ResetsAt: t0.Add(2 * time.Hour)},
		Secondary: &rotation.Window{UsedPercent: 66, WindowMinutes: 10080, ResetsAt: t0.Add(48 * time.Hour)}})

	e.prefer(2)
	if i, _ := e.sel.Next(); i != 2 {
		t.Fatalf("next = %d, want 2", i)
	}
	p := getUsage(t, e, usagePaths[0])
	if p.PlanType != "team" || p.RateLimit == nil || !p.RateLimit.Allowed || p.RateLimit.LimitReached {
		t.Fatalf("plan %q, rate_limit %+v: want account 2's team plan, allowed", p.PlanType, p.RateLimit)
	}
	expectWindow(t, "primary of account 2", p.RateLimit.PrimaryWindow, 55, 5*time.Hour, t0.Add(2*time.Hour), t0)
	expectWindow(t, "secondary of account 2", p.RateLimit.SecondaryWindow, 66, 7*24*time.Hour, t0.Add(48*time.Hour), t0)

	// Account 2 waits now: the next request goes to account 1, and so do
	// the windows shown.
	rt.RateLimited(e.id(2), t0.Add(time.Hour))
	if i, _ := e.sel.Next(); i != 1 {
		t.Fatalf("next = %d, want 1", i)
	}
	p = getUsage(t, e, usagePaths[1])
	if p.PlanType != "plus" || p.RateLimit == nil || !p.RateLimit.Allowed {
		t.Fatalf("plan %q, rate_limit %+v: want account 1's plus plan, allowed", p.PlanType, p.RateLimit)
	}
	expectWindow(t, "primary of account 1", p.RateLimit.PrimaryWindow, 10, 5*time.Hour, t0.Add(4*time.Hour), t0)
	expectWindow(t, "secondary of account 1", p.RateLimit.SecondaryWindow, 20, 7*24*time.Hour, t0.Add(96*time.Hour), t0)
}

func TestUsageLimitsWhenEveryAccountWaitsShowTheSoonestReset(t *testing.T) {
	t.Parallel()
	e, _, t0 := frozenEnv(t, []acct{{accounts.KindChatGPT, "a"}, {accounts.KindChatGPT, "b"}, {accounts.KindChatGPT, "c"}})
	rt := e.sel.Runtime()
	rt.SetQuota(e.id(1), rotation.Quota{PlanType: "pro",
		Primary:   &rotation.Window{UsedPercent: 100, WindowMinutes: 300, ResetsAt: t0.Add(2 * time.Hour)},
		Secondary: &rotation.Window{UsedPercent: 40, WindowMinutes: 10080, ResetsAt: t0.Add(90 * time.Hour)}})
	// Account 2 comes back first, held back by its weekly window.
	rt.SetQuota(e.id(2), rotation.Quota{PlanType: "plus",
		Primary:   &rotation.Window{UsedPercent: 30, WindowMinutes: 300, ResetsAt: t0.Add(3 * time.Hour)},
		Secondary: &rotation.Window{UsedPercent: 99.5, WindowMinutes: 10080, ResetsAt: t0.Add(25 * time.Minute)}})
	rt.RateLimited(e.id(1), t0.Add(2*time.Hour))
	rt.RateLimited(e.id(2), t0.Add(30*time.Minute))
	rt.RateLimited(e.id(3), t0.Add(5*time.Hour)) // no quota seen

	if i, _ := e.sel.Next(); i != 0 {
		t.Fatalf("next = %d, want none", i)
	}
	for _, path := range usagePaths {
		p := getUsage(t, e, path)
		rl := p.RateLimit
		if p.PlanType != "plus" || rl == nil || rl.Allowed || !rl.LimitReached {
			t.Fatalf("%s: plan %q, rate_limit %+v: want account 2's plan, not allowed, limit reached", path, p.PlanType, rl)
		}
		if p.RateLimitReachedType == nil || p.RateLimitReachedType.Type != "rate_limit_reached" {
			t.Errorf("%s: rate_limit_reached_type %+v, want rate_limit_reached", path, p.RateLimitReachedType)
		}
		// The window that holds it back is used up until the pool's first
		// account comes back; the other stays as last seen.
		expectWindow(t, path+" secondary", rl.SecondaryWindow, 100, 7*24*time.Hour, t0.Add(30*time.Minute), t0)
		expectWindow(t, path+" primary", rl.PrimaryWindow, 30, 5*time.Hour, t0.Add(3*time.Hour), t0)
	}

	// With no quota ever seen of the account that comes back first, the
	// wait is still shown, as a primary window of unknown length.
	rt.Clear(e.id(1))
	rt.Clear(e.id(2))
	e.sel.SetProcessPin(e.id(3))
	p := getUsage(t, e, usagePaths[0])
	if p.PlanType != "plus" || p.RateLimit == nil || p.RateLimit.Allowed || !p.RateLimit.LimitReached {
		t.Fatalf("pinned to a waiting account: plan %q, rate_limit %+v", p.PlanType, p.RateLimit)
	}
	expectWindow(t, "pinned primary", p.RateLimit.PrimaryWindow, 100, 0, t0.Add(5*time.Hour), t0)
	if p.RateLimit.SecondaryWindow != nil {
		t.Errorf("secondary_window %+v, want none", *p.RateLimit.SecondaryWindow)
	}
}

func TestUsageLimitsAfterEveryAccountHitItsLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "a"}, {accounts.KindChatGPT, "b"}})
	e.up.Set("a", upstreamtest.Behavior{Status: 429, ResetIn: 2 * time.Hour})
	e.up.Set("b", upstreamtest.Behavior{Status: 429, ResetIn: 30 * time.Minute})
	expectError(t, e.do("POST", "/v1/responses", streamBody), 429, rerr.PoolExhausted)
	first := time.Now().Add(30 * time.Minute)
	p := getUsage(t, e, usagePaths[0])
	rl := p.RateLimit
	if rl == nil || rl.Allowed || !rl.LimitReached || rl.PrimaryWindow == nil {
		t.Fatalf("rate_limit %+v, want limit reached with a primary window", rl)
	}
	if w := rl.PrimaryWindow; w.UsedPercent != 100 || int64(w.ResetAt) < first.Add(-3*time.Second).Unix() || int64(w.ResetAt) > first.Add(3*time.Second).Unix() {
		t.Errorf("primary_window %+v, want 100%% used until %s", *w, first.UTC())
	}
}

func TestUsageLimitsWithoutQuotaNameNoAccount(t *testing.T) {
	t.Parallel()
	e, clk, t0 := frozenEnv(t, []acct{{accounts.KindAPIKey, "k1"}, {accounts.KindChatGPT, "a"}})

	// Nothing seen yet: the sign-in's plan, no windows.
	e.prefer(2)
	if i, _ := e.sel.Next(); i != 2 {
		t.Fatalf("next = %d, want 2", i)
	}
	p := getUsage(t, e, usagePaths[0])
	if p.PlanType != "plus" || p.RateLimit == nil || !p.RateLimit.Allowed ||
		p.RateLimit.PrimaryWindow != nil || p.RateLimit.SecondaryWindow != nil {
		t.Errorf("no quota seen: plan %q, rate_limit %+v", p.PlanType, p.RateLimit)
	}
	// An API key has no plan.
	clk.Advance(time.Second)
	e.prefer(1)
	if i, _ := e.sel.Next(); i != 1 {
		t.Fatalf("next = %d, want 1", i)
	}
	if p := getUsage(t, e, usagePaths[0]); p.PlanType != "unknown" {
		t.Errorf("API key next: plan %q, want unknown", p.PlanType)
	}

	// A window that has reset since it was seen starts again, empty.
	e.sel.Runtime().SetQuota(e.id(2), rotation.Quota{
		Primary: &rotation.Window{UsedPercent: 80, WindowMinutes: 300, ResetsAt: t0.Add(10 * time.Minute)}})
	clk.Advance(20 * time.Minute)
	now := t0.Add(20*time.Minute + time.Second)
	e.prefer(2)
	if i, _ := e.sel.Next(); i != 2 {
		t.Fatalf("next = %d, want 2", i)
	}
	p = getUsage(t, e, usagePaths[1])
	expectWindow(t, "primary after its reset", p.RateLimit.PrimaryWindow, 0, 5*time.Hour, now.Add(5*time.Hour), now)

	for _, path := range usagePaths {
		body := readAll(t, e.do("GET", path, ""))
		for _, secret := range []string{e.id(1), e.id(2), "a@example.com", "cg-a", `"k1"`, "r-a", testKey} {
			if strings.Contains(body, secret) {
				t.Errorf("%s names %q: %s", path, secret, body)
			}
		}
	}
}

func TestUsageLimitsOfAnEmptyPool(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	p := getUsage(t, e, usagePaths[0])
	if p.PlanType != "unknown" || p.RateLimit == nil || p.RateLimit.Allowed || p.RateLimit.LimitReached ||
		p.RateLimit.PrimaryWindow != nil || p.RateLimit.SecondaryWindow != nil {
		t.Errorf("empty pool: plan %q, rate_limit %+v", p.PlanType, p.RateLimit)
	}
}
