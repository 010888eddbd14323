package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts/oauth/oauthtest"
	"github.com/rotorproxy/rotor/accounts/secrets"
)

// runApp runs one command line in-process with env as the environment.
func runApp(env map[string]string, args ...string) (stdout, stderr string, code int) {
	var out, errb strings.Builder
	a := &app{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }}
	code = a.run(args)
	return out.String(), errb.String(), code
}

// rotor login --device adds the signed-in account with its identity and
// tokens; signing in again updates it instead of adding another.
func TestLoginDeviceAddsThenUpdates(t *testing.T) {
	t.Parallel()
	auth := oauthtest.New()
	auth.SetDeviceInterval("0.05")
	auth.SetDeviceApproveAfter(2)
	if err := auth.Start(""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { auth.Close() })
	home := t.TempDir()
	env := map[string]string{"ROTOR_HOME": home, "ROTOR_SECRETS": "file", "ROTOR_AUTH_BASE_URL": auth.URL()}

	out, errOut, code := runApp(env, "login", "--device")
	if code != 0 {
		t.Fatalf("login exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "Added ChatGPT account 1 (ada@example.com, plan plus)") {
		t.Fatalf("stdout %q", out)
	}
	if !strings.Contains(errOut, "/codex/device") {
		t.Errorf("the device code instructions were not shown: %q", errOut)
	}
	// The device page is the browser's account's: signing in again names
	// the account the code got, and how to get another.
	out, errOut, code = runApp(env, "login", "--device", "--label", "work")
	if code != 0 || !strings.Contains(out, "Already account 1, ada@example.com; its tokens were renewed.") ||
		!strings.Contains(out, "sign out of ChatGPT in the browser") || !strings.Contains(out, "The pool has 1 account ") {
		t.Fatalf("second login exit %d: %s %s", code, out, errOut)
	}

	out, _, _ = runApp(env, "list", "--json")
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	accts := raw["accounts"].([]any)
	if len(accts) != 1 {
		t.Fatalf("%d accounts after two logins", len(accts))
	}
	a := accts[0].(map[string]any)
	if a["label"] != "work" || a["email"] != "ada@example.com" || a["plan_type"] != "plus" || a["kind"] != "chatgpt" {
		t.Fatalf("account %v", a)
	}
	sec, err := secrets.Open(home, "file", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sec.Get(a["id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	issued := auth.Issued()
	last := issued[len(issued)-1]
	if s.AccessToken != last.AccessToken || s.RefreshToken != last.RefreshToken || s.ExpiresAt.IsZero() {
		t.Fatalf("stored tokens are not the last issued ones (expires %v)", s.ExpiresAt)
	}
	if strings.Contains(out, last.AccessToken) || strings.Contains(out, last.RefreshToken) {
		t.Fatal("a token leaked into the output")
	}
}

// signedInBrowser plays the user's browser for in-process runs of "rotor
// login" in h: an xdg-open on h's PATH hands it the sign-in URL, and it
// follows the sign-in through to rotor's callback. The fake sign-in server
// behind the URL decides which account that is, as a signed-in browser would.
func signedInBrowser(t *testing.T, h *cliHome) {
	t.Helper()
	bin := t.TempDir()
	newcomerBrowser(t, bin)
	h.setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	h.setenv("ROTOR_LOGIN_ADDR", "127.0.0.1:0")
}

// newcomerBrowser puts a stand-in for the desktop's URL opener in bin and
// plays the user's browser behind it (for the README's lines and for
// the in-process logins of login_test.go alike): it opens the sign-in URL rotor hands
// it, follows the sign-in through to rotor's callback and wants rotor's
// "Signed in" page there. The fake sign-in server decides which account
// that is, as a signed-in browser would.
func newcomerBrowser(t *testing.T, bin string) {
	t.Helper()
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	opened := filepath.Join(bin, "opened")
	script := "#!/bin/sh\nprintf '%s' \"$1\" > " + opened + ".tmp && mv " + opened + ".tmp " + opened + "\n"
	if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	browser := &http.Client{Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			u, err := os.ReadFile(opened)
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			os.Remove(opened)
			resp, err := browser.Get(string(u))
			if err != nil {
				t.Errorf("the sign-in page: %v", err)
				continue
			}
			resp.Body.Close()
			// The page the user is left looking at.
			if resp, err = browser.Get(resp.Header.Get("Location")); err != nil {
				t.Errorf("rotor's callback: %v", err)
				continue
			}
			page, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "Signed in. You can close this tab") {
				t.Errorf("rotor's callback answered %d %q (%v), want the signed-in page", resp.StatusCode, page, err)
			}
		}
	}()
}

// newLoginHome is a rotor home signing in at a fresh fake sign-in server
// through signedInBrowser.
func newLoginHome(t *testing.T) (*cliHome, *oauthtest.Server) {
	t.Helper()
	auth := oauthtest.New()
	if err := auth.Start(""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { auth.Close() })
	h := newHome(t)
	h.setenv("ROTOR_AUTH_BASE_URL", auth.URL())
	signedInBrowser(t, h)
	return h, auth
}

var bob = oauthtest.Identity{Email: "bob@example.com", AccountID: "7f3c2a10-5b6e-4d8f-9a01-fixture00002", PlanType: "pro"}

// Two rotor logins in a row, from a browser still signed in to the first
// account, add two accounts: the second asks for a fresh sign-in, and the
// user signs in with the other account there.
func TestLoginAddsTwoAccountsInARow(t *testing.T) {
	t.Parallel()
	h, auth := newLoginHome(t)
	auth.SignInNext(oauthtest.DefaultIdentity, bob)
	r := h.ok("", "login")
	if !strings.Contains(r.stdout, "Added ChatGPT account 1 (ada@example.com, plan plus).") ||
		!strings.Contains(r.stdout, "The pool has 1 account ") || !strings.Contains(r.stdout, `"rotor serve"`) ||
		!strings.Contains(r.stdout, `"rotor codex link"`) {
		t.Fatalf("first login: %v", r)
	}
	r = h.ok("", "login")
	if !strings.Contains(r.stdout, "Added ChatGPT account 2 (bob@example.com, plan pro).") ||
		!strings.Contains(r.stdout, "The pool has 2 accounts ") {
		t.Fatalf("second login: %v", r)
	}
	if p := h.pool(); len(p.Accounts) != 2 || p.At(2).ChatGPTAccountID != bob.AccountID {
		t.Fatalf("pool after two logins: %+v", p.Accounts)
	}
	for _, q := range auth.Authorizations() {
		if q.Get("prompt") != "login" {
			t.Errorf("an authorize request without prompt=login: %v", q)
		}
	}
}

// A login that turns out to be an account already in the pool says which
// one, that its tokens were renewed, and how to add another; it is no
// failure (exit 0).
func TestLoginOfAnAccountInThePoolSaysSo(t *testing.T) {
	t.Parallel()
	h, auth := newLoginHome(t)
	auth.SignInNext(oauthtest.DefaultIdentity, bob, bob)
	h.ok("", "login")
	h.ok("", "login")
	if n := len(h.pool().Accounts); n != 2 {
		t.Fatalf("%d accounts after logins of ada and bob, want 2", n)
	}
	before := h.secretsFile()[h.pool().At(2).ID]["access_token"]
	r := h.run("", "login")
	if r.code != 0 {
		t.Fatalf("want exit 0: %v", r)
	}
	want := "Already account 2, bob@example.com; its tokens were renewed. To add another account, " +
		"run \"rotor login\" again and sign in with that account when the page asks"
	if !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "private window") ||
		!strings.Contains(r.stdout, "The pool has 2 accounts ") {
		t.Fatalf("login of bob again: %v", r)
	}
	if len(h.pool().Accounts) != 2 {
		t.Fatalf("%d accounts, want 2", len(h.pool().Accounts))
	}
	if after := h.secretsFile()[h.pool().At(2).ID]["access_token"]; after == before {
		t.Error("the tokens were not renewed")
	}
}
