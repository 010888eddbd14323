package checkup_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/checkup"
	"github.com/rotorproxy/rotor/accounts/hometest"
)

// The same API key twice is found by its stored fingerprint: doctor warns,
// fix merges into the first and keeps every secret.
func TestDuplicateKeysFoundByFingerprint(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	p := h.write(hometest.APIKey("a", "sk-same"), hometest.APIKey("b", "sk-other"), hometest.APIKey("c", "sk-same"))
	c := check(h.checkup().Doctor(context.Background()), "duplicates")
	if c.Status != checkup.StatusWarn || !strings.Contains(c.Detail, "accounts 1 and 3 hold the same API key") {
		t.Fatalf("doctor duplicates = %+v", c)
	}
	if strings.Contains(c.Detail, "sk-same") {
		t.Fatalf("doctor shows the key: %q", c.Detail)
	}
	_, res := dryThenReal(t, h)
	a := action(res, checkup.ActionMergeDuplicate, "account 3 (c)")
	if a == nil || a.Status != checkup.ActionDone || !strings.Contains(a.Detail, "the same API key as account 1") {
		t.Fatalf("no merge of account 3: %+v", res.Actions)
	}
	after := h.Pool()
	if len(after.Accounts) != 2 || after.Accounts[0].Label != "a" || after.Accounts[1].Label != "b" {
		t.Fatalf("after fix: %+v", after.Accounts)
	}
	if _, ok := h.Secret(p.Accounts[2].ID); !ok {
		t.Error("the merged duplicate's secret was deleted")
	}
	if c := check(h.checkup().Doctor(context.Background()), "duplicates"); c.Status != checkup.StatusOK {
		t.Errorf("after fix, doctor duplicates = %+v", c)
	}
}

// Keys added before rotor stored fingerprints: doctor says their
// duplicates cannot be seen yet; fix fingerprints them and merges.
func TestFixFingerprintsLegacyKeys(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	old := hometest.APIKey("old", "sk-same")
	old.NoFingerprint = true
	h.write(hometest.APIKey("new", "sk-same"), hometest.APIKey("other", "sk-other"), old)
	c := check(h.checkup().Doctor(context.Background()), "duplicates")
	if c.Status != checkup.StatusWarn || !strings.Contains(c.Detail, "API-key account 3 has no key fingerprint yet") {
		t.Fatalf("doctor duplicates = %+v", c)
	}
	dry, res := dryThenReal(t, h)
	if a := action(dry, checkup.ActionFingerprintKey, "account 3 (old)"); a == nil {
		t.Errorf("dry run does not name the fingerprint: %+v", dry.Actions)
	}
	if a := action(res, checkup.ActionFingerprintKey, "account 3 (old)"); a == nil || a.Status != checkup.ActionDone {
		t.Errorf("no fingerprint stored: %+v", res.Actions)
	}
	if a := action(res, checkup.ActionMergeDuplicate, "account 3 (old)"); a == nil || a.Status != checkup.ActionDone {
		t.Errorf("legacy duplicate not merged: %+v", res.Actions)
	}
	if n := len(h.Pool().Accounts); n != 2 {
		t.Errorf("%d accounts after fix, want 2", n)
	}
	if c := check(h.checkup().Doctor(context.Background()), "duplicates"); c.Status != checkup.StatusOK {
		t.Errorf("after fix, doctor duplicates = %+v", c)
	}
}

// A copy of secrets.json left by a crashed write holds keys: doctor warns
// and says so, fix removes it; one still being written is left alone.
func TestLeftoverSecretTempFiles(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	h.write(hometest.APIKey("a", "sk-a"))
	now := time.Now()
	h.WriteFile(".secrets.json.tmp-111", `{"version":1,"secrets":{}}`, 0o600)
	os.Chtimes(h.Path(".secrets.json.tmp-111"), now.Add(-time.Hour), now.Add(-time.Hour))
	h.WriteFile(".secrets.json.tmp-222", "in progress", 0o600)
	c := check(h.checkup().Doctor(context.Background()), "temp_files")
	if c.Status != checkup.StatusWarn || !strings.Contains(c.Detail, ".secrets.json.tmp-111") ||
		!strings.Contains(c.Detail, "hold keys") || strings.Contains(c.Detail, "tmp-222") {
		t.Fatalf("doctor temp_files = %+v", c)
	}
	_, res := dryThenReal(t, h)
	if a := action(res, checkup.ActionRemoveTemp, ".secrets.json.tmp-111"); a == nil || a.Status != checkup.ActionDone {
		t.Fatalf("not removed: %+v", res.Actions)
	}
	if _, err := os.Stat(h.Path(".secrets.json.tmp-111")); err == nil {
		t.Error(".secrets.json.tmp-111 still there")
	}
	if _, err := os.Stat(h.Path(".secrets.json.tmp-222")); err != nil {
		t.Error("a temp file of a write in progress was removed")
	}
	if c := check(h.checkup().Doctor(context.Background()), "temp_files"); c.Status != "missing" {
		t.Errorf("after fix, doctor temp_files = %+v", c)
	}
}

// doctor reports each account linked to a Codex CLI auth.json: shared,
// gone, or now holding another login.
func TestDoctorCodexLinks(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	dir := t.TempDir()
	linked := filepath.Join(dir, "auth.json")
	fixture, err := os.ReadFile(filepath.Join("..", "..", "testdata", "jwt", "codex_auth.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(linked, fixture, 0o600); err != nil {
		t.Fatal(err)
	}
	// The fixture's login: ada@example.com in workspace 7f3c2a10-….
	ada := hometest.ChatGPT("ada", "ada@example.com", "7f3c2a10-5b6e-4d8f-9a01-fixture00001", "at", "rt", time.Hour)
	other := hometest.ChatGPT("bob", "bob@example.com", "another-workspace", "at2", "rt2", time.Hour)
	gone := hometest.ChatGPT("carol", "carol@example.com", "cg-carol", "at3", "rt3", time.Hour)
	h.write(ada, other, gone)
	h.Update(func(p *accounts.Pool) {
		p.Accounts[0].CodexAuthFile = linked
		p.Accounts[1].CodexAuthFile = linked
		p.Accounts[2].CodexAuthFile = filepath.Join(dir, "missing", "auth.json")
	})
	var got []checkup.Check
	for _, c := range h.checkup().Doctor(context.Background()).Checks {
		if c.Name == "codex_link" {
			got = append(got, c)
		}
	}
	want := []struct{ status, detail string }{
		{checkup.StatusOK, "account 1 (ada) shares its refreshes with " + linked},
		{checkup.StatusWarn, "now holds another login (ada@example.com)"},
		{checkup.StatusWarn, "which is gone; \"rotor unlink 3\""},
	}
	if len(got) != len(want) {
		t.Fatalf("codex_link checks: %+v", got)
	}
	for i, w := range want {
		if got[i].Status != w.status || !strings.Contains(got[i].Detail, w.detail) {
			t.Errorf("check %d = %+v, want %s with %q", i, got[i], w.status, w.detail)
		}
	}
}
