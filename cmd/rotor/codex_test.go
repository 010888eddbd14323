package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// "rotor codex link" points Codex, signed in as itself, at rotor; unlink
// takes it back; Codex's own settings stay as they were (SPEC §14).
func TestCodexLinkAndUnlink(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	codexHome := filepath.Join(t.TempDir(), "codex")
	h.setenv("CODEX_HOME", codexHome)
	cfg := filepath.Join(codexHome, "config.toml")
	const mine = "# mine\nmodel = \"gpt-5-codex\"\n\n[profiles.fast]\nmodel = \"gpt-5-mini\"\n"
	if err := os.MkdirAll(codexHome, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(mine), 0o600); err != nil {
		t.Fatal(err)
	}
	// No serve runs: the stable serve's address. Codex is not signed in
	// here, and stderr says what to do about it.
	r := h.ok("", "codex", "link")
	want := "# mine\nmodel = \"gpt-5-codex\"\n\nopenai_base_url = \"http://127.0.0.1:8787/v1\"\n" +
		"chatgpt_base_url = \"http://127.0.0.1:8787/backend-api/\"\n\n[profiles.fast]\nmodel = \"gpt-5-mini\"\n"
	if got, _ := os.ReadFile(cfg); string(got) != want {
		t.Fatalf("config.toml after link:\n%s", got)
	}
	if !strings.Contains(r.stdout, cfg) || !strings.Contains(r.stderr, "not signed in with ChatGPT") {
		t.Errorf("link said: %v", r)
	}
	// Signed in, but as an account rotor does not have.
	writeCodexAuth(t, filepath.Join(codexHome, "auth.json"), "ada@example.com", "acc-ada", "plus", "", "ada")
	if r := h.ok("", "codex", "link", "--url", "http://127.0.0.1:8787"); !strings.Contains(r.stdout, "already") ||
		!strings.Contains(r.stderr, "rotor import codex") {
		t.Errorf("second link said: %v", r)
	}
	h.ok("", "import", "codex")
	if r := h.ok("", "codex", "link"); r.stderr != "" {
		t.Errorf("link with the login in the pool warned: %q", r.stderr)
	}
	// Unlink gives the file back; twice changes nothing.
	h.ok("", "codex", "unlink")
	if got, _ := os.ReadFile(cfg); string(got) != mine {
		t.Errorf("config.toml after unlink:\n%s", got)
	}
	if r := h.ok("", "codex", "unlink"); !strings.Contains(r.stdout, "nothing to do") {
		t.Errorf("second unlink said: %v", r)
	}
	// A file rotor cannot read is never written: exit 1, and why.
	const broken = "model = \"gpt-5\n[profiles\n"
	if err := os.WriteFile(cfg, []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	r = h.run("", "codex", "link")
	if got, _ := os.ReadFile(cfg); r.code != 1 || string(got) != broken || !strings.Contains(r.stderr, "not TOML rotor can read") {
		t.Errorf("link of a broken file: %v, file now %q", r, got)
	}
	if r := h.run("", "codex", "relink"); r.code != 1 || !strings.Contains(r.stderr, "Usage: rotor codex") {
		t.Errorf("a wrong subcommand: %v", r)
	}
}

// rotor exec gives Codex signed in as a pool account the two base URLs,
// and its own provider with the client key otherwise.
func TestCodexOverridesFollowTheSignIn(t *testing.T) {
	got := strings.Join(codexOverrides("/usr/bin/codex", "http://127.0.0.1:5000/v1", true), " ")
	if got != `-c openai_base_url="http://127.0.0.1:5000/v1" -c chatgpt_base_url="http://127.0.0.1:5000/backend-api/"` {
		t.Errorf("signed in: %s", got)
	}
	if got := strings.Join(codexOverrides("codex", "http://127.0.0.1:5000/v1", false), " "); !strings.Contains(got, `model_provider="rotor"`) {
		t.Errorf("not signed in: %s", got)
	}
	if codexOverrides("python3", "http://x/v1", true) != nil {
		t.Error("another command got overrides")
	}
}
