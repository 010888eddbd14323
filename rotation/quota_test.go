package rotation

import (
	"math"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts/clock/clocktest"
)

// A quota an upstream reports that state.json could not hold (a used
// share that is not a number, a reset thousands of years away, both
// readable from an x-codex-* header) is kept as far as it makes sense:
// the window without a number is dropped, the far reset is unknown, and
// so is a window length no Duration holds (it would overflow). So
// the state is still written, and every process on the home still reads
// the account's news; before, encoding/json refused the whole file while
// that quota was the newest.
func TestQuotaStateCannotHoldIsKeptAsFarAsItMakesSense(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := clocktest.Frozen(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	rt := NewRuntime(dir, clk)
	far := time.Unix(999999999999, 0) // year 33658
	for _, w := range []float64{math.NaN(), math.Inf(1)} {
		rt.SetQuota("a1", Quota{
			Primary:   &Window{UsedPercent: w, WindowMinutes: 300, ResetsAt: clk.Now().Add(time.Hour)},
			Secondary: &Window{UsedPercent: 40, WindowMinutes: 1 << 50, ResetsAt: far},
			PlanType:  "plus",
		})
		rt.RateLimited("a2", clk.Now().Add(time.Minute)) // news that must reach the file too
		if err := rt.Sync(nil); err != nil {
			t.Fatalf("used %v: state not written: %v", w, err)
		}
		other := NewRuntime(dir, clk)
		if err := other.Sync(nil); err != nil {
			t.Fatal(err)
		}
		q := other.Snapshot("a1").Quota
		if q == nil || q.Primary != nil || q.Secondary == nil || q.Secondary.UsedPercent != 40 ||
			!q.Secondary.ResetsAt.IsZero() || q.Secondary.WindowMinutes != 0 || q.PlanType != "plus" {
			t.Errorf("used %v: another process reads %+v", w, q)
		}
		if other.Snapshot("a2").RateLimitedUntil.IsZero() {
			t.Errorf("used %v: another process missed a2's rate limit", w)
		}
		clk.Advance(time.Minute)
	}
}

// A rate so slow that filling the window would take more hours than a
// Duration holds never fills it; before, the conversion overflowed into
// the past and the window read as full now.
func TestSlowRateNeverFillsTheWindow(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	w := &Window{UsedPercent: 10, WindowMinutes: 300, ResetsAt: now.Add(4 * time.Hour)}
	if outs, fill := windowOutlook(w, 1e-9, true, now, now, now.Add(7*24*time.Hour)); len(outs) != 0 || !fill.IsZero() {
		t.Errorf("%d outages, fills at %v; want none", len(outs), fill)
	}
}
