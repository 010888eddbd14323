package main

import (
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/rotation"
)

// list, rotation status and forecast show the whole meter (docs/selection.md):
// credits, a workspace without windows (never "no quota"), each limit
// family with its model and windows, a limited family, an account on
// credits now, and a workspace limit's reason.
func TestMeterShownInListStatusForecast(t *testing.T) {
	t.Parallel()
	h := newDiagHome(t)
	p := h.prep.Write(diagChatGPT("credit", "cg-1", "at-1", "rt-1", time.Hour), diagChatGPT("fam", "cg-2", "at-2", "rt-2", time.Hour),
		diagChatGPT("biz", "cg-3", "at-3", "rt-3", time.Hour), diagChatGPT("plain", "cg-4", "at-4", "rt-4", time.Hour))
	now := time.Now()
	rt := rotation.NewRuntime(h.dir, clock.System{})
	// credit: its 5h window is full and it holds 12.5 credits: on credits.
	rt.SetQuota(p.Accounts[0].ID, rotation.Quota{
		Primary: &rotation.Window{UsedPercent: 100, WindowMinutes: 300, ResetsAt: now.Add(2 * time.Hour)},
		Credits: &rotation.Credits{HasCredits: true, Balance: "12.5"},
	})
	// fam: sonic has its own 5h window at 40%, and bengal's limit is reached.
	rt.SetQuota(p.Accounts[1].ID, rotation.Quota{
		Primary: &rotation.Window{UsedPercent: 10, WindowMinutes: 300, ResetsAt: now.Add(3 * time.Hour)},
		Families: []rotation.Family{
			{ID: "codex_bengalfox", LimitName: "gpt-5.2-codex-sonic", Primary: &rotation.Window{UsedPercent: 40, WindowMinutes: 300, ResetsAt: now.Add(time.Hour)}},
			{ID: "codex_other", LimitName: "gpt-5-other", Primary: &rotation.Window{UsedPercent: 100, WindowMinutes: 60, ResetsAt: now.Add(30 * time.Minute)}},
		},
		Credits: &rotation.Credits{HasCredits: true, Unlimited: true},
	})
	rt.Limit(p.Accounts[1].ID, rotation.Limit{Family: "codex-other", Until: now.Add(30 * time.Minute)})
	// biz: a workspace with no windows whose owner's credits ran out.
	rt.SetQuota(p.Accounts[2].ID, rotation.Quota{Workspace: true, Whole: true})
	rt.Limit(p.Accounts[2].ID, rotation.Limit{Reason: "workspace_owner_credits_depleted"})
	if err := rt.Sync(nil); err != nil {
		t.Fatal(err)
	}

	// rotor list --json and rotation status --json.
	lv := h.runJSON(0, "list", "--json")
	sv := h.runJSON(0, "rotation", "status", "--json")
	for _, c := range []struct {
		name  string
		accts any
		quota func(i int) []any // the path to account i's quota fields
	}{
		{"list", diagField(t, lv, "accounts"), func(i int) []any { return []any{i} }},
		{"rotation status", diagField(t, sv, "accounts"), func(i int) []any { return []any{i, "quota"} }},
	} {
		q := func(i int, rest ...any) any { return diagField(t, c.accts, append(c.quota(i), rest...)...) }
		a := func(i int, rest ...any) any { return diagField(t, c.accts, append([]any{i}, rest...)...) }
		if q(0, "credits", "balance") != "12.5" || q(0, "credits", "has_credits") != true || a(0, "on_credits") != true {
			t.Errorf("%s: account 1 credits %v on_credits %v, want balance 12.5, on credits", c.name, q(0, "credits"), a(0, "on_credits"))
		}
		if q(1, "credits", "unlimited") != true || q(1, "credits", "balance") != nil || a(1, "on_credits") != false {
			t.Errorf("%s: account 2 credits %v, want unlimited", c.name, q(1, "credits"))
		}
		if c.name == "rotation status" {
			if a(3, "quota") != nil {
				t.Errorf("%s: account 4 (nothing known): quota %v", c.name, a(3, "quota"))
			}
		} else if q(3, "credits") != nil || q(3, "workspace") != false || len(q(3, "families").([]any)) != 0 {
			t.Errorf("%s: account 4 (nothing known): credits %v workspace %v families %v", c.name, q(3, "credits"), q(3, "workspace"), q(3, "families"))
		}
		if q(1, "families", 0, "id") != "codex_bengalfox" || q(1, "families", 0, "model") != "gpt-5.2-codex-sonic" ||
			q(1, "families", 0, "primary", "used_percent") != 40.0 || q(1, "families", 0, "primary", "window_minutes") != 300.0 {
			t.Errorf("%s: account 2 families %v", c.name, q(1, "families"))
		}
		if lim := a(1, "family_limits").([]any); len(lim) != 1 || diagField(t, lim, 0, "id") != "codex_other" ||
			diagField(t, lim, 0, "model") != "gpt-5-other" || !sameSecond(diagField(t, lim, 0, "until").(string), now.Add(30*time.Minute)) {
			t.Errorf("%s: account 2 family_limits %v", c.name, lim)
		}
		if a(1, "state") != "available" { // another model's limit does not limit the account
			t.Errorf("%s: account 2 state %v", c.name, a(1, "state"))
		}
		if q(2, "workspace") != true || a(2, "state") != "rate-limited" || a(2, "limit_reason") != "workspace_owner_credits_depleted" ||
			a(2, "waits_for_workspace") != true {
			t.Errorf("%s: account 3 workspace %v state %v limit_reason %v", c.name, q(2, "workspace"), a(2, "state"), a(2, "limit_reason"))
		}
		if a(0, "limit_reason") != nil || a(0, "waits_for_workspace") != false || len(a(0, "family_limits").([]any)) != 0 {
			t.Errorf("%s: account 1 limit_reason %v family_limits %v", c.name, a(0, "limit_reason"), a(0, "family_limits"))
		}
	}

	// What a person reads.
	for _, cmd := range []string{"list", "rotation status"} {
		h.wantLines(cmd,
			`(?m)^\s+1\s+available, on credits\s.*\s12\.5\s*$`,
			`(?m)^\s+2\s+available\s.*\sunlimited\s*$`,
			`(?m)^\s+3\s+rate-limited: waits for the workspace owner \(workspace_owner_credits_depleted\)\s.*workspace, no windows\s`,
			`(?m)^\s+4\s+available\s.*\s-\s*$`,
			`(?m)^Models with their own limits:$`,
			`(?m)^  2 fam  gpt-5\.2-codex-sonic: 40% of 5h \(resets in (59m\d*s?|60m|1h)\)$`,
			`(?m)^  2 fam  gpt-5-other: 100% of 1h \(resets in (29m\d*s?|30m)\); usage limit reached, back in (29m\d*s?|30m)$`)
		if r := h.run(strings.Fields(cmd)...); strings.Contains(r.stdout, "no quota") || strings.Contains(r.stdout, "at-1") {
			t.Errorf("rotor %s shows \"no quota\" or a token:\n%s", cmd, r.stdout)
		}
	}

	// forecast: on credits is ready as a last resort; the workspace waits for its owner.
	fv := h.runJSON(0, "forecast", "--json")
	if diagField(t, fv, "accounts", 0, "verdict") != "ready" || diagField(t, fv, "accounts", 0, "on_credits") != true ||
		diagField(t, fv, "accounts", 0, "quota", "credits", "balance") != "12.5" ||
		!strings.Contains(diagField(t, fv, "accounts", 0, "detail").(string), "on credits") {
		t.Errorf("forecast account 1: %v", diagField(t, fv, "accounts", 0))
	}
	if diagField(t, fv, "accounts", 2, "limit_reason") != "workspace_owner_credits_depleted" || diagField(t, fv, "accounts", 2, "waits_for_workspace") != true ||
		diagField(t, fv, "accounts", 2, "quota", "workspace") != true ||
		!strings.Contains(diagField(t, fv, "accounts", 2, "detail").(string), "waits for the workspace owner") {
		t.Errorf("forecast account 3: %v", diagField(t, fv, "accounts", 2))
	}
	if diagField(t, fv, "accounts", 1, "family_limits", 0, "id") != "codex_other" || diagField(t, fv, "accounts", 1, "quota", "families", 0, "model") != "gpt-5.2-codex-sonic" {
		t.Errorf("forecast account 2: %v", diagField(t, fv, "accounts", 1))
	}
	h.wantLines("forecast",
		`(?m)^\s+1\s+ready\s.*credit\s.*\s12\.5\s.*on credits: its included quota is used up; spends credits only when no other account has included quota left$`,
		`(?m)^\s+3\s+delayed\s.*biz\s+workspace, no windows\s.*usage limit reached \(workspace_owner_credits_depleted\): waits for the workspace owner`,
		`(?m)^  2 fam  gpt-5\.2-codex-sonic: 40% of 5h`)

	// With --credits never (ROTOR_CREDITS, as the service passes it), the
	// account on credits waits for its window instead.
	h.setenv("ROTOR_CREDITS", "never")
	fv = h.runJSON(0, "forecast", "--json")
	if diagField(t, fv, "accounts", 0, "verdict") != "delayed" || diagField(t, fv, "accounts", 0, "reason") != "credits-held-back" ||
		!sameSecond(diagField(t, fv, "accounts", 0, "ready_at").(string), now.Add(2*time.Hour)) {
		t.Errorf("forecast account 1 with --credits never: %v", diagField(t, fv, "accounts", 0))
	}
}
