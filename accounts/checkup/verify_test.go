package checkup_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/accounts/hometest"
	"github.com/rotorproxy/rotor/rotation"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/checkup"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

func flagged(a hometest.Account, enabled bool) hometest.Account {
	a.Flag, a.Enabled = accounts.FlagTokenInvalid, enabled
	return a
}

func TestVerifyFlagged(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	h.write(
		flagged(hometest.ChatGPT("works", "w@example.com", "cg-w", "at-w", "rt-good-w", -time.Hour), false),
		flagged(hometest.ChatGPT("dead", "d@example.com", "cg-d", "at-d", "rt-dead-d", time.Hour), true),
		flagged(hometest.ChatGPT("refused", "r@example.com", "cg-r", "at-r", "rt-good-r", time.Hour), true),
		flagged(hometest.APIKey("key", "sk-key"), false),
		hometest.APIKey("fine", "sk-fine"),
	)
	// The refused account's new token is still refused upstream.
	h.up.Set("at-rt-good-r", upstreamtest.Behavior{Status: 401})

	// Dry run: says what it would try; no refresh, no probe, no change.
	before := h.Files()
	dry, err := h.checkup().VerifyFlagged(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	h.SameAs(before)
	if h.auth.TokenCalls("refresh_token") != 0 || len(h.up.Requests()) != 0 {
		t.Errorf("dry run refreshed (%d) or probed (%d)", h.auth.TokenCalls("refresh_token"), len(h.up.Requests()))
	}
	if total, restored, still := dry.Count(); total != 4 || restored != 0 || still != 0 {
		t.Errorf("dry run counts %d/%d/%d", total, restored, still)
	}
	for _, r := range dry.Reports {
		if r.Result != checkup.VerifyWould || r.ProbeStatus != nil || r.Refresh != checkup.RefreshSkipped {
			t.Errorf("dry report %+v", r)
		}
	}
	if !strings.Contains(dry.Reports[0].Detail, "refresh") || !strings.Contains(dry.Reports[0].Detail, "/codex/models") {
		t.Errorf("dry run detail: %q", dry.Reports[0].Detail)
	}

	// The working account also sits in the 5-minute cooldown its flag came with.
	worksID := h.Pool().Accounts[0].ID
	rt := rotation.NewRuntime(h.Dir, clock.System{})
	rt.Cooldown(worksID, rotation.CooldownTokenInvalidated, rotation.InvalidatedCooldown)
	if err := rt.Sync(nil); err != nil {
		t.Fatal(err)
	}

	res, err := h.checkup().VerifyFlagged(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	// Restored means usable at once, in every process: the cooldown is gone
	// from state.json too.
	if err := rt.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if st := rt.Snapshot(worksID); st.CooldownUntil.After(time.Now()) {
		t.Errorf("restored account still cooling down until %s (%s)", st.CooldownUntil, st.CooldownReason)
	}
	if total, restored, still := res.Count(); total != 4 || restored != 2 || still != 2 {
		t.Errorf("counts %d/%d/%d, want 4/2/2: %+v", total, restored, still, res.Reports)
	}
	want := []struct {
		index           int
		result, refresh string
		status          int
	}{
		{1, checkup.VerifyRestored, checkup.RefreshOK, 200},
		{2, checkup.VerifyStillFlagged, checkup.RefreshFailed, 0},
		{3, checkup.VerifyStillFlagged, checkup.RefreshOK, 401},
		{4, checkup.VerifyRestored, checkup.RefreshSkipped, 200},
	}
	for i, w := range want {
		r := res.Reports[i]
		st := 0
		if r.ProbeStatus != nil {
			st = *r.ProbeStatus
		}
		if r.Index != w.index || r.Result != w.result || r.Refresh != w.refresh || st != w.status {
			t.Errorf("report %d: %+v (probe %d), want %+v", i, r, st, w)
		}
		if strings.Contains(r.Detail, "at-") || strings.Contains(r.Detail, "rt-") || strings.Contains(r.Detail, "sk-") {
			t.Errorf("report leaks a Secret: %q", r.Detail)
		}
	}
	if !strings.Contains(res.Reports[1].Detail, "rotor login") {
		t.Errorf("hard refresh failure detail: %q", res.Reports[1].Detail)
	}
	p := h.Pool()
	for i, wantFlag := range []bool{false, true, true, false, false} {
		_, f := p.Accounts[i].Flagged()
		if f != wantFlag {
			t.Errorf("account %d flagged %v, want %v", i+1, f, wantFlag)
		}
	}
	if !p.Accounts[0].Enabled || !p.Accounts[3].Enabled {
		t.Error("restored accounts were not enabled")
	}

	// The ChatGPT probe carries the adapter's headers and the fresh token.
	var probe *upstreamtest.Recorded
	for _, r := range h.up.Requests() {
		if r.Path == "/backend-api/codex/models" && r.Token == "at-rt-good-w" {
			probe = &r
		}
	}
	if probe == nil {
		t.Fatalf("no ChatGPT probe with the refreshed token: %+v", h.up.Requests())
	}
	for k, v := range map[string]string{"chatgpt-account-id": "cg-w", "OpenAI-Beta": "responses=experimental", "originator": "codex_cli_rs"} {
		if probe.Header.Get(k) != v {
			t.Errorf("probe header %s = %q, want %q", k, probe.Header.Get(k), v)
		}
	}
	if h.up.Count("sk-key") != 1 {
		t.Errorf("API-key probe sent %d times", h.up.Count("sk-key"))
	}
	if h.up.Count("sk-fine") != 0 {
		t.Error("an unflagged account was probed")
	}
}

func TestVerifyFlaggedUnreadableStore(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	h.WriteFile(home.AccountsFile, "{", 0o600)
	if _, err := h.checkup().VerifyFlagged(context.Background(), false); err == nil {
		t.Error("want an error for an unreadable store")
	}
}
