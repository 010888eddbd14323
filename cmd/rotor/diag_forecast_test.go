package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock/clocktest"
	"github.com/rotorproxy/rotor/rotation"
)

// `rotor forecast` reads the quota the serve observed: the recent rate of
// each window, the account that runs out next and when the pool would be
// blocked.
func TestDiagForecastRecentRates(t *testing.T) {
	t.Parallel()
	h := newDiagHome(t)
	p := h.prep.Write(diagChatGPT("fast", "cg-1", "at-1", "rt-1", time.Hour), diagChatGPT("slow", "cg-2", "at-2", "rt-2", time.Hour),
		diagChatGPT("new", "cg-3", "at-3", "rt-3", time.Hour))
	// Two usage reads half an hour apart, the last one just now: fast
	// went 40% → 50% (20%/h) and resets in 4h, slow 65% → 70% (10%/h) and
	// resets in 5h; new was never read.
	obs := time.Now()
	clock := clocktest.Frozen(obs.Add(-30 * time.Minute))
	rt := rotation.NewRuntime(h.dir, clock)
	win := func(used float64, reset time.Duration) *rotation.Window {
		return &rotation.Window{UsedPercent: used, WindowMinutes: 300, ResetsAt: obs.Add(reset)}
	}
	rt.SetQuota(p.Accounts[0].ID, rotation.Quota{Primary: win(40, 4*time.Hour)})
	rt.SetQuota(p.Accounts[1].ID, rotation.Quota{Primary: win(65, 5*time.Hour)})
	clock.Advance(30 * time.Minute)
	rt.SetQuota(p.Accounts[0].ID, rotation.Quota{Primary: win(50, 4*time.Hour)})
	rt.SetQuota(p.Accounts[1].ID, rotation.Quota{Primary: win(70, 5*time.Hour)})
	if err := rt.Sync(nil); err != nil {
		t.Fatal(err)
	}
	rfc := func(d time.Duration) string { return obs.Add(d).UTC().Format(time.RFC3339) }

	// new has no rate: fast and slow are out at once from 3h (slow full)
	// to 4h (fast resets), so the pool is blocked no sooner than 3h.
	v := h.runJSON(0, "forecast", "--json")
	if r := diagField(t, v, "accounts", 0, "rate_per_hour"); r.(map[string]any)["primary"] != 20.0 || r.(map[string]any)["secondary"] != nil {
		t.Errorf("fast rate_per_hour %v, want primary 20, secondary null", r)
	}
	for i, want := range []struct {
		outlook, at any
	}{{"runs-out", rfc(150 * time.Minute)}, {"runs-out", rfc(3 * time.Hour)}, {"unknown", nil}} {
		if a := diagField(t, v, "accounts", i).(map[string]any); a["outlook"] != want.outlook || a["runs_out_at"] != want.at {
			t.Errorf("account %d: outlook %v runs_out_at %v, want %v %v", i+1, a["outlook"], a["runs_out_at"], want.outlook, want.at)
		}
	}
	next := diagField(t, v, "runs_out_next").(map[string]any)
	if next["index"] != 1.0 || next["window"] != "primary" || next["at"] != rfc(150*time.Minute) || next["in_seconds"].(float64) > 9000 || next["in_seconds"].(float64) < 8990 {
		t.Errorf("runs_out_next %v, want account 1's primary window in 2h30m", next)
	}
	pool := diagField(t, v, "pool").(map[string]any)
	if pool["verdict"] != "not-before" || pool["at"] != rfc(3*time.Hour) || pool["until"] != nil || pool["horizon_seconds"] != 18000.0 ||
		!slices.Equal(pool["unknown_rate_accounts"].([]any), []any{3.0}) {
		t.Errorf("pool %v, want not-before 3h with account 3 unknown", pool)
	}
	h.wantLines("forecast", `(?m)^\s+1\s+ready\s.*fast\s+█████░░░░░\s+50% used, resets in 4h, \+20%/h\s+-\s+in 2h30m\s`,
		`(?m)^\s+3\s+ready\s.*new\s+-\s+-\s+\?\s`,
		`(?m)^  Runs out next: account 1 \(fast\), its primary window full in 2h30m$`,
		`(?m)^  Pool blocked:  in 3h at the soonest; no recent rate yet for account 3$`)

	// Without new, the pool is blocked from 3h for 1h.
	h.prep.Update(func(p *accounts.Pool) { p.Accounts[2].Enabled = false })
	pool = diagField(t, h.runJSON(0, "forecast", "--json"), "pool").(map[string]any)
	if pool["verdict"] != "blocked" || pool["at"] != rfc(3*time.Hour) || pool["until"] != rfc(4*time.Hour) || len(pool["unknown_rate_accounts"].([]any)) != 0 {
		t.Errorf("pool %v, want blocked from 3h to 4h", pool)
	}
	h.wantLines("forecast", `(?m)^  Pool blocked:  in 3h, for 1h$`)

	// An API key in its place has no window to fill: never blocked.
	h.prep.Update(func(p *accounts.Pool) { p.Accounts[2].Enabled, p.Accounts[2].Kind = true, accounts.KindAPIKey })
	if verdict := diagField(t, h.runJSON(0, "forecast", "--json"), "pool", "verdict"); verdict != "not-blocked" {
		t.Errorf("pool verdict %v, want not-blocked", verdict)
	}
	h.wantLines("forecast", `(?m)^  Pool blocked:  not at the recent rate \(looking 5h ahead\)$`)
}

// wantLines runs a command line and checks its output matches every one
// of res.
func (h *diagHome) wantLines(cmd string, res ...string) {
	h.t.Helper()
	r := h.run(strings.Fields(cmd)...)
	if r.code != 0 {
		h.t.Fatalf("rotor %s: %+v", cmd, r)
	}
	for _, re := range res {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			h.t.Errorf("rotor %s does not match %s:\n%s", cmd, re, r.stdout)
		}
	}
}
