package checkup_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/checkup"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/accounts/hometest"
)

func TestDoctorHealthy(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	h.write(hometest.APIKey("work", "sk-work"), hometest.ChatGPT("me", "me@example.com", "cg-1", "at-1", "rt-good-1", 9*24*time.Hour))
	before := h.Files()
	res := h.checkup().Doctor(context.Background())
	if res.Failed() {
		t.Fatalf("healthy home fails: %+v", res.Checks)
	}
	for _, name := range []string{"home", "files", "store", "secrets", "account:1", "account:2", "orphaned_secrets",
		"duplicates", "flagged", "pin", "proxy"} {
		if c := check(res, name); c.Status != checkup.StatusOK {
			t.Errorf("%s: %s %q, want ok", name, c.Status, c.Detail)
		}
	}
	if c := check(res, "account:2"); !strings.Contains(c.Detail, "valid for 9d") {
		t.Errorf("token expiry not reported: %q", c.Detail)
	}
	ok, warn, errs := res.Count()
	if ok != len(res.Checks) || warn != 0 || errs != 0 {
		t.Errorf("count %d/%d/%d of %d", ok, warn, errs, len(res.Checks))
	}
	h.SameAs(before) // doctor changes nothing
}

func TestDoctorFindsEveryProblem(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	p := h.write(
		hometest.APIKey("work", "sk-work"),
		hometest.ChatGPT("me", "Me@Example.com", "cg-1", "at-1", "rt-good-1", -time.Hour), // expired, refreshable
		hometest.ChatGPT("me-again", "me@example.com", "cg-1", "at-2", "", -time.Hour),    // duplicate of 2; expired, no refresh token
		hometest.Account{Kind: accounts.KindAPIKey, Label: "lost", Enabled: true},         // no secret
		hometest.Account{Kind: accounts.KindAPIKey, Label: "bad", Enabled: false, Flag: accounts.FlagTokenInvalid, Secret: &secrets0},
	)
	h.Update(func(p *accounts.Pool) { id := p.Accounts[4].ID; p.PinnedAccountID = &id })
	h.Secrets.Set("acct_orphan", secrets0)
	os.Chmod(h.Dir, 0o755)
	os.Chmod(h.Path("secrets.json"), 0o644)
	home.WriteInfo(h.Dir, home.Info{URL: "http://127.0.0.1:1/v1", PID: 999999, ClientKey: "k"})
	_ = p

	res := h.checkup().Doctor(context.Background())
	want := map[string]struct{ status, detail string }{
		"home":             {checkup.StatusError, "chmod 700"},
		"files":            {checkup.StatusError, "secrets.json (0644)"},
		"store":            {checkup.StatusOK, "5 accounts"},
		"account:1":        {checkup.StatusOK, "API key present"},
		"account:2":        {checkup.StatusWarn, "rotor fix"},
		"account:3":        {checkup.StatusError, "no refresh token"},
		"account:4":        {checkup.StatusError, "rotor remove 4"},
		"orphaned_secrets": {checkup.StatusWarn, "acct_orphan"},
		"duplicates":       {checkup.StatusWarn, "accounts 2 and 3"},
		"flagged":          {checkup.StatusWarn, "token-invalid"},
		"pin":              {checkup.StatusError, "disabled"},
		"proxy":            {checkup.StatusWarn, "pid 999999 is stale: it is not running"},
	}
	for name, w := range want {
		c := check(res, name)
		if c.Status != w.status || !strings.Contains(c.Detail, w.detail) {
			t.Errorf("%s: %s %q, want %s containing %q", name, c.Status, c.Detail, w.status, w.detail)
		}
	}
	if !res.Failed() {
		t.Error("errors found but Failed() is false")
	}
	for _, c := range res.Checks {
		for _, secret := range []string{"sk-work", "at-1", "rt-good-1", "at-2"} {
			if strings.Contains(c.Detail, secret) {
				t.Errorf("%s leaks a Secret: %q", c.Name, c.Detail)
			}
		}
	}
}

var secrets0 = secretsOf("sk-flagged")

// A damaged aliases.json is named, with what it means and what mends it;
// doctor changes nothing. A readable one is counted.
func TestDoctorReadsTheAliases(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	h.write(hometest.APIKey("work", "sk-work"))
	path := h.Path(home.AliasesFile)
	os.WriteFile(path, []byte(`{"version":1,"aliases":[{"from":"gpt-4o","to":"gpt-5"}]}`), 0o600)
	if c := check(h.checkup().Doctor(context.Background()), "aliases"); c.Status != checkup.StatusOK || !strings.Contains(c.Detail, "1 model alias") {
		t.Errorf("readable aliases: %s %q", c.Status, c.Detail)
	}
	os.WriteFile(path, []byte(`{"version":1,"aliases":[{"from":`), 0o600)
	before := h.Files()
	c := check(h.checkup().Doctor(context.Background()), "aliases")
	if c.Status != checkup.StatusWarn || !strings.Contains(c.Detail, home.AliasesFile) || !strings.Contains(c.Detail, "remove it") || !strings.Contains(c.Detail, "keep the aliases they had") {
		t.Errorf("damaged aliases: %s %q", c.Status, c.Detail)
	}
	h.SameAs(before)
}

// A damaged prices.json is named with what is wrong in it and what
// prices stand in; doctor and fix leave it as it is. A readable one is
// described.
func TestDoctorReadsThePrices(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	h.write(hometest.APIKey("work", "sk-work"))
	if c := check(h.checkup().Doctor(context.Background()), "prices"); c.Status != "missing" {
		t.Errorf("no prices.json, yet a check: %+v", c)
	}
	path := h.Path(home.PricesFile)
	os.WriteFile(path, []byte(`{"version":1,"date":"2025-12-01","models":{"gpt-5":{"input":2,"cached_input":0.2,"output":20}}}`), 0o600)
	if c := check(h.checkup().Doctor(context.Background()), "prices"); c.Status != checkup.StatusOK ||
		c.Detail != "prices.json prices 1 model(s), of 2025-12-01, over the shipped prices of 2025-11-20" {
		t.Errorf("readable prices: %s %q", c.Status, c.Detail)
	}
	const bad = `{"version":1,"date":"2025-12-01","models":{"gpt-5":{"input":2,"cached_input":0.2,"output":-20}}}`
	os.WriteFile(path, []byte(bad), 0o600)
	before := h.Files()
	c := check(h.checkup().Doctor(context.Background()), "prices")
	if c.Status != checkup.StatusWarn || !strings.Contains(c.Detail, path) || !strings.Contains(c.Detail, `"output" price -20 is negative`) ||
		!strings.Contains(c.Detail, "remove it") || !strings.Contains(c.Detail, "shipped table (of 2025-11-20)") || !strings.Contains(c.Detail, "use the shipped prices") {
		t.Errorf("damaged prices: %s %q", c.Status, c.Detail)
	}
	h.SameAs(before)
	h.checkup().Fix(context.Background(), checkup.FixOptions{})
	if data, _ := os.ReadFile(path); string(data) != bad {
		t.Errorf("fix rewrote prices.json: %s", data)
	}
}

func TestDoctorUnreadableStoreNamesTheBackup(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	h.write(hometest.APIKey("work", "sk-work"))
	h.Update(func(p *accounts.Pool) { p.Accounts[0].Label = "renamed" }) // accounts.json.bak now has 1 account
	h.WriteFile(home.AccountsFile, `{"version":1,"accounts":[`, 0o600)
	res := h.checkup().Doctor(context.Background())
	c := check(res, "store")
	if c.Status != checkup.StatusError || !strings.Contains(c.Detail, "restores accounts.json.bak (1 account)") {
		t.Errorf("store: %s %q", c.Status, c.Detail)
	}
	// No account checks on a store that cannot be read; pin/duplicates skipped.
	if check(res, "account:1").Status != "missing" || check(res, "pin").Status != "missing" {
		t.Errorf("checks ran on an unreadable store: %+v", res.Checks)
	}
}

func TestDoctorMissingHome(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "nope")
	res := checkup.New(checkup.Deps{Dir: dir}).Doctor(context.Background())
	if res.Failed() || len(res.Checks) != 1 || res.Checks[0].Status != checkup.StatusWarn {
		t.Errorf("missing home: %+v", res.Checks)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("doctor created the home")
	}
}

func TestDoctorReachesRunningProxy(t *testing.T) {
	t.Parallel()
	const key = "client-key-0123456789abcdef0123456789abcdef"
	var gotAuth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		if r.URL.Path != "/v1/healthz" {
			http.NotFound(w, r)
			return
		}
		if gotAuth != "Bearer "+key {
			w.WriteHeader(401)
			return
		}
		w.Write([]byte(`{"status":"ok"}`))
	}))
	defer srv.Close()
	h := newTestHome(t)
	h.write(hometest.APIKey("work", "sk-work"))

	home.WriteInfo(h.Dir, home.Info{URL: srv.URL + "/v1", PID: os.Getpid(), ClientKey: key})
	if c := check(h.checkup().Doctor(context.Background()), "proxy"); c.Status != checkup.StatusOK {
		t.Errorf("reachable proxy: %s %q", c.Status, c.Detail)
	}
	if gotAuth != "Bearer "+key {
		t.Errorf("doctor sent Authorization %q", gotAuth)
	}

	home.WriteInfo(h.Dir, home.Info{URL: srv.URL + "/v1", PID: os.Getpid(), ClientKey: "wrong"})
	if c := check(h.checkup().Doctor(context.Background()), "proxy"); c.Status != checkup.StatusError || !strings.Contains(c.Detail, "401") {
		t.Errorf("wrong key: %s %q", c.Status, c.Detail)
	}

	// A proxy that accepts and never answers: the check is bounded.
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hang.Close()
	home.WriteInfo(h.Dir, home.Info{URL: hang.URL + "/v1", PID: os.Getpid(), ClientKey: key})
	start := time.Now()
	c := check(h.checkup(func(d *checkup.Deps) { d.ProxyTimeout = 300 * time.Millisecond }).Doctor(context.Background()), "proxy")
	if c.Status != checkup.StatusError || time.Since(start) > 5*time.Second {
		t.Errorf("hung proxy: %s %q after %v", c.Status, c.Detail, time.Since(start))
	}
	if strings.Contains(c.Detail, key) {
		t.Error("the client key leaked into the detail")
	}
}

func TestStoreHealth(t *testing.T) {
	t.Parallel()
	h := newTestHome(t)
	h.write(hometest.APIKey("work", "sk-work"), hometest.Account{Kind: accounts.KindAPIKey, Label: "lost", Enabled: false},
		hometest.Account{Kind: accounts.KindAPIKey, Label: "f", Enabled: true, Flag: "token-invalid", Secret: &secrets0})
	h.Secrets.Set("acct_orphan", secrets0)
	s := h.checkup().Store()
	if !s.Readable || s.Accounts != 3 || s.Enabled != 2 || s.Disabled != 1 || s.Flagged != 1 || s.GoodBackups != 1 {
		t.Errorf("health %+v", s)
	}
	if len(s.MissingSecrets) != 1 || s.MissingSecrets[0] != 2 || s.OrphanedSecrets == nil || *s.OrphanedSecrets != 1 {
		t.Errorf("secrets: missing %v orphaned %v", s.MissingSecrets, s.OrphanedSecrets)
	}
	h.WriteFile(home.AccountsFile, "garbage", 0o600)
	if s := h.checkup().Store(); s.Readable || s.Error == nil {
		t.Errorf("unreadable store reported as %+v", s)
	}
}
