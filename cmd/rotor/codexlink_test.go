package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/oauth"
	"github.com/rotorproxy/rotor/accounts/oauth/oauthtest"
	"github.com/rotorproxy/rotor/accounts/secrets"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// import codex links the account to its file; unlink and --unlink stop it.
func TestImportLinksAndUnlink(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	file := codexFixture(t)
	r := h.ok("", "import", "codex", "--file", file)
	if !strings.Contains(r.stdout, "Linked to that file") || !strings.Contains(r.stdout, `"rotor unlink 1"`) {
		t.Errorf("import output: %v", r)
	}
	if got := h.pool().At(1).CodexAuthFile; got != file {
		t.Fatalf("codex_auth_file = %q, want %q", got, file)
	}
	r = h.ok("", "unlink", "1")
	if !strings.Contains(r.stdout, "Unlinked account 1") || h.pool().At(1).CodexAuthFile != "" {
		t.Errorf("unlink: %v, link %q", r, h.pool().At(1).CodexAuthFile)
	}
	if r := h.ok("", "unlink", "1"); !strings.Contains(r.stdout, "is not linked") {
		t.Errorf("second unlink: %v", r)
	}
	h.ok("", "import", "codex", "--file", file)
	h.ok("", "import", "codex", "--file", file, "--unlink")
	if got := h.pool().At(1).CodexAuthFile; got != "" {
		t.Errorf("import --unlink left the link %q", got)
	}
}

// import codex where Codex never logged in says to run "codex login" first,
// exits 1, and writes nothing.
func TestImportWithoutCodexLoginSaysToLogIn(t *testing.T) {
	t.Parallel()
	h := newHome(t) // its CODEX_HOME holds no login
	r := h.run("", "import", "codex")
	if r.code != 1 || r.stdout != "" {
		t.Fatalf("want exit 1 and nothing on stdout: %v", r)
	}
	for _, want := range []string{"Codex CLI is not logged in", `Run "codex login" first`, `"rotor login"`} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q: %v", want, r)
		}
	}
	if strings.Contains(r.stderr, "no such file") {
		t.Errorf("stderr quotes the open error: %q", r.stderr)
	}
	if _, err := os.Stat(h.path("accounts.json")); err == nil {
		t.Error("accounts.json was written")
	}
	if _, err := os.Stat(h.path("secrets.json")); err == nil {
		t.Error("secrets.json was written")
	}
}

// docs/codex.md across real processes: two rotor serves share an account linked
// to a Codex CLI auth.json, and Codex refreshes on its own in between.
// Every refresh token is spent exactly once, every request succeeds, and at
// the end rotor and the file hold the same live pair.
func TestCodexLinkAcrossProcesses(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs rotor processes")
	}
	up, auth := startFakes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := oauth.NewClient(auth.URL())

	// Codex CLI is logged in with a pair the fake issued.
	auth.AddRefreshToken("rt-codex-login")
	t1, err := client.Refresh(ctx, "rt-codex-login")
	if err != nil {
		t.Fatal(err)
	}
	codexHome := t.TempDir()
	file := filepath.Join(codexHome, "auth.json")
	writeAuth := func(tok oauth.Tokens) { // as Codex writes it
		b, _ := json.MarshalIndent(map[string]any{"OPENAI_API_KEY": nil, "last_refresh": time.Now().UTC(),
			"tokens": map[string]any{"id_token": tok.IDToken, "access_token": tok.AccessToken,
				"refresh_token": tok.RefreshToken, "account_id": oauthtest.DefaultIdentity.AccountID}}, "", "  ")
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	readAuth := func() oauth.Tokens {
		ct, err := accounts.ReadCodexAuth(file)
		if err != nil {
			t.Fatal(err)
		}
		return oauth.Tokens{IDToken: ct.IDToken, AccessToken: ct.AccessToken, RefreshToken: ct.RefreshToken}
	}
	writeAuth(t1)

	h := newHome(t)
	for k, v := range map[string]string{
		"ROTOR_AUTH_BASE_URL": auth.URL(), "ROTOR_CHATGPT_BASE_URL": up.ChatGPTBase(),
		"ROTOR_OPENAI_BASE_URL": up.OpenAIBase(), "ROTOR_CLIENT_KEY": raceClientKey, "CODEX_HOME": codexHome,
	} {
		h.setenv(k, v)
	}
	h.ok("", "import", "codex") // from $CODEX_HOME/auth.json
	id := h.pool().At(1).ID

	a := raceServe(t, rotorBin, h.env, "A")
	b := raceServe(t, rotorBin, h.env, "B")
	burst := func(what string) {
		t.Helper()
		var wg sync.WaitGroup
		for _, p := range []*raceProc{a, b, a, b, a, b} {
			wg.Go(func() {
				st, body, err := raceRequest(p)
				if err != nil || st != 200 || !raceHelloStream(body) {
					t.Errorf("%s: request through %s: %d %v %.200s", what, p.name, st, err, body)
				}
			})
		}
		wg.Wait()
	}

	// 1. The upstream refuses Codex's first access token: both serves meet
	// the 401 at once; one refreshes, and the file gets the new pair.
	up.Set(t1.AccessToken, upstreamtest.Behavior{Status: 401})
	burst("after the first 401")
	if n := auth.TokenCalls("refresh_token"); n != 2 { // Codex's login, then rotor's one refresh
		t.Fatalf("%d refresh calls, want 2 (the login and rotor's one refresh)", n)
	}
	t2 := readAuth()
	issued := auth.Issued()
	if t2.RefreshToken != issued[len(issued)-1].RefreshToken {
		t.Fatal("Codex's auth.json does not hold the pair rotor's refresh got")
	}

	// 2. Codex refreshes by itself, with what its file holds.
	t3, err := client.Refresh(ctx, t2.RefreshToken)
	if err != nil {
		t.Fatalf("Codex's refresh with the written-back token: %v", err)
	}
	writeAuth(t3)

	// 3. rotor's access token is refused: rotor adopts Codex's pair instead
	// of spending its own refresh token, which Codex spent.
	up.Set(t2.AccessToken, upstreamtest.Behavior{Status: 401})
	burst("after Codex refreshed")
	if n := auth.TokenCalls("refresh_token"); n != 3 {
		t.Errorf("%d refresh calls, want 3: rotor must adopt Codex's pair, not refresh", n)
	}
	spent := map[string]int{}
	for _, r := range auth.TokenRequests() {
		spent[r.Form.Get("refresh_token")]++
	}
	for rt, n := range spent {
		if n != 1 {
			t.Errorf("refresh token %.12s… spent %d times", rt, n)
		}
	}
	a.stop(t)
	b.stop(t)

	sec, err := secrets.Open(h.dir, "file", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sec.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if s.RefreshToken != t3.RefreshToken || readAuth().RefreshToken != t3.RefreshToken {
		t.Fatal("rotor and Codex do not both hold Codex's latest pair")
	}
	if _, err := client.Refresh(ctx, t3.RefreshToken); err != nil {
		t.Errorf("the pair both hold is not live: %v", err)
	}
	if r := h.ok("", "list", "--json"); strings.Contains(r.stdout, "token-invalid") {
		t.Errorf("the account was flagged: %s", r.stdout)
	}
}
