package main

import (
	"os"
	"strings"
	"testing"

	"github.com/rotorproxy/rotor/accounts/home"
)

// The same API key is one account: a second add-key names the account
// that has it and changes nothing; --update relabels that account; doctor
// and fix find a copy that got in before fingerprints existed.
func TestAddKeyRefusesAKnownKey(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	const key = "sk-proj-SAMEKEY0123456789abcdef"
	h.addKey("work", key)
	h.addKey("other", "sk-proj-OTHERKEY0123456789")
	before, _ := os.ReadFile(h.path(home.AccountsFile))
	if strings.Contains(string(before), "SAMEKEY") || !strings.Contains(string(before), `"key_fingerprint": "hmac-sha256:`) {
		t.Fatalf("accounts.json should hold a keyed fingerprint and never the key:\n%s", before)
	}

	r := h.run(key+"\n", "add-key", "--label", "again")
	if r.code != 1 || !strings.Contains(r.stderr, "This API key is already account 1 (work)") || !strings.Contains(r.stderr, "--update") {
		t.Fatalf("a known key: want exit 1 naming account 1 (work) and --update: %v", r)
	}
	if after, _ := os.ReadFile(h.path(home.AccountsFile)); string(after) != string(before) {
		t.Errorf("a refused add-key changed accounts.json")
	}

	r = h.ok(key, "add-key", "--update", "--label", "home", "--base-url", "http://127.0.0.1:9/v1")
	if !strings.Contains(r.stdout, "Updated API-key account 1 (home)") {
		t.Errorf("--update output: %v", r)
	}
	p := h.pool()
	if len(p.Accounts) != 2 || p.At(1).Label != "home" || p.At(1).BaseURL != "http://127.0.0.1:9/v1" {
		t.Fatalf("after --update: %+v", p.Accounts)
	}

	// A third account carries the same key but no fingerprint, as one added
	// by an older rotor would.
	h.addKey("legacy", "sk-proj-PLACEHOLDER0123456789")
	raw, _ := os.ReadFile(h.path(home.AccountsFile))
	p = h.pool()
	fp := p.At(3).KeyFingerprint
	raw = []byte(strings.Replace(string(raw), `"key_fingerprint": "`+fp+`",`, "", 1))
	if err := os.WriteFile(h.path(home.AccountsFile), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	sec, _ := os.ReadFile(h.path("secrets.json"))
	sec = []byte(strings.Replace(string(sec), "sk-proj-PLACEHOLDER0123456789", key, 1))
	if err := os.WriteFile(h.path("secrets.json"), sec, 0o600); err != nil {
		t.Fatal(err)
	}
	r = h.run("", "doctor")
	if !strings.Contains(r.stdout, "API-key account 3 has no key fingerprint yet") {
		t.Errorf("doctor does not see the unfingerprinted key: %v", r)
	}
	r = h.ok("", "fix")
	if !strings.Contains(r.stdout, "fingerprint") || !strings.Contains(r.stdout, "the same API key as account 1") {
		t.Errorf("fix output: %v", r)
	}
	p = h.pool()
	if len(p.Accounts) != 2 {
		t.Fatalf("after fix: %d accounts, want 2", len(p.Accounts))
	}
	r = h.run("", "doctor")
	if !strings.Contains(r.stdout, "no account is in the pool twice") {
		t.Errorf("doctor after fix: %v", r)
	}
	for _, l := range h.logs {
		if strings.Contains(l.stdout+l.stderr, "SAMEKEY") {
			t.Errorf("output shows the key: %v", l)
		}
	}
}

// serve and list warn, once, when secrets.json is readable by others.
func TestExposedSecretsWarning(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.addKey("work", "sk-proj-EXPOSED0123456789")
	if err := os.Chmod(h.path("secrets.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := h.ok("", "list")
	if n := strings.Count(r.stderr, "other users can read your keys"); n != 1 || !strings.Contains(r.stderr, "0644") {
		t.Errorf("list: want one warning naming 0644: %v", r)
	}
	srv := raceServe(t, rotorBin, h.env, "serve")
	srv.stop(t)
	if n := strings.Count(srv.stderr.String(), "other users can read your keys"); n != 1 {
		t.Errorf("serve: %d warnings about secrets.json, want 1:\n%s", n, srv.stderr.String())
	}
	if err := os.Chmod(h.path("secrets.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := h.ok("", "list"); strings.Contains(r.stderr, "warning") {
		t.Errorf("list warns about a 0600 file: %v", r)
	}
}
