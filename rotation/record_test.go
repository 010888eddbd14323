package rotation

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts/home"
)

// Each outcome gives the account exactly its row of the failover table's
// "account gets" column.
func TestRecordGivesEachOutcomeItsRow(t *testing.T) {
	t.Parallel()
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
		rt.Record("a", tc.o, tc.status, Limit{Until: reset})
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

// Prune clears passed deadlines and drops removed accounts in state.json,
// keeps every field it does not know and every deadline still running,
// and forgets the same in memory, so this runtime's next Sync cannot
// bring them back.
func TestPruneEditsStateInPlace(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	now := clock.Now()
	dir := t.TempDir()
	rt := NewRuntime(dir, clock)
	rt.RateLimited("a", now.Add(time.Minute))
	rt.Cooldown("b", CooldownServerError, time.Hour)
	rt.Used("gone", 200)
	if err := rt.Sync(nil); err != nil {
		t.Fatal(err)
	}
	// A newer rotor's field, which this one does not know.
	data, _ := os.ReadFile(filepath.Join(dir, home.StateFile))
	data = bytes.Replace(data, []byte(`"health"`), []byte(`"from_the_future": 7, "health"`), 1)
	os.WriteFile(filepath.Join(dir, home.StateFile), data, 0o600)

	later := now.Add(2 * time.Minute)
	keep := func(id string) bool { return id != "gone" }
	dropped, cleared, damaged, err := rt.Prune(later, keep, false)
	if err != nil || damaged || strings.Join(dropped, ",") != "gone" || len(cleared) != 1 || !strings.HasPrefix(cleared["a"][0], "rate limit (ended 1m") {
		t.Fatalf("Prune: dropped %v cleared %v damaged %v err %v", dropped, cleared, damaged, err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, home.StateFile))
	if !bytes.Contains(after, []byte(`"from_the_future": 7`)) || bytes.Contains(after, []byte(`"gone"`)) ||
		bytes.Contains(after, []byte("rate_limited_until")) || !bytes.Contains(after, []byte("cooldown_until")) {
		t.Errorf("state.json after Prune:\n%s", after)
	}
	rt.Used("a", 200) // dirty: the next Sync writes this runtime's view
	if err := rt.Sync(keep); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, home.StateFile)); bytes.Contains(again, []byte("rate_limited_until")) || bytes.Contains(again, []byte(`"gone"`)) {
		t.Errorf("Sync brought pruned state back:\n%s", again)
	}
}
