package main

import (
	"encoding/json"
	"strings"
	"testing"

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
	out, errOut, code = runApp(env, "login", "--device", "--label", "work")
	if code != 0 || !strings.Contains(out, "Updated ChatGPT account 1") {
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
