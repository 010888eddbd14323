package rotation

import (
	"testing"
	"time"
)

// Each outcome gives the account exactly its row of the failover table's
// "account gets" column.
func TestRecordGivesEachOutcomeItsRow(t *testing.T) {
	clock := newFakeClock()
	now := clock.Now()
	reset := now.Add(40 * time.Minute)
	for _, tc := range []struct {
		o                  Outcome
		status             int
		limitedUntil       time.Time
		cooldown, reason   string
		cooldownFor        time.Duration
		healthDown, failed bool
		lastStatus         int
	}{
		{o: Unjudged},
		{o: Served, status: 200, lastStatus: 200},
		{o: Answered, status: 400, lastStatus: 400},
		{o: Limited, limitedUntil: reset, lastStatus: 429},
		{o: AuthRejected, reason: CooldownAuthFailure, cooldownFor: AuthFailureCooldown, healthDown: true},
		{o: TokenRevoked, reason: CooldownTokenInvalidated, cooldownFor: InvalidatedCooldown, healthDown: true},
		{o: ServerFault, reason: CooldownServerError, cooldownFor: ServerErrorCooldown, healthDown: true, failed: true},
		{o: NetworkFault, reason: CooldownNetworkError, cooldownFor: NetworkErrorCooldown, healthDown: true, failed: true},
	} {
		rt := NewRuntime(t.TempDir(), clock)
		rt.Record("a", tc.o, tc.status, reset)
		st := rt.Snapshot("a")
		var wantCooldown time.Time
		if tc.cooldownFor > 0 {
			wantCooldown = now.Add(tc.cooldownFor)
		}
		if !st.RateLimitedUntil.Equal(tc.limitedUntil) || !st.CooldownUntil.Equal(wantCooldown) || st.CooldownReason != tc.reason ||
			(len(st.Failures) > 0) != tc.failed || st.LastStatus != tc.lastStatus {
			t.Errorf("outcome %d: %+v", tc.o, st)
		}
		if down := st.Health > 0 && st.Health < 100; down != tc.healthDown {
			t.Errorf("outcome %d: health %d", tc.o, st.Health)
		}
	}
}
