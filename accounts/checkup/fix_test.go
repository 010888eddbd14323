package checkup_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/checkup"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/clock/clocktest"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/accounts/hometest"
	"github.com/rotorproxy/rotor/rotation"
)

// dryThenReal runs Fix as a dry run, checks it changed nothing and
// refreshed nothing, then runs it for real.
func dryThenReal(t *testing.T, h *testHome) (dry, real checkup.FixResult) {
	t.Helper()
	before := h.Files()
	calls := h.auth.TokenCalls("refresh_token")
	dry = h.checkup().Fix(context.Background(), checkup.FixOptions{DryRun: true})
	h.SameAs(before)
	if h.auth.TokenCalls("refresh_token") != calls {
		t.Errorf("the dry run called the token endpoint")
	}
	if !dry.DryRun || dry.Changed() {
		t.Errorf("dry run: DryRun %v Changed %v", dry.DryRun, dry.Changed())
	}
	for _, a := range dry.Actions {
		if a.Status != checkup.ActionPlanned && a.Status != checkup.ActionFailed {
			t.Errorf("dry run action %+v is not planned", a)
		}
	}
	real = h.checkup().Fix(context.Background(), checkup.FixOptions{})
	return dry, real
}

func TestFixHealthyHomeDoesNothing(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	h.write(hometest.APIKey("work", "sk-work"), hometest.ChatGPT("me", "me@example.com", "cg-1", "at-1", "rt-good-1", time.Hour))
	before := h.Files()
	res := h.checkup().Fix(context.Background(), checkup.FixOptions{})
	if len(res.Actions) != 0 || res.Changed() || res.Failed() {
		t.Errorf("healthy home: %+v", res.Actions)
	}
	h.SameAs(before)
}

func TestFixRestoresNewestGoodBackup(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	h.write(hometest.APIKey("one", "sk-1"))
	h.Update(func(p *accounts.Pool) { p.Accounts[0].Label = "two" })   // .bak: two, .bak.1: one
	h.Update(func(p *accounts.Pool) { p.Accounts[0].Label = "three" }) // .bak: three, .bak.1: two, .bak.2: one
	good, _ := os.ReadFile(h.Path("accounts.json.bak.1"))
	h.WriteFile("accounts.json.bak", "{broken", 0o600) // the newest backup is damaged too
	const corrupt = `{"version":1,"accounts":[{"id":"acct_1"` + "\x00garbage"
	h.WriteFile(home.AccountsFile, corrupt, 0o600)

	dry, res := dryThenReal(t, h)
	if a := action(dry, checkup.ActionRestoreStore, ""); a == nil || !strings.Contains(a.Detail, "accounts.json.bak.1") {
		t.Errorf("dry run does not plan the restore: %+v", dry.Actions)
	}
	a := action(res, checkup.ActionRestoreStore, "")
	if a == nil || a.Status != checkup.ActionDone || res.Failed() {
		t.Fatalf("restore: %+v", res.Actions)
	}
	if got, _ := os.ReadFile(h.Path(home.AccountsFile)); string(got) != string(good) {
		t.Errorf("accounts.json is not the newest good backup:\n%s", got)
	}
	if h.Pool().Accounts[0].Label != "two" {
		t.Errorf("restored pool: %+v", h.Pool())
	}
	aside, _ := filepath.Glob(h.Path("accounts.json.corrupt-*"))
	if len(aside) != 1 {
		t.Fatalf("damaged file not kept: %v", aside)
	}
	if got, _ := os.ReadFile(aside[0]); string(got) != corrupt {
		t.Errorf("the kept file differs from the damaged one")
	}
	if fi, _ := os.Stat(h.Path(home.AccountsFile)); fi.Mode().Perm() != 0o600 {
		t.Errorf("restored file mode %v", fi.Mode().Perm())
	}
	// The secret stays: it belongs to the restored account.
	if _, ok := h.Secret("acct_1"); !ok {
		t.Error("the account's secret was removed")
	}
}

func TestFixWithoutGoodBackupTouchesNothing(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	h.write(hometest.APIKey("one", "sk-1"))
	os.Remove(h.Path("accounts.json.bak"))
	h.WriteFile(home.AccountsFile, "{not json", 0o600)
	before := h.Files()
	res := h.checkup().Fix(context.Background(), checkup.FixOptions{})
	a := action(res, checkup.ActionRestoreStore, "")
	if a == nil || a.Status != checkup.ActionFailed || !res.Failed() || !strings.Contains(a.Error, "no backup is readable") {
		t.Fatalf("want a failed restore: %+v", res.Actions)
	}
	// Above all, the secrets of accounts it cannot see are not "orphans".
	if action(res, checkup.ActionRemoveOrphan, "") != nil {
		t.Error("fix removed secrets while the store was unreadable")
	}
	h.SameAs(before)
}

func TestFixMergesDuplicatesAndListsOrphans(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	h.write(
		hometest.ChatGPT("me", "me@example.com", "cg-1", "at-old", "rt-good-old", time.Hour),
		hometest.APIKey("work", "sk-work"),
		hometest.ChatGPT("me-again", "ME@example.com", "cg-1", "at-new", "rt-good-new", 5*time.Hour), // same login, newer tokens
		hometest.APIKey("work2", "sk-work2"),                                                         // API keys are never duplicates of each other
	)
	h.Update(func(p *accounts.Pool) { id := p.Accounts[2].ID; p.PinnedAccountID = &id })
	gen := h.Pool().AffinityGeneration
	h.Secrets.Set("acct_gone", secretsOf("sk-gone"))

	dry, res := dryThenReal(t, h)
	if action(dry, checkup.ActionMergeDuplicate, "account 3") == nil || action(dry, checkup.ActionRemoveOrphan, "acct_gone") == nil {
		t.Errorf("dry run plan: %+v", dry.Actions)
	}
	if res.Failed() || !res.Changed() {
		t.Fatalf("fix: %+v", res.Actions)
	}
	p := h.Pool()
	if len(p.Accounts) != 3 || p.Accounts[0].ID != "acct_1" || p.Accounts[2].Label != "work2" {
		t.Fatalf("pool after merge: %+v", p.Accounts)
	}
	if p.PinnedAccountID == nil || *p.PinnedAccountID != "acct_1" || p.AffinityGeneration != gen+1 {
		t.Errorf("pin not carried over: %v (generation %d)", p.PinnedAccountID, p.AffinityGeneration)
	}
	if s, _ := h.Secret("acct_1"); s.RefreshToken != "rt-good-new" {
		t.Errorf("kept account has refresh token %q, want the newer login's", s.RefreshToken)
	}
	// No repair deletes a Secret: the merged duplicate's and the orphan
	// stay, the orphan listed for --prune-secrets.
	for _, id := range []string{"acct_2", "acct_3", "acct_gone"} {
		if _, ok := h.Secret(id); !ok {
			t.Errorf("secret %s was deleted", id)
		}
	}
	if a := action(res, checkup.ActionRemoveOrphan, "acct_gone"); a == nil || a.Status != checkup.ActionPlanned || !strings.Contains(a.Detail, "--prune-secrets") {
		t.Errorf("orphan not listed for --prune-secrets: %+v", res.Actions)
	}
	// --prune-secrets deletes the orphan, not the duplicate's secret,
	// which the backups still name.
	pruned := h.checkup().Fix(context.Background(), checkup.FixOptions{PruneSecrets: true})
	if a := action(pruned, checkup.ActionRemoveOrphan, "acct_gone"); a == nil || a.Status != checkup.ActionDone || len(pruned.Actions) != 1 {
		t.Errorf("prune: %+v", pruned.Actions)
	}
	if _, ok := h.Secret("acct_gone"); ok {
		t.Error("--prune-secrets kept the orphan")
	}
	if _, ok := h.Secret("acct_3"); !ok {
		t.Error("--prune-secrets deleted a secret a backup names")
	}
	// Nothing left to do.
	if again := h.checkup().Fix(context.Background(), checkup.FixOptions{}); len(again.Actions) != 0 {
		t.Errorf("second fix: %+v", again.Actions)
	}
}

func TestFixCleansStateLocksTempsAndProxyInfo(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	p := h.write(hometest.APIKey("one", "sk-1"), hometest.APIKey("two", "sk-2"))
	now := time.Now().UTC()
	state := map[string]any{"version": 1, "accounts": map[string]any{
		p.Accounts[0].ID: map[string]any{"cooldown_until": now.Add(-time.Minute), "cooldown_reason": "server-error",
			"rate_limited_until": now.Add(-time.Hour), "health": 75, "future_field": "kept"},
		p.Accounts[1].ID: map[string]any{"rate_limited_until": now.Add(time.Hour), "health": 100},
		"acct_removed":   map[string]any{"health": 50},
	}}
	data, _ := json.Marshal(state)
	h.WriteFile(home.StateFile, string(data), 0o600)
	h.WriteFile(".refresh-acct_removed.lock", "", 0o600)
	h.WriteFile(".refresh-acct_held.lock", "", 0o600)
	h.WriteFile(".refresh-"+p.Accounts[0].ID+".lock", "", 0o600)
	held, err := home.LockFile(h.Path(".refresh-acct_held.lock"), false, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock()
	h.WriteFile(".accounts.json.tmp-123", "old", 0o600)
	os.Chtimes(h.Path(".accounts.json.tmp-123"), now.Add(-time.Hour), now.Add(-time.Hour))
	h.WriteFile(".secrets.json.tmp-456", "in progress", 0o600) // fresh: a live writer's
	home.WriteInfo(h.Dir, home.Info{URL: "http://127.0.0.1:1/v1", PID: 999999, ClientKey: "k"})

	_, res := dryThenReal(t, h)
	if res.Failed() {
		t.Fatalf("fix: %+v", res.Actions)
	}
	for _, want := range []struct{ kind, target string }{
		{checkup.ActionClearState, "account 1"},
		{checkup.ActionDropState, "acct_removed"},
		{checkup.ActionRemoveLock, ".refresh-acct_removed.lock"},
		{checkup.ActionRemoveTemp, ".accounts.json.tmp-123"},
		{checkup.ActionRemoveProxyInfo, "proxy-999999.json"},
	} {
		if a := action(res, want.kind, want.target); a == nil || a.Status != checkup.ActionDone {
			t.Errorf("no done %s on %s: %+v", want.kind, want.target, res.Actions)
		}
	}
	var after struct {
		Accounts map[string]map[string]any `json:"accounts"`
	}
	raw, _ := os.ReadFile(h.Path(home.StateFile))
	if err := json.Unmarshal(raw, &after); err != nil {
		t.Fatal(err)
	}
	a1 := after.Accounts[p.Accounts[0].ID]
	if _, ok := a1["cooldown_until"]; ok || a1["cooldown_reason"] != nil || a1["rate_limited_until"] != nil {
		t.Errorf("expired deadlines kept: %v", a1)
	}
	if a1["future_field"] != "kept" || a1["health"] != float64(75) {
		t.Errorf("other fields lost: %v", a1)
	}
	if _, ok := after.Accounts[p.Accounts[1].ID]["rate_limited_until"]; !ok {
		t.Error("an active rate limit was cleared")
	}
	if _, ok := after.Accounts["acct_removed"]; ok {
		t.Error("state of a removed account kept")
	}
	// The runtime still reads the file.
	rt := rotation.NewRuntime(h.Dir, clock.System{})
	if err := rt.Sync(nil); err != nil || rt.Snapshot(p.Accounts[1].ID).RateLimitedUntil.IsZero() {
		t.Errorf("runtime cannot read the cleaned state: %v", err)
	}
	for name, want := range map[string]bool{
		".refresh-acct_removed.lock": false, ".refresh-acct_held.lock": true, ".refresh-" + p.Accounts[0].ID + ".lock": true,
		".accounts.json.tmp-123": false, ".secrets.json.tmp-456": true, "proxy.json": false, ".lock": true,
	} {
		if _, err := os.Stat(h.Path(name)); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", name, err == nil, want)
		}
	}
}

func TestFixRefreshesExpiredTokensAndDisablesDeadOnes(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	h.write(
		hometest.ChatGPT("good", "g@example.com", "cg-g", "at-g", "rt-good-g", -time.Hour),
		hometest.ChatGPT("dead", "d@example.com", "cg-d", "at-d", "rt-dead-d", -time.Minute),
		hometest.ChatGPT("fresh", "f@example.com", "cg-f", "at-f", "rt-good-f", time.Hour),
		hometest.ChatGPT("flaky", "x@example.com", "cg-x", "at-x", "rt-flaky-x", -time.Minute),
	)
	dry, res := dryThenReal(t, h)
	if n := len(dry.Actions); n != 3 {
		t.Errorf("dry run plans %d refreshes, want 3: %+v", n, dry.Actions)
	}
	if a := action(res, checkup.ActionRefreshToken, "good"); a == nil || a.Status != checkup.ActionDone {
		t.Errorf("good refresh: %+v", res.Actions)
	}
	if s, _ := h.Secret("acct_1"); s.AccessToken != "at-rt-good-g" || s.RefreshToken != "rt-good-g-next" || !s.ExpiresAt.After(time.Now()) {
		t.Errorf("refreshed secret not stored: %v", s)
	}
	if h.auth.RefreshCalls("rt-good-f") != 0 {
		t.Error("a valid token was refreshed")
	}
	// The hard failure: listed, and the account disabled and flagged.
	if a := action(res, checkup.ActionRefreshToken, "dead"); a == nil || a.Status != checkup.ActionFailed {
		t.Errorf("dead refresh: %+v", res.Actions)
	}
	if a := action(res, checkup.ActionDisableAccount, "dead"); a == nil || a.Status != checkup.ActionDone {
		t.Errorf("dead account not disabled: %+v", res.Actions)
	}
	p := h.Pool()
	if r, ok := p.Accounts[1].Flagged(); p.Accounts[1].Enabled || !ok || r != accounts.FlagTokenInvalid {
		t.Errorf("dead account: %+v", p.Accounts[1])
	}
	// A retryable failure is listed but changes nothing.
	if a := action(res, checkup.ActionRefreshToken, "flaky"); a == nil || a.Status != checkup.ActionFailed {
		t.Errorf("flaky refresh: %+v", res.Actions)
	}
	if !p.Accounts[3].Enabled || action(res, checkup.ActionDisableAccount, "flaky") != nil {
		t.Error("a retryable refresh failure disabled the account")
	}
	if !res.Failed() {
		t.Error("failed refreshes should fail the fix")
	}
	// Running proxies learn that the tokens changed.
	rt := rotation.NewRuntime(h.Dir, clock.System{})
	rt.Sync(nil)
	if rt.TokensAt("acct_1").IsZero() {
		t.Error("tokens_at not recorded in state.json")
	}
	for _, a := range res.Actions {
		if strings.Contains(a.Detail+a.Error, "rt-") || strings.Contains(a.Detail+a.Error, "at-") {
			t.Errorf("action leaks a token: %+v", a)
		}
	}
}

func TestFixTightensPermissions(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	h.write(hometest.APIKey("one", "sk-1"))
	os.Chmod(h.Dir, 0o755)
	os.Chmod(h.Path("secrets.json"), 0o644)
	_, res := dryThenReal(t, h)
	if len(res.Actions) != 2 || res.Failed() {
		t.Errorf("chmod actions: %+v", res.Actions)
	}
	if fi, _ := os.Stat(h.Dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("home mode %v", fi.Mode().Perm())
	}
	if fi, _ := os.Stat(h.Path("secrets.json")); fi.Mode().Perm() != 0o600 {
		t.Errorf("secrets.json mode %v", fi.Mode().Perm())
	}
}

func TestFixNeverOverwritesAnEarlierDamagedCopy(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	h.write(hometest.APIKey("one", "sk-1"))
	h.Update(func(p *accounts.Pool) { p.Accounts[0].Label = "two" })
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	h.WriteFile("accounts.json.corrupt-20260301T120000Z", "earlier", 0o600)
	h.WriteFile(home.AccountsFile, "{later", 0o600)
	res := h.checkup(func(d *checkup.Deps) { d.Clock = clocktest.Frozen(at) }).Fix(context.Background(), checkup.FixOptions{})
	if a := action(res, checkup.ActionRestoreStore, ""); a == nil || a.Status != checkup.ActionDone ||
		!strings.Contains(a.Detail, "accounts.json.corrupt-20260301T120000Z-1") {
		t.Fatalf("restore: %+v", res.Actions)
	}
	for name, want := range map[string]string{"accounts.json.corrupt-20260301T120000Z": "earlier", "accounts.json.corrupt-20260301T120000Z-1": "{later"} {
		if got, _ := os.ReadFile(h.Path(name)); string(got) != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

// The repair the STORAGE_UNREADABLE message sends people to must never
// lose a key: here a home from before backups held the current state, its
// newest backup one account short, and a store truncated mid-account.
func TestFixSalvagesWhatTheNewestBackupLacks(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	h.write(hometest.APIKey("one", "sk-1"), hometest.APIKey("two", "sk-2"), hometest.APIKey("three", "sk-3"))
	full, _ := os.ReadFile(h.Path(home.AccountsFile))
	// The newest backup is one change behind (two accounts), an older
	// one has all three.
	h.Update(func(p *accounts.Pool) { p.Accounts = p.Accounts[:2] })
	short, _ := os.ReadFile(h.Path(home.AccountsFile))
	h.WriteFile("accounts.json.bak.1", string(full), 0o600)
	h.WriteFile("accounts.json.bak", string(short), 0o600)
	h.WriteFile(home.AccountsFile, `{"version":1,"accounts":[{"id":`, 0o600)

	dry, res := dryThenReal(t, h)
	if a := action(dry, checkup.ActionRestoreStore, ""); a == nil || !strings.Contains(a.Detail, "salvage 1 account (three)") {
		t.Errorf("dry run: %+v", dry.Actions)
	}
	if res.Failed() {
		t.Fatalf("fix: %+v", res.Actions)
	}
	p := h.Pool()
	if len(p.Accounts) != 3 || p.Accounts[2].Label != "three" {
		t.Fatalf("restored pool %+v", p.Accounts)
	}
	for _, id := range []string{"acct_1", "acct_2", "acct_3"} {
		if _, ok := h.Secret(id); !ok {
			t.Errorf("secret %s was lost", id)
		}
	}
	if action(res, checkup.ActionRemoveOrphan, "") != nil {
		t.Errorf("fix touched secrets: %+v", res.Actions)
	}
}

// Whole account objects a damaged store still holds are salvaged too.
func TestFixSalvagesCompleteAccountsOfTheDamagedFile(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	h.write(hometest.APIKey("one", "sk-1"))
	const damaged = `{"version":1,"accounts":[{"id":"acct_1","label":"one","kind":"api-key","enabled":true},` +
		`{"id":"acct_zzzz","label":"late","kind":"api-key","enabled":true},{"id":"acct_yy`
	h.WriteFile(home.AccountsFile, damaged, 0o600)
	res := h.checkup().Fix(context.Background(), checkup.FixOptions{})
	p := h.Pool()
	if res.Failed() || len(p.Accounts) != 2 || p.Accounts[1].ID != "acct_zzzz" || p.Accounts[1].Label != "late" {
		t.Errorf("pool %+v after %+v", p.Accounts, res.Actions)
	}
}
