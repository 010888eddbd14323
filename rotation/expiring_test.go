package rotation

import (
	"math/rand/v2"
	"testing"
	"time"
)

// Unit tests of the score's "spending what expires first" term (docs/selection.md,
// expiring in select.go). The simulator (cmd/rotor-sim) measures the
// policy as a whole.

const weekWindowMinutes = 7 * 24 * 60

// weeklyLeft is a weekly window used percent used, resetting in left.
func weeklyLeft(now time.Time, used float64, left time.Duration) *Window {
	return &Window{UsedPercent: used, WindowMinutes: weekWindowMinutes, ResetsAt: now.Add(left)}
}

// fiveHourLeft is a five-hour window used percent used, resetting in left.
func fiveHourLeft(now time.Time, used float64, left time.Duration) *Window {
	return &Window{UsedPercent: used, WindowMinutes: 300, ResetsAt: now.Add(left)}
}

// picksFor makes n picks for new conversations a few minutes apart (so
// no account is preferred for having rested) and returns how many each
// account got, by 1-based index.
func (f *fixture) picksFor(n int) []int {
	f.t.Helper()
	counts := make([]int, len(f.pool.Accounts)+1)
	for range n {
		i := f.pick(&Request{})
		counts[i]++
		f.rt.Success(f.id(i), 200)
		f.clk.Advance(3 * time.Minute)
	}
	return counts
}

func TestExpiringPrefersTheWindowThatResetsSooner(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	now := f.clk.Now()
	// The same room left in both weekly windows; account 1's resets in a
	// day, account 2's in four.
	f.rt.SetQuota(f.id(1), Quota{Secondary: weeklyLeft(now, 40, 24*time.Hour)})
	f.rt.SetQuota(f.id(2), Quota{Secondary: weeklyLeft(now, 40, 4*24*time.Hour)})
	if i, why := f.sel.Next(); i != 1 || why != WhyBestScore {
		t.Fatalf("Next() = %d %q, want the account whose quota expires first", i, why)
	}
	if counts := f.picksFor(10); counts[1] != 10 {
		t.Fatalf("picks %v: new conversations did not go to the quota that expires first", counts[1:])
	}
	// The same, against an account nothing is known of: its quota does
	// not run out while nobody uses it, so the running one goes first.
	g := newFixture(t, 2)
	g.rt.SetQuota(g.id(2), Quota{Secondary: weeklyLeft(g.clk.Now(), 40, 24*time.Hour)})
	if counts := g.picksFor(10); counts[2] != 10 {
		t.Fatalf("picks %v: an unknown account won over quota about to expire", counts[1:])
	}
	// A five-hour window late in its time with room left goes first too.
	h := newFixture(t, 2)
	hnow := h.clk.Now()
	h.rt.SetQuota(h.id(1), Quota{Primary: fiveHourLeft(hnow, 30, 4*time.Hour)})
	h.rt.SetQuota(h.id(2), Quota{Primary: fiveHourLeft(hnow, 30, 30*time.Minute)})
	if counts := h.picksFor(10); counts[2] != 10 {
		t.Fatalf("picks %v: the five-hour window about to reset with room was not spent first", counts[1:])
	}
}

func TestExpiringDoesNotPreferANearlySpentAccount(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	now := f.clk.Now()
	// Account 1's window resets soonest, but 8% is all it has left (not
	// yet deferred); account 2's resets later with plenty of room.
	f.rt.SetQuota(f.id(1), Quota{Primary: fiveHourLeft(now, 92, 30*time.Minute)})
	f.rt.SetQuota(f.id(2), Quota{Secondary: weeklyLeft(now, 40, 4*24*time.Hour)})
	if counts := f.picksFor(10); counts[2] != 10 {
		t.Fatalf("picks %v: a nearly spent account was preferred", counts[1:])
	}
	if got := expiring(f.rt.Snapshot(f.id(1)).Quota, now.UnixNano()); got > 0 {
		t.Fatalf("expiring of a nearly spent window = %v, want none", got)
	}
	// An account on course to fill its window well before the reset
	// (60% used in the first hour of five) is not steered to either: a
	// new conversation there would have to move when it fills.
	g := newFixture(t, 2)
	gnow := g.clk.Now()
	g.rt.SetQuota(g.id(1), Quota{Primary: fiveHourLeft(gnow, 60, 4*time.Hour)})
	if got := expiring(g.rt.Snapshot(g.id(1)).Quota, gnow.UnixNano()); got >= 0 {
		t.Fatalf("expiring of a window on course to overrun = %v, want below 0", got)
	}
	if counts := g.picksFor(10); counts[2] != 10 {
		t.Fatalf("picks %v: an account on course to overrun its window was preferred to an unknown one", counts[1:])
	}
}

// Weekly quota that resets soon is spent through the account's five-hour
// windows: a five-hour window filling fast does not hold it back while it
// has room for more than the conversations already running there, and it
// stops drawing new ones when that room is gone (they would have to move).
func TestExpiringSpendsWeeklyQuotaUntilTheFiveHourWindowIsNearlyFull(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	now := f.clk.Now()
	// Account 1's weekly window has 60% left and resets in 20 hours; its
	// five-hour window is 40% used an hour into it (on course to fill
	// before its reset). Account 2 is unknown.
	busy := Quota{Primary: fiveHourLeft(now, 40, 4*time.Hour), Secondary: weeklyLeft(now, 40, 20*time.Hour)}
	f.rt.SetQuota(f.id(1), busy)
	if got := expiring(&busy, now.UnixNano()); got < 0.8 {
		t.Fatalf("expiring of weekly quota about to be lost, five-hour window busy = %v, want at least 0.8", got)
	}
	if counts := f.picksFor(10); counts[1] != 10 {
		t.Fatalf("picks %v: the weekly quota about to expire was not spent while its five-hour window had room", counts[1:])
	}
	// With 20% of the five-hour window left, that room belongs to the
	// conversations running there: new ones go elsewhere.
	g := newFixture(t, 2)
	gnow := g.clk.Now()
	full := Quota{Primary: fiveHourLeft(gnow, 80, 3*time.Hour), Secondary: weeklyLeft(gnow, 40, 20*time.Hour)}
	g.rt.SetQuota(g.id(1), full)
	if got := expiring(&full, gnow.UnixNano()); got > 0 {
		t.Fatalf("expiring with the five-hour window nearly full = %v, want none", got)
	}
	if counts := g.picksFor(10); counts[2] != 10 {
		t.Fatalf("picks %v: new conversations went to an account whose five-hour window is nearly full", counts[1:])
	}
}

func TestExpiringIsNeutralWhenNothingIsKnown(t *testing.T) {
	t.Parallel()
	now := newFakeClock().Now()
	ns := now.UnixNano()
	for name, q := range map[string]*Quota{
		"no snapshot":        nil,
		"no windows":         {PlanType: "plus"},
		"no window length":   {Primary: &Window{UsedPercent: 20, ResetsAt: now.Add(time.Hour)}},
		"no reset time":      {Primary: &Window{UsedPercent: 20, WindowMinutes: 300}},
		"already reset":      {Primary: fiveHourLeft(now, 80, -time.Minute), Secondary: weeklyLeft(now, 90, -time.Hour)},
		"just started":       {Primary: fiveHourLeft(now, 0, 5*time.Hour), Secondary: weeklyLeft(now, 0, 7*24*time.Hour)},
		"on pace to be used": {Secondary: weeklyLeft(now, 50, 84*time.Hour)},
	} {
		if got := expiring(q, ns); got != 0 {
			t.Errorf("%s: expiring = %v, want 0", name, got)
		}
	}
	// In the selection, too: a window that has just started changes no
	// pick, whichever account it is on (with nothing else to tell the
	// accounts apart, the per-process tie-breaker decides). As its time
	// runs with its room untouched, it starts to count.
	base, _ := newFixture(t, 2).sel.Next()
	for i := 1; i <= 2; i++ {
		f := newFixture(t, 2)
		f.rt.SetQuota(f.id(i), Quota{Primary: fiveHourLeft(now, 0, 5*time.Hour), Secondary: weeklyLeft(now, 0, 7*24*time.Hour)})
		if got, _ := f.sel.Next(); got != base {
			t.Fatalf("fresh windows on account %d: Next() = %d, with nothing known %d", i, got, base)
		}
	}
}

// Affinity comes before the score: a running conversation stays on its
// account even when another one's quota is about to expire.
func TestExpiringLeavesRunningConversationsOnTheirAccount(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	now := f.clk.Now()
	f.rt.SetQuota(f.id(1), Quota{Secondary: weeklyLeft(now, 20, 12*time.Hour)})
	f.sel.Bind("s:running", f.id(2))
	for range 5 {
		c, _ := f.sel.Pick(&Request{AffinityKey: "s:running"})
		if c.Index != 2 || c.Why != WhyAffinity {
			t.Fatalf("pick %+v: the conversation left its account", c)
		}
		f.rt.Success(f.id(2), 200)
		f.clk.Advance(time.Minute)
	}
	if c, _ := f.sel.Pick(&Request{AffinityKey: "s:new"}); c.Index != 1 {
		t.Fatalf("pick %+v: a new conversation did not go to the expiring quota", c)
	}
}

func TestExpiringStaysInItsRange(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(15, 15))
	now := newFakeClock().Now()
	win := func() *Window {
		if r.IntN(5) == 0 {
			return nil
		}
		minutes := []int{0, 300, weekWindowMinutes}[r.IntN(3)]
		left := time.Duration(r.Int64N(int64(2*weekWindowMinutes)*int64(time.Minute))) - time.Hour
		return &Window{UsedPercent: r.Float64()*120 - 10, WindowMinutes: minutes, ResetsAt: now.Add(left)}
	}
	for range 10_000 {
		q := &Quota{Primary: win(), Secondary: win()}
		if got := expiring(q, now.UnixNano()); got < -0.1 || got > 1 || got != got {
			t.Fatalf("expiring(%+v, %+v) = %v, outside [-0.1, 1]", q.Primary, q.Secondary, got)
		}
	}
}

// A model metered by a family of its own spends only that family's
// windows (docs/selection.md), so its request is weighed by their expiry, not the
// main windows'.
func TestExpiringReadsTheRequestsFamily(t *testing.T) {
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	e := &entry{}
	e.st.Quota = &Quota{
		Primary: &Window{UsedPercent: 10, WindowMinutes: 300, ResetsAt: now.Add(4 * time.Hour)},
		Families: []Family{{ID: "codex_sonic", LimitName: "sonic",
			// 90% left, 20 minutes to its reset: about to be lost.
			Primary: &Window{UsedPercent: 10, WindowMinutes: 300, ResetsAt: now.Add(20 * time.Minute)}}},
	}
	ns := now.UnixNano()
	main, fam := score(e, ns, 1, 0, MainFamily), score(e, ns, 1, 0, "codex_sonic")
	if fam-main < 0.4 {
		t.Fatalf("score for the family's request %.3f, for the main one %.3f: the family's expiring window should weigh", fam, main)
	}
}
