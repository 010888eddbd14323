package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/accounts/hometest"
	"github.com/rotorproxy/rotor/rotation"
)

// TestUnreadableStore proves that every command that needs accounts.json
// refuses a store it cannot read or parse: exit 1, a message naming the file,
// STORAGE_UNREADABLE and "rotor fix", and no file of the home changed (no
// rewrite, no backup rotation, no secret stored).
func TestUnreadableStore(t *testing.T) {
	t.Parallel()
	fixture := codexFixture(t)
	commands := []struct {
		stdin string
		args  []string
	}{
		{"", []string{"list"}},
		{"", []string{"list", "--json"}},
		{"", []string{"status", "--json"}},
		{"sk-unreadable-store-key", []string{"add-key", "--label", "x"}},
		{"", []string{"import", "codex", "--file", fixture}},
		{"", []string{"remove", "1"}},
		{"", []string{"enable", "1"}},
		{"", []string{"disable", "1"}},
		{"", []string{"switch", "1"}},
		{"", []string{"unpin"}},
		{"", []string{"rotation", "status"}},
		{"", []string{"rotation", "status", "--json"}},
	}
	damage := []struct {
		name    string
		content string
		dir     bool
	}{
		{name: "truncated", content: `{"version":1,"accounts":[{"id":"acct_1","label":"a","ki`},
		{name: "garbage", content: "\x89PNG\r\n\x1a\n not a store"},
		{name: "empty", content: ""},
		{name: "trailing data", content: `{"version":1,"accounts":[]}` + "\n" + `{"version":1,"accounts":[]}`},
		{name: "unknown version", content: `{"version":9,"accounts":[]}`},
		{name: "directory", dir: true},
	}
	for _, d := range damage {
		t.Run(d.name, func(t *testing.T) {
			h := newHome(t)
			h.addKey("a", "sk-good-a")
			h.addKey("b", "sk-good-b") // accounts.json.bak now exists
			store := h.path(home.AccountsFile)
			if err := os.Remove(store); err != nil {
				t.Fatal(err)
			}
			if d.dir {
				if err := os.Mkdir(store, 0o700); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(store, []byte(d.content), 0o600); err != nil {
				t.Fatal(err)
			}
			before := hometest.FilesOf(t, h.dir).WithoutLocks()
			for _, c := range commands {
				r := h.run(c.stdin, c.args...)
				if r.code != 1 {
					t.Errorf("want exit 1: %v", r)
				}
				for _, want := range []string{store, "STORAGE_UNREADABLE", "rotor fix"} {
					if !strings.Contains(r.stderr, want) {
						t.Errorf("stderr does not contain %q: %v", want, r)
					}
				}
				if after := hometest.FilesOf(t, h.dir).WithoutLocks(); !maps.Equal(before, after) {
					t.Fatalf("rotor %s changed the home:\nbefore %q\nafter  %q", strings.Join(c.args, " "), before, after)
				}
			}
		})
	}
}

// TestConcurrentAddKey runs 20 rotor add-key processes at once on a home
// that already has one account: all 21 accounts land, each with its own key,
// and the backups hold the three previous versions, newest first.
func TestConcurrentAddKey(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.addKey("seed", "sk-seed")
	const n = 20
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type proc struct {
		label          string
		wait           func() error
		stdout, stderr *bytes.Buffer
	}
	var procs []proc
	for i := range n {
		label := fmt.Sprintf("p%02d", i)
		cmd, stdout, stderr := h.command(ctx, "sk-concurrent-"+label, "add-key", "--label", label)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, proc{label, cmd.Wait, stdout, stderr})
	}
	for _, p := range procs {
		if err := p.wait(); err != nil {
			t.Errorf("add-key %s: %v (context: %v)\nstdout: %s\nstderr: %s", p.label, err, ctx.Err(), p.stdout, p.stderr)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	pool := h.pool() // parses with the store's own checks: valid JSON, unique ids
	if len(pool.Accounts) != n+1 {
		t.Fatalf("%d accounts, want %d", len(pool.Accounts), n+1)
	}
	sec := h.secretsFile()
	var labels []string
	for i, a := range pool.Accounts {
		labels = append(labels, a.Label)
		want := "sk-concurrent-" + a.Label
		if i == 0 {
			want = "sk-seed"
		}
		if sec[a.ID]["api_key"] != want {
			t.Errorf("account %s has key %v, want %s", a.Label, sec[a.ID]["api_key"], want)
		}
	}
	if labels[0] != "seed" {
		t.Errorf("the first account is %q, want seed", labels[0])
	}
	slices.Sort(labels)
	for i := range n {
		if labels[i] != fmt.Sprintf("p%02d", i) {
			t.Fatalf("labels %q, want seed and p00..p19", labels)
		}
	}
	if len(sec) != n+1 {
		t.Errorf("secrets.json has %d entries, want %d", len(sec), n+1)
	}

	// Each update appended one account, so the backups are prefixes of the
	// final list: .bak has all 21 (the current state), .bak.1 20, .bak.2 19.
	for b := range accounts.Backups {
		name := home.BackupName(h.path(home.AccountsFile), b)
		bp := hometest.PoolFile(t, name)
		want := n + 1 - b // .bak is the current state (docs/files.md)
		if len(bp.Accounts) != want {
			t.Errorf("%s has %d accounts, want %d", filepath.Base(name), len(bp.Accounts), want)
			continue
		}
		for i := range bp.Accounts {
			if bp.Accounts[i].ID != pool.Accounts[i].ID {
				t.Errorf("%s account %d is %s, want %s", filepath.Base(name), i+1, bp.Accounts[i].ID, pool.Accounts[i].ID)
			}
		}
	}
}

// TestWritersWaitForLock holds the store lock (flock on ROTOR_HOME/.lock) in
// this process and shows that a rotor process waits for it before writing.
func TestWritersWaitForLock(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.addKey("a", "sk-lock-a")
	l, err := home.LockFile(h.path(".lock"), false, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd, stdout, stderr := h.command(ctx, "", "disable", "1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("rotor disable finished (%v) while the lock was held\nstdout: %s\nstderr: %s", err, stdout, stderr)
	case <-time.After(time.Second):
	}
	if !h.pool().At(1).Enabled {
		t.Fatal("rotor wrote accounts.json while the lock was held")
	}
	l.Unlock()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("rotor disable: %v\nstderr: %s", err, stderr)
		}
	case <-time.After(cmdTimeout):
		t.Fatal("rotor disable did not finish after the lock was released")
	}
	if h.pool().At(1).Enabled {
		t.Error("account 1 still enabled")
	}
}

// TestHomeIsPrivate runs the commands that write to ROTOR_HOME, plus a
// runtime-state write as a proxy makes one, and checks the home is 0700 and
// every file in it 0600.
func TestHomeIsPrivate(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.addKey("a", "sk-private-a")
	auth := filepath.Join(t.TempDir(), "auth.json")
	writeCodexAuth(t, auth, "priv@example.com", "acc-priv", "plus", "", "priv")
	h.ok("", "import", "codex", "--file", auth)
	h.ok("", "switch", "2")
	h.ok("", "disable", "1")
	h.ok("", "unpin")
	pool := h.pool()
	rt := rotation.NewRuntime(h.dir, clock.System{})
	rt.Cooldown(pool.At(2).ID, "server-error", time.Minute)
	if err := rt.Sync(nil); err != nil {
		t.Fatal(err)
	}

	fi, err := os.Stat(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("ROTOR_HOME mode %v, want 0700", fi.Mode().Perm())
	}
	seen := map[string]bool{}
	err = filepath.WalkDir(h.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == h.dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		seen[d.Name()] = true
		if !info.Mode().IsRegular() || info.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want a regular file with 0600", d.Name(), info.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"accounts.json", "accounts.json.bak", "accounts.json.bak.1", "accounts.json.bak.2",
		"secrets.json", ".lock", "state.json"} {
		if !seen[name] {
			t.Errorf("%s was not written; files: %v", name, seen)
		}
	}

	// A home that others can read is tightened by the next command.
	if err := os.Chmod(h.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h.ok("", "list")
	if fi, err := os.Stat(h.dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("after rotor list, ROTOR_HOME mode %v (%v), want 0700", fi.Mode().Perm(), err)
	}
}

// TestSecretsStayInSecretsFile adds an API key and a ChatGPT login, runs
// every account command (plain and --json, successes and failures), and
// checks that no key or token appears in any output or in any file of the
// home but secrets.json.
func TestSecretsStayInSecretsFile(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	const key = "sk-proj-LEAKCHECK0123456789abcdefXYZ"
	auth := filepath.Join(t.TempDir(), "auth.json")
	login := writeCodexAuth(t, auth, "leak@example.com", "acc-leak", "plus", "acc-leak", "leakcheck")
	secrets := map[string]string{
		"api key": key, "access token": login.accessToken, "refresh token": login.refreshToken,
		"id token": login.idToken,
		// The signature segment alone would also betray a token.
		"access token signature": login.accessToken[strings.LastIndex(login.accessToken, ".")+1:],
	}

	h.ok(key+"\n", "add-key", "--label", "k")
	h.ok("", "import", "codex", "--file", auth)
	h.ok("", "import", "codex", "--file", auth)
	for _, args := range [][]string{
		{"list"}, {"list", "--json"}, {"status"}, {"status", "--json"},
		{"rotation", "status"}, {"rotation", "status", "--json"},
		{"switch", "2"}, {"disable", "1"}, {"enable", "1"}, {"unpin"}, {"version"}, {"help"},
	} {
		h.ok("", args...)
	}
	// Failures print too.
	h.run(key, "add-key", "extra-argument")
	h.run(key+" "+key, "add-key")
	h.run("", "switch", "9")
	h.run("", "frobnicate")
	h.ok("", "remove", "1")
	h.ok("", "list", "--json")

	for _, r := range h.logs {
		for what, s := range secrets {
			if strings.Contains(r.stdout, s) || strings.Contains(r.stderr, s) {
				t.Errorf("the %s appears in the output of %v", what, r)
			}
		}
	}
	err := filepath.WalkDir(h.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "secrets.json" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for what, s := range secrets {
			if strings.Contains(string(b), s) {
				t.Errorf("the %s is in %s", what, d.Name())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The removed API-key account's key is gone from secrets.json too; the
	// login's tokens are there.
	data, err := os.ReadFile(h.path("secrets.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), key) {
		t.Error("secrets.json still holds the key of the removed account")
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil || !strings.Contains(string(data), login.refreshToken) {
		t.Errorf("secrets.json does not hold the login (%v)", err)
	}
}

// The repair STORAGE_UNREADABLE points to never loses a key: three keys,
// a store truncated mid-account, rotor fix; all three accounts and their
// secrets are there afterwards, and the proxy can use them.
func TestFixAfterTruncationKeepsEveryKey(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	for _, k := range []string{"sk-one", "sk-two", "sk-three"} {
		h.addKey(k[3:], k)
	}
	secretsBefore, _ := os.ReadFile(h.path("secrets.json"))
	if err := os.WriteFile(h.path(home.AccountsFile), []byte(`{"version":1,"accounts":[{"id":`), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := h.run("", "list"); r.code != 1 || !strings.Contains(r.stderr, "rotor fix") {
		t.Fatalf("list on a damaged store: %v", r)
	}
	h.ok("", "fix")
	p := h.pool()
	if len(p.Accounts) != 3 || p.Accounts[2].Label != "three" {
		t.Fatalf("after fix: %+v", p.Accounts)
	}
	if after, _ := os.ReadFile(h.path("secrets.json")); string(after) != string(secretsBefore) {
		t.Error("fix changed secrets.json")
	}
	secs := h.secretsFile()
	for _, a := range p.Accounts {
		if secs[a.ID]["api_key"] == nil {
			t.Errorf("account %s lost its key", a.Label)
		}
	}
}

// state.json is advisory (docs/files.md): damaged, it is read as empty with a
// one-line warning, doctor reports it and fix rewrites it.
func TestDamagedStateIsAdvisory(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.addKey("one", "sk-one")
	if err := os.WriteFile(h.path("state.json"), []byte(`{"version":1,"accounts":{"x":`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"list"}, {"status", "--json"}, {"rotation", "status"}, {"forecast"}, {"report", "--json"}} {
		r := h.run("", args...)
		if r.code != 0 || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "state.json") || !strings.Contains(r.stderr, "rotor fix") {
			t.Errorf("rotor %s on a damaged state.json: %v", strings.Join(args, " "), r)
		}
	}
	if r := h.run("", "doctor"); r.code != 0 || !regexp.MustCompile(`(?m)^\s*warn\s+state\s+.*damaged`).MatchString(r.stdout) {
		t.Errorf("doctor: %v", r)
	}
	h.ok("", "fix")
	data, _ := os.ReadFile(h.path("state.json"))
	if !json.Valid(data) {
		t.Errorf("fix left state.json damaged: %s", data)
	}
	if kept, _ := filepath.Glob(h.path("state.json.corrupt-*")); len(kept) != 1 {
		t.Errorf("the damaged state was not kept aside: %v", kept)
	}
	if r := h.ok("", "list"); r.stderr != "" {
		t.Errorf("a warning after fix: %q", r.stderr)
	}
}
