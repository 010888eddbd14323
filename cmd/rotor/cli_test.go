package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/rotation"
)

func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	r := h.run("", "frobnicate")
	if r.code != 1 {
		t.Errorf("exit %d, want 1", r.code)
	}
	if !strings.HasPrefix(r.stderr, "Unknown command: frobnicate\n") || !strings.Contains(r.stderr, "Usage: rotor") {
		t.Errorf("stderr does not name the command and show the usage:\n%s", r.stderr)
	}
	for _, name := range []string{"add-key", "import codex", "switch <index>", "unpin", "rotation status"} {
		if !strings.Contains(r.stderr, name) {
			t.Errorf("usage does not list %q", name)
		}
	}
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing", r.stdout)
	}
	if _, err := os.Stat(h.dir); err == nil {
		t.Error("an unknown command created ROTOR_HOME")
	}
}

func TestVersionAndHelp(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	r := h.ok("", "version")
	if !strings.HasPrefix(r.stdout, "rotor ") || !strings.Contains(r.stdout, "go1.") {
		t.Errorf("version output %q", r.stdout)
	}
	r = h.ok("", "help")
	if !strings.Contains(r.stdout, "Usage: rotor") || r.stderr != "" {
		t.Errorf("help: %v", r)
	}
}

func TestIndexErrors(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.addKey("a", "sk-index-a")
	h.addKey("b", "sk-index-b")
	before, err := os.ReadFile(h.path(home.AccountsFile))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		args   []string
		stderr string
	}
	for _, cmd := range []string{"switch", "remove", "enable", "disable"} {
		cases = append(cases, []struct {
			args   []string
			stderr string
		}{
			{[]string{cmd}, "Missing index. Usage: rotor " + cmd + " <index>"},
			{[]string{cmd, "abc"}, "Invalid index: abc"},
			{[]string{cmd, "99"}, "Invalid index: 99"},
			{[]string{cmd, "3"}, "Invalid index: 3"},
			{[]string{cmd, "0"}, "Invalid index: 0"},
			{[]string{cmd, "1.5"}, "Invalid index: 1.5"},
		}...)
	}
	for _, tc := range cases {
		r := h.run("", tc.args...)
		if r.code != 1 || strings.TrimSpace(r.stderr) != tc.stderr || r.stdout != "" {
			t.Errorf("want exit 1 and stderr %q: %v", tc.stderr, r)
		}
	}
	after, err := os.ReadFile(h.path(home.AccountsFile))
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Errorf("a refused command changed accounts.json:\n%s\n%s", before, after)
	}
}

func TestSwitchPinsByID(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	for _, l := range []string{"one", "two", "three"} {
		h.addKey(l, "sk-switch-"+l)
	}
	p := h.pool()
	two, gen := p.At(2).ID, p.AffinityGeneration

	r := h.ok("", "switch", "2")
	if !strings.Contains(r.stdout, "Pinned account 2 (two)") {
		t.Errorf("switch output %q", r.stdout)
	}
	p = h.pool()
	if p.PinnedAccountID == nil || *p.PinnedAccountID != two || p.AffinityGeneration != gen+1 {
		t.Fatalf("after switch 2: pinned_account_id %v, affinity_generation %d; want %s, %d",
			p.PinnedAccountID, p.AffinityGeneration, two, gen+1)
	}
	st := jsonObject(t, h.ok("", "status", "--json").stdout)
	if st["pinned_account_index"] != 2.0 {
		t.Errorf("status pinned_account_index = %v, want 2", st["pinned_account_index"])
	}
	accts := st["accounts"].([]any)
	for i, a := range accts {
		if pinned := a.(map[string]any)["pinned"]; pinned != (i == 1) {
			t.Errorf("account %d pinned = %v", i+1, pinned)
		}
	}

	// Removing account 1 moves account "two" to index 1; the pin follows it.
	h.ok("", "remove", "1")
	p = h.pool()
	if p.PinnedAccountID == nil || *p.PinnedAccountID != two || p.Pinned() != 1 || p.At(1).Label != "two" {
		t.Fatalf("after remove 1: pin %v at index %d, account 1 %q; want %s at 1, \"two\"",
			p.PinnedAccountID, p.Pinned(), p.At(1).Label, two)
	}
	if p.AffinityGeneration != gen+1 {
		t.Errorf("removing another account moved affinity_generation to %d", p.AffinityGeneration)
	}
	rs := jsonObject(t, h.ok("", "rotation", "status", "--json").stdout)
	if rs["pinned_account_index"] != 1.0 || rs["pin_source"] != "manual" {
		t.Errorf("rotation status pin = %v (%v), want 1 (manual)", rs["pinned_account_index"], rs["pin_source"])
	}
	if next := rs["next"].(map[string]any); next["index"] != 1.0 {
		t.Errorf("next = %v, want the pinned account 1", next)
	}
	if out := h.ok("", "list").stdout; !strings.Contains(out, "* 1") {
		t.Errorf("list does not mark account 1 as pinned:\n%s", out)
	}

	r = h.ok("", "unpin")
	if !strings.Contains(r.stdout, "Unpinned") {
		t.Errorf("unpin output %q", r.stdout)
	}
	p = h.pool()
	if p.PinnedAccountID != nil || p.AffinityGeneration != gen+2 {
		t.Errorf("after unpin: pinned_account_id %v, affinity_generation %d; want null, %d",
			p.PinnedAccountID, p.AffinityGeneration, gen+2)
	}
	if st := jsonObject(t, h.ok("", "list", "--json").stdout); st["pinned_account_index"] != nil {
		t.Errorf("list pinned_account_index = %v after unpin, want null", st["pinned_account_index"])
	}

	// Removing the pinned account clears the pin.
	h.ok("", "switch", "2")
	h.ok("", "remove", "2")
	if p = h.pool(); p.PinnedAccountID != nil || len(p.Accounts) != 1 {
		t.Errorf("after removing the pinned account: pin %v, %d accounts", p.PinnedAccountID, len(p.Accounts))
	}
}

func TestEnableDisableRemove(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.addKey("a", "sk-edr-a")
	h.addKey("b", "sk-edr-b")
	p := h.pool()
	idA, idB := p.At(1).ID, p.At(2).ID
	if sec := h.secretsFile(); sec[idA]["api_key"] != "sk-edr-a" || sec[idB]["api_key"] != "sk-edr-b" {
		t.Fatalf("secrets.json = %v", sec)
	}

	if r := h.ok("", "disable", "1"); !strings.Contains(r.stdout, "Disabled account 1 (a)") {
		t.Errorf("disable output %q", r.stdout)
	}
	if h.pool().At(1).Enabled {
		t.Error("account 1 still enabled after disable")
	}
	st := jsonObject(t, h.ok("", "list", "--json").stdout)
	a1 := st["accounts"].([]any)[0].(map[string]any)
	if a1["enabled"] != false || a1["state"] != "disabled" {
		t.Errorf("disabled account in list --json: %v", a1)
	}
	if next := jsonObject(t, h.ok("", "rotation", "status", "--json").stdout)["next"].(map[string]any); next["index"] != 2.0 {
		t.Errorf("next with account 1 disabled = %v, want 2", next)
	}

	h.ok("", "enable", "1")
	if !h.pool().At(1).Enabled {
		t.Error("account 1 still disabled after enable")
	}

	if r := h.ok("", "remove", "1"); !strings.Contains(r.stdout, "Removed account 1 (a)") || r.stderr != "" {
		t.Errorf("remove: %v", r)
	}
	p = h.pool()
	if len(p.Accounts) != 1 || p.At(1).ID != idB {
		t.Errorf("after remove 1: %+v", p.Accounts)
	}
	sec := h.secretsFile()
	if _, ok := sec[idA]; ok {
		t.Error("remove left the account's secret in secrets.json")
	}
	if sec[idB]["api_key"] != "sk-edr-b" {
		t.Errorf("remove touched another account's secret: %v", sec)
	}
}

func TestAddKeyReadsStdin(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	const key = "sk-proj-AbCdEf0123456789stdinonly"
	r := h.ok(key, "add-key", "--label", "work") // printf '%s' "$KEY": no newline
	if !strings.Contains(r.stdout, "Added API-key account 1 (work)") {
		t.Errorf("output %q", r.stdout)
	}
	h.ok("sk-second-key\n", "add-key", "--base-url", "http://127.0.0.1:9/v1/") // echo adds a newline
	p := h.pool()
	if len(p.Accounts) != 2 {
		t.Fatalf("%d accounts, want 2", len(p.Accounts))
	}
	a, b := p.At(1), p.At(2)
	if a.Kind != accounts.KindAPIKey || a.Label != "work" || !a.Enabled || a.BaseURL != "" {
		t.Errorf("account 1 = %+v", a)
	}
	if b.BaseURL != "http://127.0.0.1:9/v1" || !strings.HasPrefix(b.Label, "api-key-") {
		t.Errorf("account 2 = %+v", b)
	}
	sec := h.secretsFile()
	if sec[a.ID]["api_key"] != key || sec[b.ID]["api_key"] != "sk-second-key" {
		t.Errorf("secrets.json = %v", sec)
	}
	if data, _ := os.ReadFile(h.path(home.AccountsFile)); strings.Contains(string(data), "sk-") {
		t.Errorf("accounts.json holds a key:\n%s", data)
	}

	before, _ := os.ReadFile(h.path(home.AccountsFile))
	for _, tc := range []struct {
		name, stdin string
		args        []string
		stderr      string
	}{
		{"empty stdin", "", nil, "No API key on stdin"},
		{"blank stdin", " \n", nil, "No API key on stdin"},
		{"two words", "sk-a sk-b", nil, "contains spaces"},
		{"bad base url", "sk-ok", []string{"--base-url", "ftp://x"}, "Invalid --base-url"},
		// A key in argv is refused, even with another on stdin, and never echoed.
		{"key as an argument", "sk-on-stdin", []string{"sk-in-argv-secret"}, "takes no arguments"},
		{"key as a flag", "sk-on-stdin", []string{"--key", "sk-in-argv-secret"}, "-key"},
	} {
		r := h.run(tc.stdin, append([]string{"add-key"}, tc.args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("%s: want exit 1 and %q on stderr: %v", tc.name, tc.stderr, r)
		}
		if strings.Contains(r.stdout+r.stderr, "sk-in-argv-secret") || strings.Contains(r.stdout+r.stderr, "sk-a") {
			t.Errorf("%s: the output repeats the key: %v", tc.name, r)
		}
	}
	if after, _ := os.ReadFile(h.path(home.AccountsFile)); string(after) != string(before) {
		t.Errorf("a refused add-key changed accounts.json")
	}
	if n := len(h.secretsFile()); n != 2 {
		t.Errorf("secrets.json has %d entries after refused add-keys, want 2", n)
	}
}

func TestImportCodex(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	fixture := codexFixture(t)
	r := h.ok("", "import", "codex", "--file", fixture)
	if !strings.Contains(r.stdout, "Imported ChatGPT account 1 (ada@example.com, plan plus)") {
		t.Errorf("import output %q", r.stdout)
	}
	p := h.pool()
	if len(p.Accounts) != 1 {
		t.Fatalf("%d accounts, want 1", len(p.Accounts))
	}
	a := *p.At(1)
	if a.Kind != accounts.KindChatGPT || a.Label != "ada@example.com" || a.Email != "ada@example.com" ||
		a.ChatGPTAccountID != "7f3c2a10-5b6e-4d8f-9a01-fixture00001" || a.PlanType != "plus" || !a.Enabled {
		t.Errorf("imported account = %+v", a)
	}
	tok, err := accounts.ReadCodexAuth(fixture)
	if err != nil {
		t.Fatal(err)
	}
	sec := h.secretsFile()[a.ID]
	if sec["access_token"] != tok.AccessToken || sec["refresh_token"] != tok.RefreshToken || sec["id_token"] != tok.IDToken {
		t.Errorf("secrets.json entry does not hold the login's tokens: %v", sec)
	}

	// Importing the same login again updates it.
	r = h.ok("", "import", "codex", "--file", fixture)
	if !strings.Contains(r.stdout, "Updated ChatGPT account 1") {
		t.Errorf("second import output %q", r.stdout)
	}
	if p = h.pool(); len(p.Accounts) != 1 || p.At(1).ID != a.ID {
		t.Fatalf("after a second import: %+v, want the same single account", p.Accounts)
	}

	// An older pair of the same login (its access token expires before the
	// stored one) never replaces the stored tokens: its refresh token may
	// be spent already.
	olderPath := filepath.Join(t.TempDir(), "auth.json")
	writeCodexAuth(t, olderPath, "ada@example.com", "7f3c2a10-5b6e-4d8f-9a01-fixture00001", "plus", "", "older")
	before := h.secretsFile()[a.ID]
	h.ok("", "import", "codex", "--file", olderPath)
	if sec := h.secretsFile()[a.ID]; sec["refresh_token"] != before["refresh_token"] {
		t.Errorf("an older pair replaced the stored tokens")
	}

	// A newer login of the same account (new tokens, new plan, new label)
	// replaces the tokens and the plan, still without a duplicate.
	newerPath := filepath.Join(t.TempDir(), "auth.json")
	newer := writeCodexAuthExp(t, newerPath, "ada@example.com", "7f3c2a10-5b6e-4d8f-9a01-fixture00001", "pro", "", "newer",
		time.Date(2101, 1, 1, 0, 0, 0, 0, time.UTC)) // the fixture's lasts until 2100
	h.ok("", "import", "codex", "--file", newerPath, "--label", "ada-pro")
	p = h.pool()
	if len(p.Accounts) != 1 || p.At(1).ID != a.ID || p.At(1).PlanType != "pro" || p.At(1).Label != "ada-pro" {
		t.Fatalf("after importing a newer login: %+v", p.Accounts)
	}
	if sec := h.secretsFile()[a.ID]; sec["access_token"] != newer.accessToken || sec["refresh_token"] != newer.refreshToken {
		t.Errorf("the newer tokens were not stored: %v", sec)
	}

	// Another workspace is another account.
	other := filepath.Join(t.TempDir(), "auth.json")
	writeCodexAuth(t, other, "ada@example.com", "acc-other-workspace", "team", "", "other")
	h.ok("", "import", "codex", "--file", other)
	if p = h.pool(); len(p.Accounts) != 2 || p.At(2).ChatGPTAccountID != "acc-other-workspace" || p.At(2).PlanType != "team" {
		t.Errorf("after importing another workspace: %+v", p.Accounts)
	}
}

func TestImportCodexDefaultPath(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	codexHome := filepath.Join(t.TempDir(), "codex")
	h.setenv("CODEX_HOME", codexHome)
	want := filepath.Join(codexHome, "auth.json")

	// No login there yet: the error names the default path.
	r := h.run("", "import", "codex")
	if r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("want exit 1 naming %s: %v", want, r)
	}

	// The account id is only in the JWT claims (no tokens.account_id).
	login := writeCodexAuth(t, want, "grace@example.com", "acc-grace", "pro", "", "grace")
	r = h.ok("", "import", "codex")
	if !strings.Contains(r.stdout, want) {
		t.Errorf("import output does not name %s: %q", want, r.stdout)
	}
	p := h.pool()
	if len(p.Accounts) != 1 {
		t.Fatalf("%d accounts, want 1", len(p.Accounts))
	}
	a := p.At(1)
	if a.Label != "grace@example.com" || a.Email != "grace@example.com" || a.ChatGPTAccountID != "acc-grace" || a.PlanType != "pro" {
		t.Errorf("account = %+v", a)
	}
	if sec := h.secretsFile()[a.ID]; sec["refresh_token"] != login.refreshToken {
		t.Errorf("secret = %v", sec)
	}
}

func TestImportCodexErrors(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	dir := t.TempDir()
	noTokens := filepath.Join(dir, "api-key-only.json")
	if err := os.WriteFile(noTokens, []byte(`{"OPENAI_API_KEY":"sk-codex-api-key-secret","tokens":null}`), 0o600); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "broken.json")
	if err := os.WriteFile(broken, []byte(`{"tokens":{"access_token":"at-secret-broken"`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"import", "codex", "--file", noTokens}, noTokens},
		{[]string{"import", "codex", "--file", broken}, broken},
		{[]string{"import", "codex", "--file", filepath.Join(dir, "missing.json")}, "missing.json"},
		{[]string{"import"}, "Usage: rotor import codex"},
		{[]string{"import", "claude"}, "Usage: rotor import codex"},
	} {
		r := h.run("", tc.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("want exit 1 and %q on stderr: %v", tc.want, r)
		}
		if out := r.stdout + r.stderr; strings.Contains(out, "sk-codex-api-key-secret") || strings.Contains(out, "at-secret-broken") {
			t.Errorf("the output shows a secret: %v", r)
		}
	}
	if _, err := os.Stat(h.path(home.AccountsFile)); err == nil {
		t.Error("a failed import wrote accounts.json")
	}
}

func TestJSONOutputs(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	// No accounts: the lists are empty arrays, not null.
	for _, args := range [][]string{{"list", "--json"}, {"status", "--json"}, {"rotation", "status", "--json"}} {
		v := jsonObject(t, h.ok("", args...).stdout)
		if a, ok := v["accounts"].([]any); !ok || len(a) != 0 {
			t.Errorf("%v with no accounts: accounts = %#v, want []", args, v["accounts"])
		}
	}

	h.addKey("key-a", "sk-json-a")
	auth := filepath.Join(t.TempDir(), "auth.json")
	writeCodexAuth(t, auth, "lin@example.com", "acc-lin", "plus", "acc-lin", "lin")
	h.ok("", "import", "codex", "--file", auth)
	h.ok("", "switch", "2")
	p := h.pool()

	// Runtime state as a proxy would leave it: account 1 rate-limited with a
	// quota snapshot, account 2 recently used.
	rt := rotation.NewRuntime(h.dir, clock.System{})
	reset := time.Now().Add(30 * time.Minute)
	rt.RateLimited(p.At(1).ID, reset)
	rt.SetQuota(p.At(1).ID, rotation.Quota{
		Primary:   &rotation.Window{UsedPercent: 100, WindowMinutes: 300, ResetsAt: reset},
		Secondary: &rotation.Window{UsedPercent: 40, WindowMinutes: 10080, ResetsAt: time.Now().Add(72 * time.Hour)},
	})
	rt.Used(p.At(2).ID, 200)
	if err := rt.Sync(nil); err != nil {
		t.Fatal(err)
	}

	for _, cmd := range []string{"list", "status"} {
		v := jsonObject(t, h.ok("", cmd, "--json").stdout)
		hasKeys(t, cmd, v, "command", "pinned_account_index", "accounts")
		if v["command"] != "status" || v["pinned_account_index"] != 2.0 {
			t.Errorf("%s --json: command %v, pinned_account_index %v; want status, 2", cmd, v["command"], v["pinned_account_index"])
		}
		accts := v["accounts"].([]any)
		if len(accts) != 2 {
			t.Fatalf("%s --json: %d accounts, want 2", cmd, len(accts))
		}
		for i, a := range accts {
			m := hasKeys(t, cmd+" account", a, "index", "id", "label", "kind", "email", "plan_type",
				"enabled", "flagged_reason", "pinned", "state", "until")
			if m["index"] != float64(i+1) || m["id"] != p.At(i+1).ID {
				t.Errorf("%s account %d: index %v, id %v", cmd, i+1, m["index"], m["id"])
			}
		}
		a1, a2 := accts[0].(map[string]any), accts[1].(map[string]any)
		if a1["kind"] != "api-key" || a1["state"] != "rate-limited" || a1["pinned"] != false {
			t.Errorf("%s account 1: %v", cmd, a1)
		}
		if until, _ := a1["until"].(string); !sameSecond(until, reset) {
			t.Errorf("%s account 1 until = %v, want %s", cmd, a1["until"], reset.UTC().Format(time.RFC3339))
		}
		if a2["kind"] != "chatgpt" || a2["email"] != "lin@example.com" || a2["plan_type"] != "plus" ||
			a2["state"] != "available" || a2["pinned"] != true || a2["until"] != nil || a2["flagged_reason"] != nil {
			t.Errorf("%s account 2: %v", cmd, a2)
		}
	}

	v := jsonObject(t, h.ok("", "rotation", "status", "--json").stdout)
	hasKeys(t, "rotation status", v, "command", "pinned_account_index", "pin_source", "next", "accounts")
	if v["command"] != "rotation status" || v["pinned_account_index"] != 2.0 || v["pin_source"] != "manual" {
		t.Errorf("rotation status: command %v, pin %v from %v", v["command"], v["pinned_account_index"], v["pin_source"])
	}
	next := hasKeys(t, "next", v["next"], "index", "reason")
	if next["index"] != 2.0 || next["reason"] == "" {
		t.Errorf("next = %v, want the pinned account 2 with a reason", next)
	}
	accts := v["accounts"].([]any)
	if len(accts) != 2 {
		t.Fatalf("rotation status: %d accounts", len(accts))
	}
	states := []string{"available", "rate-limited", "circuit-open", "disabled", "flagged"}
	for i, a := range accts {
		m := hasKeys(t, "rotation account", a, "index", "label", "state", "until", "reason", "health", "last_used", "quota")
		s, _ := m["state"].(string)
		if !strings.HasPrefix(s, "cooling-down:") && !slices.Contains(states, s) {
			t.Errorf("account %d: state %q is not a rotation status word", i+1, s)
		}
	}
	a1, a2 := accts[0].(map[string]any), accts[1].(map[string]any)
	if a1["state"] != "rate-limited" || a1["label"] != "key-a" {
		t.Errorf("rotation account 1: %v", a1)
	}
	q := hasKeys(t, "quota", a1["quota"], "primary", "secondary")
	prim := hasKeys(t, "quota.primary", q["primary"], "used_percent", "window_minutes", "resets_at")
	hasKeys(t, "quota.secondary", q["secondary"], "used_percent", "window_minutes", "resets_at")
	if prim["used_percent"] != 100.0 || prim["window_minutes"] != 300.0 || !sameSecond(prim["resets_at"].(string), reset) {
		t.Errorf("quota.primary = %v", prim)
	}
	if lu, _ := a2["last_used"].(string); lu == "" {
		t.Errorf("rotation account 2 last_used = %v, want a time", a2["last_used"])
	} else if _, err := time.Parse(time.RFC3339, lu); err != nil {
		t.Errorf("last_used %q is not RFC 3339", lu)
	}
}

// sameSecond reports whether s is t as RFC 3339, to the second.
func sameSecond(s string, t time.Time) bool {
	got, err := time.Parse(time.RFC3339, s)
	return err == nil && got.Unix() == t.Unix()
}
