package main

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/accounts/hometest"
	"github.com/rotorproxy/rotor/accounts/oauth/oauthtest"
	"github.com/rotorproxy/rotor/accounts/secrets"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// diagHome is a cliHome whose accounts are written straight to disk
// (hometest), as the diagnostics find them, and whose upstream and auth
// URLs name a closed port, so nothing reaches a real server.
type diagHome struct {
	*cliHome
	prep *hometest.Home
}

func newDiagHome(t *testing.T) *diagHome {
	t.Helper()
	prep := hometest.New(t)
	h := newHome(t)
	h.dir = prep.Dir
	h.setenv("ROTOR_HOME", prep.Dir)
	for _, k := range []string{"ROTOR_AUTH_BASE_URL", "ROTOR_CHATGPT_BASE_URL", "ROTOR_OPENAI_BASE_URL"} {
		h.setenv(k, "http://127.0.0.1:1")
	}
	return &diagHome{cliHome: h, prep: prep}
}

// run runs one command line in-process, with no stdin.
func (h *diagHome) run(args ...string) result {
	h.t.Helper()
	return h.cliHome.run("", args...)
}

// runJSON runs a --json command line, checks its exit code and decodes it.
func (h *diagHome) runJSON(wantCode int, args ...string) map[string]any {
	h.t.Helper()
	r := h.run(args...)
	if r.code != wantCode {
		h.t.Fatalf("rotor %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, wantCode, r.stdout, r.stderr)
	}
	var v map[string]any
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	if err := dec.Decode(&v); err != nil || dec.More() {
		h.t.Fatalf("rotor %s: not one JSON object (%v):\n%s", strings.Join(args, " "), err, r.stdout)
	}
	if !strings.HasPrefix(r.stdout, "{\n  \"command\": ") {
		h.t.Errorf("rotor %s: not pretty-printed with command first:\n%s", strings.Join(args, " "), r.stdout)
	}
	return v
}

// diagChatGPT is a ChatGPT account signed in as label@example.com.
func diagChatGPT(label, cg, access, refresh string, expires time.Duration) hometest.Account {
	return hometest.ChatGPT(label, label+"@example.com", cg, access, refresh, expires)
}

// diagField walks a decoded JSON value along a path of keys and indexes.
func diagField(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %q: %T is not an object", k, v)
			}
			if _, ok := m[k]; !ok {
				t.Fatalf("no field %q in %v", k, m)
			}
			v = m[k]
		case int:
			s, ok := v.([]any)
			if !ok || k >= len(s) {
				t.Fatalf("at [%d]: %v", k, v)
			}
			v = s[k]
		}
	}
	return v
}

func TestDiagForecastCommand(t *testing.T) {
	t.Parallel()
	h := newDiagHome(t)
	p := h.prep.Write(hometest.APIKey("work", "sk-1"), hometest.APIKey("limited", "sk-2"), hometest.Account{Kind: accounts.KindAPIKey, Label: "off", Enabled: false})
	rt := rotation.NewRuntime(h.dir, clock.System{})
	rt.RateLimited(p.Accounts[1].ID, time.Now().Add(10*time.Minute))
	if err := rt.Sync(nil); err != nil {
		t.Fatal(err)
	}

	v := h.runJSON(0, "forecast", "--json")
	if diagField(t, v, "command") != "forecast" || diagField(t, v, "generated_at") == nil {
		t.Errorf("envelope: %v", v)
	}
	sum := diagField(t, v, "summary").(map[string]any)
	if !maps.Equal(sum, map[string]any{"total": 3.0, "ready": 1.0, "delayed": 1.0, "unavailable": 1.0}) {
		t.Errorf("summary %v", sum)
	}
	if diagField(t, v, "recommendation", "index") != 1.0 || diagField(t, v, "recommendation", "reason") != rotation.WhyBestScore {
		t.Errorf("recommendation %v", diagField(t, v, "recommendation"))
	}
	acc := diagField(t, v, "accounts", 1).(map[string]any)
	for _, k := range []string{"index", "id", "label", "kind", "verdict", "state", "reason", "detail", "wait_seconds",
		"ready_at", "risk", "risk_factors", "health", "recent_failures", "pinned", "quota"} {
		if _, ok := acc[k]; !ok {
			t.Errorf("account has no %q", k)
		}
	}
	if acc["verdict"] != "delayed" || acc["reason"] != "rate-limited" || acc["risk"].(float64) < 50 {
		t.Errorf("limited account: %v", acc)
	}
	if w, _ := acc["wait_seconds"].(float64); w < 590 || w > 600 {
		t.Errorf("wait_seconds %v, want about 600", acc["wait_seconds"])
	}
	if diagField(t, v, "accounts", 2, "verdict") != "unavailable" || diagField(t, v, "accounts", 0, "wait_seconds") != nil {
		t.Errorf("accounts: %v", diagField(t, v, "accounts"))
	}

	r := h.run("forecast")
	if r.code != 0 {
		t.Fatalf("forecast: %+v", r)
	}
	// A table, verdict first, with the wait and the reason.
	for _, re := range []string{`(?m)^\s+#\s+FORECAST\s+WAIT\s+RISK\s+LABEL`, `(?m)^\s+2\s+delayed\s+\d+m\d*s?\s+\d+\s+limited\s.*usage limit`,
		`(?m)^\s+3\s+unavailable\s+-\s+100\s+off\s.*rotor enable 3`, `(?m)^Next:\s+account 1 \(work\)`} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("output does not match %s:\n%s", re, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "{") {
		t.Errorf("human output looks like JSON:\n%s", r.stdout)
	}
	if r := h.run("forecast", "extra"); r.code != 1 || !strings.Contains(r.stderr, "Unexpected argument") {
		t.Errorf("extra argument: %+v", r)
	}
}

func TestDiagDoctorCommand(t *testing.T) {
	t.Parallel()
	h := newDiagHome(t)
	h.prep.Write(hometest.APIKey("work", "sk-1"))
	v := h.runJSON(0, "doctor", "--json")
	if diagField(t, v, "summary", "error") != 0.0 || diagField(t, v, "summary", "ok").(float64) < 5 {
		t.Errorf("healthy summary: %v", diagField(t, v, "summary"))
	}
	for _, c := range diagField(t, v, "checks").([]any) {
		m := c.(map[string]any)
		if len(m) != 3 || m["name"] == "" || m["detail"] == "" || m["status"] != "ok" {
			t.Errorf("check %v", m)
		}
	}

	// A missing secret and a world-readable secrets file are errors.
	h.prep.Write(hometest.Account{Kind: accounts.KindAPIKey, Label: "lost", Enabled: true})
	os.Chmod(h.path("secrets.json"), 0o644)
	v = h.runJSON(1, "doctor", "--json")
	if diagField(t, v, "summary", "error") != 2.0 {
		t.Errorf("summary %v", diagField(t, v, "summary"))
	}
	found := false
	for _, c := range diagField(t, v, "checks").([]any) {
		m := c.(map[string]any)
		if m["name"] == "account:2" {
			found = m["status"] == "error" && strings.Contains(m["detail"].(string), "rotor remove 2")
		}
	}
	if !found {
		t.Errorf("no actionable error for the missing secret: %v", diagField(t, v, "checks"))
	}
	r := h.run("doctor")
	if r.code != 1 || !regexp.MustCompile(`(?m)^\s+error\s+account:2\s+account 2 \(lost\) has no secret`).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, "2 errors.") || r.stderr != "" {
		t.Errorf("doctor table: %+v", r)
	}
}

// TestDiagDoctorBinaryExitCode runs the real binary: exit status and
// streams as a shell sees them.
func TestDiagDoctorBinaryExitCode(t *testing.T) {
	t.Parallel()
	h := newDiagHome(t)
	h.prep.Write(hometest.APIKey("work", "sk-1"))
	bin := func(args ...string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd, out, _ := h.command(ctx, "", args...)
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), out.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, out.String()
	}
	if code, out := bin("doctor"); code != 0 {
		t.Errorf("healthy doctor exit %d:\n%s", code, out)
	}
	h.prep.Write(hometest.Account{Kind: accounts.KindAPIKey, Label: "lost", Enabled: true})
	if code, out := bin("doctor", "--json"); code != 1 || !strings.Contains(out, `"status": "error"`) {
		t.Errorf("doctor with a missing secret: exit %d\n%s", code, out)
	}
	if code, _ := bin("fix", "--dry-run"); code != 0 {
		t.Errorf("fix --dry-run exit %d", code)
	}
}

func TestDiagFixCommand(t *testing.T) {
	t.Parallel()
	h := newDiagHome(t)
	h.prep.Write(hometest.APIKey("one", "sk-1"), hometest.APIKey("two", "sk-2"))
	st, _ := accounts.Open(h.dir)
	st.Update(func(p *accounts.Pool) error { p.Accounts[0].Label = "uno"; return nil }) // .bak holds this state
	const damaged = `{"version":1,"accounts":[{"id":`
	if err := os.WriteFile(h.path(home.AccountsFile), []byte(damaged), 0o600); err != nil {
		t.Fatal(err)
	}
	h.prep.Secrets.Set("acct_9", secrets.Secret{APIKey: "sk-orphan"})

	before := h.prep.Files()
	v := h.runJSON(0, "fix", "--dry-run", "--json")
	if diagField(t, v, "dry_run") != true || diagField(t, v, "changed") != false {
		t.Errorf("dry run envelope: %v", v)
	}
	acts := diagField(t, v, "actions").([]any)
	if len(acts) != 2 || diagField(t, acts, 0, "action") != "restore-store" || diagField(t, acts, 1, "action") != "remove-orphaned-secret" ||
		diagField(t, acts, 0, "status") != "planned" {
		t.Errorf("planned actions: %v", acts)
	}
	if after := h.prep.Files(); !maps.Equal(before, after) {
		t.Error("fix --dry-run changed files")
	}
	if r := h.run("fix", "--dry-run"); r.code != 0 || !strings.Contains(r.stdout, "Dry run: nothing was changed") ||
		!regexp.MustCompile(`(?m)^\s+planned\s+restore-store\s+accounts.json\s+restore accounts.json.bak`).MatchString(r.stdout) {
		t.Errorf("dry run table: %+v", r)
	}

	v = h.runJSON(0, "fix", "--json")
	if diagField(t, v, "dry_run") != false || diagField(t, v, "changed") != true || diagField(t, v, "actions", 0, "status") != "done" ||
		diagField(t, v, "actions", 1, "status") != "planned" {
		t.Errorf("fix: %v", v)
	}
	// The newest backup is the last good state: nothing is lost.
	if p := h.pool(); len(p.Accounts) != 2 || p.Accounts[0].Label != "uno" {
		t.Errorf("restored pool %+v", p.Accounts)
	}
	kept, _ := filepath.Glob(h.path("accounts.json.corrupt-*"))
	if len(kept) != 1 {
		t.Fatalf("damaged store not kept: %v", kept)
	}
	if data, _ := os.ReadFile(kept[0]); string(data) != damaged {
		t.Error("kept file differs from the damaged store")
	}
	// The orphan is listed, not deleted, until --prune-secrets.
	if _, err := h.prep.Secrets.Get("acct_9"); err != nil {
		t.Error("fix deleted a secret without --prune-secrets")
	}
	if r := h.run("fix", "--prune-secrets"); r.code != 0 || !strings.Contains(r.stdout, "remove-orphaned-secret") {
		t.Errorf("fix --prune-secrets: %+v", r)
	}
	if _, err := h.prep.Secrets.Get("acct_9"); err == nil {
		t.Error("orphaned secret survived --prune-secrets")
	}
	if r := h.run("fix"); r.code != 0 || strings.TrimSpace(r.stdout) != "Nothing to fix." {
		t.Errorf("second fix: %+v", r)
	}

	// Nothing to restore from: exit 1, file untouched.
	h2 := newDiagHome(t)
	os.WriteFile(h2.path(home.AccountsFile), []byte("{"), 0o600)
	if r := h2.run("fix"); r.code != 1 || !strings.Contains(r.stdout, "failed") {
		t.Errorf("fix without backup: %+v", r)
	}
	if data, _ := os.ReadFile(h2.path(home.AccountsFile)); string(data) != "{" {
		t.Error("the damaged store was overwritten")
	}
}

func TestDiagVerifyFlaggedCommand(t *testing.T) {
	t.Parallel()
	h := newDiagHome(t)
	auth := oauthtest.New()
	if err := auth.Start(""); err != nil {
		t.Fatal(err)
	}
	defer auth.Close()
	auth.SetTokenNames(func(rt string) (string, string) { return "at-" + rt, rt + "-next" })
	auth.AddRefreshToken("rt-good-1") // rt-dead-1 is unknown to it: invalid_grant
	calls := func() int { return auth.TokenCalls("refresh_token") }
	up := upstreamtest.New("../../testdata")
	if err := up.Start(""); err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	h.setenv("ROTOR_AUTH_BASE_URL", auth.URL())
	h.setenv("ROTOR_CHATGPT_BASE_URL", up.ChatGPTBase())
	good := diagChatGPT("good", "cg-g", "at-old", "rt-good-1", time.Hour)
	good.Flag, good.Enabled = accounts.FlagTokenInvalid, false
	dead := diagChatGPT("dead", "cg-d", "at-old2", "rt-dead-1", time.Hour)
	dead.Flag = accounts.FlagTokenInvalid
	h.prep.Write(good, dead, hometest.APIKey("fine", "sk-1"))

	before := h.prep.Files()
	v := h.runJSON(0, "verify-flagged", "--dry-run", "--json")
	if diagField(t, v, "total") != 2.0 || diagField(t, v, "dry_run") != true || diagField(t, v, "restored") != 0.0 ||
		diagField(t, v, "reports", 0, "result") != "would-verify" {
		t.Errorf("dry run: %v", v)
	}
	if calls() != 0 || len(up.Requests()) != 0 || !maps.Equal(before, h.prep.Files()) {
		t.Errorf("dry run refreshed (%d), probed (%d) or changed files", calls(), len(up.Requests()))
	}

	v = h.runJSON(1, "verify-flagged", "--json") // one account stays flagged
	if diagField(t, v, "total") != 2.0 || diagField(t, v, "restored") != 1.0 || diagField(t, v, "still_flagged") != 1.0 || diagField(t, v, "dry_run") != false {
		t.Errorf("verify: %v", v)
	}
	r0 := diagField(t, v, "reports", 0).(map[string]any)
	for _, k := range []string{"index", "id", "label", "kind", "flagged_reason", "refresh", "probe_status", "result", "detail"} {
		if _, ok := r0[k]; !ok {
			t.Errorf("report has no %q", k)
		}
	}
	if r0["result"] != "restored" || r0["probe_status"] != 200.0 || r0["refresh"] != "ok" {
		t.Errorf("good account: %v", r0)
	}
	if diagField(t, v, "reports", 1, "result") != "still-flagged" || diagField(t, v, "reports", 1, "probe_status") != nil {
		t.Errorf("dead account: %v", diagField(t, v, "reports", 1))
	}
	p := h.pool()
	if _, f := p.Accounts[0].Flagged(); f || !p.Accounts[0].Enabled {
		t.Errorf("good account not restored: %+v", p.Accounts[0])
	}
	if _, f := p.Accounts[1].Flagged(); !f {
		t.Error("dead account lost its flag")
	}
	if s, _ := h.prep.Secrets.Get("acct_1"); s.RefreshToken != "rt-good-1-next" {
		t.Error("refreshed tokens not stored")
	}
	r := h.run("verify-flagged")
	if r.code != 1 || !regexp.MustCompile(`(?m)^\s+still-flagged\s+2\s+dead\s+token-invalid\s+.*rotor login`).MatchString(r.stdout) {
		t.Errorf("table: %+v", r)
	}
}

func TestDiagReportCommand(t *testing.T) {
	t.Parallel()
	h := newDiagHome(t)
	p := h.prep.Write(hometest.APIKey("work", "sk-1"), hometest.APIKey("alt", "sk-2"))
	log, err := usage.Open(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	tok := &usage.Tokens{Input: 1200, Cached: 1000, Output: 300, Reasoning: 100, Total: 1500}
	for _, u := range []usage.Record{
		{Time: now.Add(-10 * time.Minute), AccountID: p.Accounts[0].ID, Model: "gpt-5", Status: 200, Tokens: tok, Affinity: usage.AffinityKept,
			Credits: true, Tier: "priority"},
		{Time: now.Add(-20 * time.Minute), AccountID: p.Accounts[1].ID, Model: "gpt-5-mini", Status: 200, Code: "stream_interrupted", Tier: "flex"},
		{Time: now.Add(-5 * time.Hour), AccountID: p.Accounts[0].ID, Model: "gpt-5", Status: 200, Tokens: tok, Affinity: usage.AffinityMoved},
		{Time: now.Add(-2 * 24 * time.Hour), AccountID: "acct_removed", Model: "gpt-5", Status: 502},
	} {
		log.Append(u)
	}
	log.Close()

	v := h.runJSON(0, "report", "--json")
	for _, k := range []string{"command", "generated_at", "store", "forecast", "usage"} {
		diagField(t, v, k)
	}
	if diagField(t, v, "store", "readable") != true || diagField(t, v, "store", "accounts") != 2.0 ||
		diagField(t, v, "forecast", "summary", "total") != 2.0 || diagField(t, v, "forecast", "recommendation", "index") == nil {
		t.Errorf("store/forecast: %v / %v", diagField(t, v, "store"), diagField(t, v, "forecast"))
	}
	hour := diagField(t, v, "usage", "windows", "1h").(map[string]any)
	if diagField(t, hour, "total", "requests") != 2.0 || diagField(t, hour, "total", "errors_by_code", "stream_interrupted") != 1.0 {
		t.Errorf("1h: %v", hour)
	}
	if !maps.Equal(diagField(t, hour, "by_account", 0, "tokens").(map[string]any),
		map[string]any{"input": 1200.0, "cached": 1000.0, "output": 300.0, "reasoning": 100.0, "total": 1500.0}) {
		t.Errorf("1h account 1 tokens: %v", diagField(t, hour, "by_account", 0))
	}
	if diagField(t, hour, "by_account", 0, "index") != 1.0 || diagField(t, hour, "by_account", 0, "label") != "work" {
		t.Errorf("1h by_account: %v", diagField(t, hour, "by_account"))
	}
	if diagField(t, v, "usage", "windows", "24h", "by_model", 0, "model") != "gpt-5" ||
		diagField(t, v, "usage", "windows", "24h", "by_model", 0, "requests") != 2.0 {
		t.Errorf("24h by_model: %v", diagField(t, v, "usage", "windows", "24h", "by_model"))
	}
	// The prompt cache's hit rate is cached ÷ input (docs/cost.md), null
	// without input; affinity counts what it kept and moved.
	if diagField(t, hour, "by_account", 0, "cache_hit_rate") != 1000.0/1200 || diagField(t, hour, "by_account", 1, "cache_hit_rate") != nil ||
		diagField(t, hour, "by_model", 0, "cache_hit_rate") != 1000.0/1200 {
		t.Errorf("1h cache hit rates: %v", hour)
	}
	// Requests served on credits, with their tokens, and those that asked
	// for Fast (the priority tier) or Flex, per account (docs/selection.md).
	if c := diagField(t, hour, "by_account", 0, "credits"); diagField(t, c, "requests") != 1.0 || diagField(t, c, "tokens", "total") != 1500.0 ||
		diagField(t, hour, "by_account", 0, "fast_requests") != 1.0 || diagField(t, hour, "by_account", 0, "flex_requests") != 0.0 {
		t.Errorf("1h account 1 credits and tiers: %v", diagField(t, hour, "by_account", 0))
	}
	if diagField(t, hour, "by_account", 1, "credits", "requests") != 0.0 || diagField(t, hour, "by_account", 1, "flex_requests") != 1.0 ||
		diagField(t, hour, "total", "fast_requests") != 1.0 {
		t.Errorf("1h account 2 credits and tiers: %v", diagField(t, hour, "by_account", 1))
	}
	if a := diagField(t, v, "usage", "windows", "24h", "total", "affinity"); !maps.Equal(a.(map[string]any), map[string]any{"kept": 1.0, "moved": 1.0}) {
		t.Errorf("24h affinity: %v", a)
	}
	week := diagField(t, v, "usage", "windows", "7d").(map[string]any)
	last := diagField(t, week, "by_account", 2).(map[string]any)
	if last["account_id"] != "acct_removed" || last["index"] != nil || diagField(t, week, "total", "errors_by_code", "http_502") != 1.0 {
		t.Errorf("7d: %v", week)
	}

	r := h.run("report")
	if r.code != 0 {
		t.Fatalf("report: %+v", r)
	}
	for _, want := range []string{"Store:", "FORECAST", "Last 1h:", "Last 7d:", "acct_removed (removed)", "stream_interrupted 1", "2400", "CACHE HIT", "83.3%", "AFFINITY KEPT/MOVED", "ON CREDITS REQ/TOK", "FAST"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, r.stdout)
		}
	}

	if !regexp.MustCompile(`(?m)^\s+1 work\s.*\s1/0\s+1/1500\s+1\s`).MatchString(r.stdout) {
		t.Errorf("report's row of account 1 does not show 1 request (1500 tokens) on credits and 1 Fast:\n%s", r.stdout)
	}

	// An unreadable store: still a report, without a forecast, and exit 1.
	os.WriteFile(h.path(home.AccountsFile), []byte("{"), 0o600)
	v = h.runJSON(1, "report", "--json")
	if diagField(t, v, "store", "readable") != false || diagField(t, v, "forecast") != nil || diagField(t, v, "store", "error") == nil {
		t.Errorf("unreadable store report: %v", v)
	}
}

func TestDiagFixMergesDuplicates(t *testing.T) {
	t.Parallel()
	h := newDiagHome(t)
	a := diagChatGPT("me", "cg-1", "at-1", "rt-1", time.Hour)
	b := diagChatGPT("me", "cg-1", "at-2", "rt-2", 2*time.Hour) // same login, imported twice
	b.Email = "ME@example.com"
	h.prep.Write(a, hometest.APIKey("work", "sk-1"), b)
	v := h.runJSON(0, "doctor", "--json")
	for _, c := range diagField(t, v, "checks").([]any) {
		if m := c.(map[string]any); m["name"] == "duplicates" && (m["status"] != "warn" || !strings.Contains(m["detail"].(string), "accounts 1 and 3")) {
			t.Errorf("duplicates check: %v", m)
		}
	}
	v = h.runJSON(0, "fix", "--json")
	if diagField(t, v, "actions", 0, "action") != "merge-duplicate" || diagField(t, v, "changed") != true {
		t.Errorf("fix: %v", v)
	}
	if p := h.pool(); len(p.Accounts) != 2 || p.Accounts[0].ID != "acct_1" {
		t.Errorf("pool after merge: %+v", p.Accounts)
	}
	if s, _ := h.prep.Secrets.Get("acct_1"); s.RefreshToken != "rt-2" {
		t.Errorf("kept account did not get the newer login's tokens")
	}
}

// A request no account served (refused 503 before any account took it,
// recorded with no account id) is shown as served by no account, last,
// in the text and in JSON (account_id null), never as a removed account.
func TestDiagReportNoAccount(t *testing.T) {
	t.Parallel()
	h := newDiagHome(t)
	p := h.prep.Write(hometest.APIKey("work", "sk-1"))
	log, err := usage.Open(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, u := range []usage.Record{
		{Time: now.Add(-10 * time.Minute), AccountID: p.Accounts[0].ID, Model: "gpt-5", Status: 200},
		{Time: now.Add(-5 * time.Minute), AccountID: "", Model: "gpt-5", Status: 503, Code: "codex_runtime_rotation_pool_exhausted"},
		{Time: now.Add(-4 * time.Minute), AccountID: "", Model: "gpt-5", Status: 503, Code: "codex_runtime_rotation_pool_exhausted"},
		{Time: now.Add(-3 * time.Minute), AccountID: "acct_removed", Model: "gpt-5", Status: 200},
	} {
		log.Append(u)
	}
	log.Close()

	v := h.runJSON(0, "report", "--json")
	rows := diagField(t, v, "usage", "windows", "1h", "by_account").([]any)
	if len(rows) != 3 {
		t.Fatalf("1h by_account: %v", rows)
	}
	if diagField(t, rows[0], "account_id") != p.Accounts[0].ID || diagField(t, rows[1], "account_id") != "acct_removed" {
		t.Errorf("1h by_account, accounts first: %v", rows)
	}
	none := rows[2].(map[string]any)
	if none["account_id"] != nil || none["index"] != nil || none["label"] != nil || none["requests"] != 2.0 || none["errors"] != 2.0 {
		t.Errorf("1h by_account, the requests no account served: %v", none)
	}

	r := h.run("report")
	if !regexp.MustCompile(`(?m)^\s+\(no account\)\s+2\s+2\s`).MatchString(r.stdout) || strings.Contains(r.stdout, " (removed)\t") ||
		regexp.MustCompile(`(?m)^\s+\(removed\)`).MatchString(r.stdout) || !strings.Contains(r.stdout, "acct_removed (removed)") {
		t.Errorf("report does not show the requests no account served as such:\n%s", r.stdout)
	}
}
