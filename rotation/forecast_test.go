package rotation

import (
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock/clocktest"
)

// fcPool builds a pool of n enabled API-key accounts with ids a1..an.
func fcPool(n int) *accounts.Pool {
	p := &accounts.Pool{Version: 1}
	for i := range n {
		id := "a" + string(rune('1'+i))
		p.Accounts = append(p.Accounts, accounts.Account{ID: id, Label: "acct-" + id, Kind: accounts.KindAPIKey, Enabled: true})
	}
	return p
}

func fcSelector(t *testing.T, p *accounts.Pool) (*Selector, *Runtime, *clocktest.Fake) {
	t.Helper()
	clock := clocktest.Frozen(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	rt := NewRuntime(t.TempDir(), clock)
	sel := NewSelector(rt, clock, 7)
	sel.SetPool(p)
	return sel, rt, clock
}

func TestForecastVerdictsWaitsAndRisk(t *testing.T) {
	t.Parallel()
	p := fcPool(7)
	p.Accounts[1].Enabled = false                    // a2 disabled
	p.Accounts[2].SetFlag(accounts.FlagTokenInvalid) // a3 flagged
	sel, rt, clock := fcSelector(t, p)
	now := clock.Now()
	rt.RateLimited("a4", now.Add(90*time.Second))         // a4 rate-limited 90 s
	rt.Cooldown("a5", CooldownServerError, 4*time.Second) // a5 cooling down
	rt.SetQuota("a6", Quota{Primary: &Window{UsedPercent: 97, WindowMinutes: 300, ResetsAt: now.Add(2 * time.Hour)},
		Secondary: &Window{UsedPercent: 60, ResetsAt: now.Add(72 * time.Hour)}}) // a6 deferred by quota
	rt.SetQuota("a7", Quota{Primary: &Window{UsedPercent: 80, ResetsAt: now.Add(time.Hour)}})

	fc := sel.Forecast()
	want := []struct {
		verdict, reason  string
		wait             time.Duration
		minRisk, maxRisk int
		factor           string
	}{
		{ForecastReady, "", 0, 0, 0, ""},
		{ForecastUnavailable, SkipDisabled, 0, 100, 100, "disabled"},
		{ForecastUnavailable, "flagged:token-invalid", 0, 100, 100, "flagged token-invalid"},
		{ForecastDelayed, SkipRateLimited, 90 * time.Second, 50, 50, "rate-limited"},
		{ForecastDelayed, "cooling-down:server-error", 4 * time.Second, 35, 35, "cooling down (server-error)"},
		{ForecastDelayed, ReasonQuotaDeferred, 2 * time.Hour, 29 + 18, 29 + 18, "primary quota 97% used"},
		{ForecastReady, "", 0, 24, 24, "primary quota 80% used"},
	}
	if len(fc.Accounts) != len(want) {
		t.Fatalf("%d accounts, want %d", len(fc.Accounts), len(want))
	}
	for i, w := range want {
		f := fc.Accounts[i]
		if f.Index != i+1 || f.Verdict != w.verdict || f.Reason != w.reason || f.Wait != w.wait {
			t.Errorf("account %d: verdict %q reason %q wait %v, want %q %q %v", i+1, f.Verdict, f.Reason, f.Wait, w.verdict, w.reason, w.wait)
		}
		if f.Risk < w.minRisk || f.Risk > w.maxRisk {
			t.Errorf("account %d: risk %d, want %d..%d (factors %v)", i+1, f.Risk, w.minRisk, w.maxRisk, f.RiskFactors)
		}
		if w.factor != "" && !strings.Contains(strings.Join(f.RiskFactors, "|"), w.factor) {
			t.Errorf("account %d: factors %v lack %q", i+1, f.RiskFactors, w.factor)
		}
		if f.Verdict != ForecastReady && f.Detail == "" {
			t.Errorf("account %d: no detail for a %s account", i+1, f.Verdict)
		}
		if w.wait > 0 && !f.ReadyAt.Equal(clock.Now().Add(w.wait)) {
			t.Errorf("account %d: ready at %v, want now+%v", i+1, f.ReadyAt, w.wait)
		}
	}
	if s := fc.Summary; s != (ForecastSummary{Total: 7, Ready: 2, Delayed: 3, Unavailable: 2}) {
		t.Errorf("summary %+v", s)
	}
	if next, why := sel.Next(); fc.Recommendation != (Recommendation{next, why}) {
		t.Errorf("recommendation %+v, Next says %d %q", fc.Recommendation, next, why)
	}
	if fc.Recommendation.Index != 1 && fc.Recommendation.Index != 7 {
		t.Errorf("recommended account %d, want a ready one (1 or 7)", fc.Recommendation.Index)
	}

	// Deadlines pass: the delays end by themselves.
	clock.Advance(3 * time.Hour)
	fc = sel.Forecast()
	for _, i := range []int{3, 4, 5} {
		if f := fc.Accounts[i]; f.Verdict != ForecastReady {
			t.Errorf("after 3h account %d is %s (%s), want ready", i+1, f.Verdict, f.Reason)
		}
	}
}

func TestForecastRecentFailuresAndCircuit(t *testing.T) {
	t.Parallel()
	sel, rt, clock := fcSelector(t, fcPool(2))
	rt.Failure("a1", CooldownNetworkError, NetworkErrorCooldown)
	clock.Advance(time.Second) // failures at one instant count once
	rt.Failure("a1", CooldownNetworkError, NetworkErrorCooldown)
	fc := sel.Forecast()
	f := fc.Accounts[0]
	if f.RecentFailures != 2 || f.Risk != 35+20 {
		t.Errorf("two failures: recent %d risk %d %v, want 2 and 55", f.RecentFailures, f.Risk, f.RiskFactors)
	}
	clock.Advance(time.Second)
	rt.Failure("a1", CooldownNetworkError, NetworkErrorCooldown) // third: the circuit opens
	f = sel.Forecast().Accounts[0]
	if f.State != SkipCircuitOpen || f.Verdict != ForecastDelayed || f.Wait != CircuitOpen {
		t.Errorf("circuit: state %q verdict %q wait %v", f.State, f.Verdict, f.Wait)
	}
	if f.Risk < 60 {
		t.Errorf("circuit-open risk %d, want >= 60", f.Risk)
	}
	if next, _ := sel.Next(); next != 2 || sel.Forecast().Recommendation.Index != 2 {
		t.Errorf("recommendation should avoid the open circuit: next %d", next)
	}
}

func TestForecastRecommendationFollowsPins(t *testing.T) {
	t.Parallel()
	p := fcPool(3)
	id := "a2"
	p.PinnedAccountID = &id
	sel, rt, clock := fcSelector(t, p)
	fc := sel.Forecast()
	if fc.PinnedIndex != 2 || fc.PinSource != PinManual || !fc.Accounts[1].Pinned {
		t.Errorf("pin: %d %q", fc.PinnedIndex, fc.PinSource)
	}
	if fc.Recommendation != (Recommendation{2, WhyManualPin}) {
		t.Errorf("recommendation %+v, want the pinned account", fc.Recommendation)
	}
	// The pinned account is limited: the proxy answers 503 and so does the
	// recommendation, even though others are ready.
	rt.RateLimited("a2", clock.Now().Add(time.Minute))
	fc = sel.Forecast()
	if fc.Recommendation.Index != 0 || !strings.Contains(fc.Recommendation.Reason, "unpin") {
		t.Errorf("recommendation %+v, want none while the pin cannot serve", fc.Recommendation)
	}
	if next, why := sel.Next(); fc.Recommendation != (Recommendation{next, why}) {
		t.Errorf("recommendation %+v differs from Next %d %q", fc.Recommendation, next, why)
	}
	sel.SetProcessPin("a3")
	fc = sel.Forecast()
	if fc.PinnedIndex != 3 || fc.PinSource != PinProcess || fc.Recommendation.Index != 3 {
		t.Errorf("process pin: pinned %d %q, recommendation %+v", fc.PinnedIndex, fc.PinSource, fc.Recommendation)
	}
}

func TestForecastEveryAccountDeferred(t *testing.T) {
	t.Parallel()
	sel, rt, clock := fcSelector(t, fcPool(2))
	now := clock.Now()
	rt.SetQuota("a1", Quota{Primary: &Window{UsedPercent: 99, ResetsAt: now.Add(time.Hour)}})
	rt.SetQuota("a2", Quota{Primary: &Window{UsedPercent: 100}}) // reset unknown
	fc := sel.Forecast()
	if fc.Summary.Delayed != 2 {
		t.Fatalf("summary %+v, want both delayed", fc.Summary)
	}
	if fc.Accounts[1].Wait != 0 || !fc.Accounts[1].ReadyAt.IsZero() {
		t.Errorf("unknown reset: wait %v", fc.Accounts[1].Wait)
	}
	if fc.Recommendation.Reason != WhyDeferred || fc.Recommendation.Index == 0 {
		t.Errorf("recommendation %+v, want a deferred pick like the proxy's", fc.Recommendation)
	}
}

func TestForecastEmptyPool(t *testing.T) {
	t.Parallel()
	sel, _, _ := fcSelector(t, fcPool(0))
	fc := sel.Forecast()
	if fc.Summary.Total != 0 || fc.Recommendation.Index != 0 || fc.Recommendation.Reason == "" {
		t.Errorf("empty pool: %+v", fc)
	}
}
