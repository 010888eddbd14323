package rotation

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock/clocktest"
)

// fiveHour is a 5-hour window used%, resetting at reset.
func fiveHour(used float64, reset time.Time) *Window {
	return &Window{UsedPercent: used, WindowMinutes: 300, ResetsAt: reset}
}

// rateOf is the primary window's recent rate of id at the runtime's clock,
// -1 when unknown.
func rateOf(rt *Runtime, id string) float64 {
	st := rt.Snapshot(id)
	p, _ := st.Quota.RecentRates(rt.clock.Now())
	if p == nil {
		return -1
	}
	return *p
}

func TestRateFromTwoObservationsSharedThroughState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clock := clocktest.Frozen(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	rt := NewRuntime(dir, clock)
	reset := clock.Now().Add(4 * time.Hour)
	rt.SetQuota("a1", Quota{Primary: fiveHour(10, reset)})
	if r := rateOf(rt, "a1"); r != -1 {
		t.Errorf("one observation: rate %v, want unknown", r)
	}
	// An answer a minute later is too close to tell a rate from.
	clock.Advance(time.Minute)
	rt.SetQuota("a1", Quota{Primary: fiveHour(11, reset.Add(time.Second))})
	if r := rateOf(rt, "a1"); r != -1 {
		t.Errorf("a minute apart: rate %v, want unknown", r)
	}
	// Half an hour after the first, 5 points more: 10% of the window an hour.
	clock.Advance(29 * time.Minute)
	rt.SetQuota("a1", Quota{Primary: fiveHour(15, reset)})
	if r := rateOf(rt, "a1"); r != 10 {
		t.Errorf("10%% to 15%% in 30 minutes: rate %v, want 10", r)
	}

	// Another process on the home sees the same rate through state.json.
	if err := rt.Sync(nil); err != nil {
		t.Fatal(err)
	}
	other := NewRuntime(dir, clock)
	if err := other.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if r := rateOf(other, "a1"); r != 10 {
		t.Errorf("other process: rate %v, want 10", r)
	}
	// A rate is recent: an hour (a fifth of the window) after the last
	// observation it is no longer known.
	clock.Advance(61 * time.Minute)
	if r := rateOf(other, "a1"); r != -1 {
		t.Errorf("an hour after the last observation: rate %v, want unknown", r)
	}
}

func TestRateStartsOverWhenTheWindowResets(t *testing.T) {
	t.Parallel()
	clock := clocktest.Frozen(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	rt := NewRuntime(t.TempDir(), clock)
	reset := clock.Now().Add(4 * time.Hour)
	rt.SetQuota("a1", Quota{Primary: fiveHour(10, reset)})
	clock.Advance(30 * time.Minute)
	rt.SetQuota("a1", Quota{Primary: fiveHour(15, reset)})
	if r := rateOf(rt, "a1"); r != 10 {
		t.Fatalf("rate %v, want 10", r)
	}
	// The backend resets the window early: a new reset time, nothing used.
	clock.Advance(10 * time.Minute)
	newReset := clock.Now().Add(5 * time.Hour)
	rt.SetQuota("a1", Quota{Primary: fiveHour(0, newReset)})
	if r := rateOf(rt, "a1"); r != -1 {
		t.Errorf("just reset: rate %v, want unknown", r)
	}
	// The new window's rate counts from its own start only: 20 points in
	// 30 minutes (the old window's samples would make it 8.57).
	clock.Advance(30 * time.Minute)
	rt.SetQuota("a1", Quota{Primary: fiveHour(20, newReset)})
	if r := rateOf(rt, "a1"); r != 40 {
		t.Errorf("new window: rate %v, want 40", r)
	}
	// Once its reset time passes, the window has started again: unknown.
	clock.Advance(5 * time.Hour)
	if r := rateOf(rt, "a1"); r != -1 {
		t.Errorf("after the reset: rate %v, want unknown", r)
	}
}

// A steady use observed every 5 minutes for two days keeps a bounded
// history and reads as its rate.
func TestRateHistoryBounded(t *testing.T) {
	t.Parallel()
	clock := clocktest.Frozen(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	rt := NewRuntime(t.TempDir(), clock)
	start, reset := clock.Now(), clock.Now().Add(6*24*time.Hour)
	for range 48 * 12 {
		used := 0.5 * clock.Now().Sub(start).Hours()
		rt.SetQuota("a1", Quota{Secondary: &Window{UsedPercent: used, WindowMinutes: 10080, ResetsAt: reset}})
		clock.Advance(5 * time.Minute)
	}
	clock.Advance(-5 * time.Minute)
	st := rt.Snapshot("a1")
	if n := len(st.Quota.History.Secondary); n > rateSteps+2 || n < rateSteps {
		t.Errorf("history of %d samples, want about %d", n, rateSteps+1)
	}
	if _, s := st.Quota.RecentRates(clock.Now()); s == nil || math.Abs(*s-0.5) > 1e-9 {
		t.Errorf("weekly rate %v, want 0.5", s)
	}
}

// fcChatGPT is fcSelector over n ChatGPT accounts.
func fcChatGPT(t *testing.T, n int) (*Selector, *Runtime, *clocktest.Fake) {
	t.Helper()
	p := fcPool(n)
	for i := range p.Accounts {
		p.Accounts[i].Kind = accounts.KindChatGPT
	}
	return fcSelector(t, p)
}

// observe gives id a primary rate of perHour over the last 30 minutes,
// ending at used with reset at reset. The clock stands 30 minutes later.
func observe(rt *Runtime, clock *clocktest.Fake, ids []string, used, perHour []float64, resets []time.Time) {
	for i, id := range ids {
		rt.SetQuota(id, Quota{Primary: fiveHour(used[i]-perHour[i]/2, resets[i])})
	}
	clock.Advance(30 * time.Minute)
	for i, id := range ids {
		rt.SetQuota(id, Quota{Primary: fiveHour(used[i], resets[i])})
	}
}

func TestForecastRunsOutAndPoolBlocked(t *testing.T) {
	t.Parallel()
	sel, rt, clock := fcChatGPT(t, 2)
	start := clock.Now().Add(30 * time.Minute) // when the forecast is made
	// a1: 50% used, 20%/h, resets in 4h: full in 2h30m, out 1h30m.
	// a2: 70% used, 10%/h, resets in 5h: full in 3h, out 2h.
	observe(rt, clock, []string{"a1", "a2"}, []float64{50, 70}, []float64{20, 10},
		[]time.Time{start.Add(4 * time.Hour), start.Add(5 * time.Hour)})
	fc := sel.Forecast()
	if r := fc.Accounts[0].PrimaryRate; r == nil || *r != 20 || fc.Accounts[0].SecondaryRate != nil {
		t.Errorf("a1 rates %v %v, want 20 and unknown", r, fc.Accounts[0].SecondaryRate)
	}
	for i, want := range []time.Duration{150 * time.Minute, 3 * time.Hour} {
		if f := fc.Accounts[i]; f.Outlook != OutlookRunsOut || !f.RunsOutAt.Equal(start.Add(want)) || f.RunsOutWindow != "primary" {
			t.Errorf("a%d: %q at %v (%s), want runs-out at +%v", i+1, f.Outlook, f.RunsOutAt.Sub(start), f.RunsOutWindow, want)
		}
	}
	if want := (RunsOut{Index: 1, Window: "primary", At: start.Add(150 * time.Minute)}); fc.RunsOutNext != want {
		t.Errorf("runs out next %+v, want %+v", fc.RunsOutNext, want)
	}
	// Both out from 3h (a2 fills) until 4h (a1's window resets).
	want := PoolOutlook{Verdict: PoolBlocked, At: start.Add(3 * time.Hour), Until: start.Add(4 * time.Hour), Horizon: 5 * time.Hour}
	if p := fc.Pool; p.Verdict != want.Verdict || !p.At.Equal(want.At) || !p.Until.Equal(want.Until) || p.Horizon != want.Horizon || p.Unknown != nil {
		t.Errorf("pool %+v, want %+v", p, want)
	}
}

// A window that resets before the pool is blocked frees its account:
// a2 at 60% is full only from 4h, when a1 is back.
func TestForecastPoolNotBlockedAtTheRecentRate(t *testing.T) {
	t.Parallel()
	sel, rt, clock := fcChatGPT(t, 2)
	start := clock.Now().Add(30 * time.Minute)
	observe(rt, clock, []string{"a1", "a2"}, []float64{50, 60}, []float64{20, 10},
		[]time.Time{start.Add(4 * time.Hour), start.Add(5 * time.Hour)})
	fc := sel.Forecast()
	if p := fc.Pool; p.Verdict != PoolNotBlocked || !p.At.IsZero() || p.Horizon != 5*time.Hour {
		t.Errorf("pool %+v, want not blocked within 5h", p)
	}
	if fc.RunsOutNext.Index != 1 || fc.Accounts[1].Outlook != OutlookRunsOut {
		t.Errorf("runs out next %+v, a2 %q", fc.RunsOutNext, fc.Accounts[1].Outlook)
	}
}

// The window after the reset fills again at the recent rate: a2 resets in
// 1h without filling, and its next window, at 30%/h, is full 3h20m later,
// while a1 is still out.
func TestForecastLaterWindowsFillToo(t *testing.T) {
	t.Parallel()
	sel, rt, clock := fcChatGPT(t, 2)
	start := clock.Now().Add(30 * time.Minute)
	observe(rt, clock, []string{"a1", "a2"}, []float64{50, 15}, []float64{20, 30},
		[]time.Time{start.Add(4*time.Hour + 30*time.Minute), start.Add(time.Hour)})
	fc := sel.Forecast()
	if f := fc.Accounts[1]; !f.RunsOutAt.Equal(start.Add(4*time.Hour + 20*time.Minute)) {
		t.Errorf("a2 runs out at +%v, want +4h20m", f.RunsOutAt.Sub(start))
	}
	if p := fc.Pool; p.Verdict != PoolBlocked || !p.At.Equal(start.Add(4*time.Hour+20*time.Minute)) || !p.Until.Equal(start.Add(4*time.Hour+30*time.Minute)) {
		t.Errorf("pool %+v, want blocked from +4h20m to +4h30m", p)
	}
}

// An account whose rate is unknown is never taken for one that lasts.
func TestForecastUnknownRateIsNotZero(t *testing.T) {
	t.Parallel()
	sel, rt, clock := fcChatGPT(t, 3)
	start := clock.Now().Add(30 * time.Minute)
	// a1 runs out in 2h30m; a2 did not move (no use); a3 was never observed.
	observe(rt, clock, []string{"a1", "a2"}, []float64{50, 40}, []float64{20, 0},
		[]time.Time{start.Add(4 * time.Hour), start.Add(4 * time.Hour)})
	fc := sel.Forecast()
	for _, i := range []int{1, 2} {
		if f := fc.Accounts[i]; f.Outlook != OutlookUnknown || f.PrimaryRate != nil || !f.RunsOutAt.IsZero() {
			t.Errorf("a%d: outlook %q rate %v, want unknown", i+1, f.Outlook, f.PrimaryRate)
		}
	}
	if p := fc.Pool; p.Verdict != PoolNotBefore || !p.At.Equal(start.Add(150*time.Minute)) || !slices.Equal(p.Unknown, []int{2, 3}) {
		t.Errorf("pool %+v, want not before +2h30m with 2 and 3 unknown", p)
	}
	// With no rate known at all, nothing is foretold.
	sel2, rt2, _ := fcChatGPT(t, 1)
	rt2.SetQuota("a1", Quota{Primary: fiveHour(99, start.Add(time.Hour))})
	fc = sel2.Forecast()
	if fc.Pool.Verdict != PoolUnknown || fc.RunsOutNext.Index != 0 {
		t.Errorf("one observation: pool %+v, runs out %+v", fc.Pool, fc.RunsOutNext)
	}
}

// An account without quota windows (an API key) never runs out by quota,
// so the pool is not blocked while it can serve; a rate limit is an
// outage like a full window.
func TestForecastPoolCountsDelaysAndAPIKeys(t *testing.T) {
	t.Parallel()
	p := fcPool(2)
	p.Accounts[0].Kind = accounts.KindChatGPT
	sel, rt, clock := fcSelector(t, p)
	start := clock.Now().Add(30 * time.Minute)
	observe(rt, clock, []string{"a1"}, []float64{50}, []float64{20}, []time.Time{start.Add(4 * time.Hour)})
	if fc := sel.Forecast(); fc.Pool.Verdict != PoolNotBlocked || fc.Accounts[1].Outlook != "" {
		t.Errorf("with an API key: pool %+v, a2 %q", fc.Pool, fc.Accounts[1].Outlook)
	}
	rt.RateLimited("a2", start.Add(3*time.Hour))
	fc := sel.Forecast()
	if p := fc.Pool; p.Verdict != PoolBlocked || !p.At.Equal(start.Add(150*time.Minute)) || !p.Until.Equal(start.Add(3*time.Hour)) {
		t.Errorf("API key limited for 3h: pool %+v, want blocked +2h30m to +3h", p)
	}
}

// An account out for two reasons that overlap is back when the later one
// ends: the pool stays blocked until then.
func TestFirstBlockedJoinsOverlappingOutages(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(h float64) time.Time { return now.Add(hours(h)) }
	limitedThenFull := union([]outage{{at(2.5), at(4)}, {now, at(3)}})
	at1, until, ok := firstBlocked([][]outage{limitedThenFull, {{at(1), at(5)}}}, now, at(5))
	if !ok || !at1.Equal(at(1)) || !until.Equal(at(4)) {
		t.Errorf("blocked %v from +%v until +%v, want +1h until +4h", ok, at1.Sub(now), until.Sub(now))
	}
}
