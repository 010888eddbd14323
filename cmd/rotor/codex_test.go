package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// "rotor codex link" points Codex, signed in as itself, at rotor; unlink
// takes it back; Codex's own settings stay as they were (docs/codex.md).
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
	if r := h.ok("", "codex", "link"); strings.Contains(r.stderr, "signed in") || strings.Contains(r.stderr, "import") {
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

// "rotor codex link" with no serve at the URL it wrote still links (exit
// 0), and says on stderr that Codex cannot connect until a serve runs
// there, and how to start one; with a serve listening it says nothing of it.
func TestCodexLinkSaysWhenNoServeListens(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	codexHome := filepath.Join(t.TempDir(), "codex")
	h.setenv("CODEX_HOME", codexHome)
	cfg := filepath.Join(codexHome, "config.toml")

	// A port nothing listens on any more.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	root := fmt.Sprintf("http://127.0.0.1:%d", port)
	r := h.run("", "codex", "link", "--url", root)
	if r.code != 0 || !strings.Contains(r.stdout, "Codex goes through rotor at "+root) {
		t.Fatalf("link with no serve: %v", r)
	}
	if got, _ := os.ReadFile(cfg); !strings.Contains(string(got), `openai_base_url = "`+root+`/v1"`) {
		t.Fatalf("config.toml after link:\n%s", got)
	}
	want := fmt.Sprintf("rotor: no rotor serve is listening at %s yet, so Codex cannot connect: "+
		"start one with \"rotor serve --port %d\" (and keep it running); or \"rotor service install\"", root, port)
	if !strings.Contains(r.stderr, want) {
		t.Errorf("stderr does not say no serve listens:\n%s\nwant %q", r.stderr, want)
	}
	if strings.Contains(r.stdout, "listening") {
		t.Errorf("the diagnostic went to stdout: %q", r.stdout)
	}

	// Something listens there now: no word of it.
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	root = "http://" + ln.Addr().String()
	if r := h.ok("", "codex", "link", "--url", root); strings.Contains(r.stderr, "listening") {
		t.Errorf("link to a listening serve: %v", r)
	}

	// On the default port, the serve and the service are the two ways.
	if c, err := net.Dial("tcp", "127.0.0.1:8787"); err == nil {
		c.Close()
		t.Skip("something listens on 127.0.0.1:8787 on this machine")
	}
	r = h.ok("", "codex", "link", "--url", "http://127.0.0.1:8787")
	want = "rotor: no rotor serve is listening at http://127.0.0.1:8787 yet, so Codex cannot connect: " +
		"start one with \"rotor serve\" (and keep it running), or \"rotor service install\" to run it now and at every login."
	if !strings.Contains(r.stderr, want) {
		t.Errorf("stderr on the default port:\n%s\nwant %q", r.stderr, want)
	}
}
