package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/oauth"
	"github.com/rotorproxy/rotor/accounts/oauth/oauthtest"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// The real Codex CLI through rotor exec, on the ChatGPT account imported
// from its own CODEX_HOME (docs/codex.md). The upstream refuses that login's
// access token, so rotor refreshes during the run; afterwards Codex's
// auth.json must hold the live pair rotor got, or Codex would be logged out
// (refresh_token_reused) the next time it refreshed by itself.
func TestE2ECodexLinkedRefresh(t *testing.T) {
	t.Parallel()
	cache := e2eClients(t)
	w := newE2EWorld(t)
	w.useClients(cache)
	auth := oauthtest.New()
	if err := auth.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { auth.Close() })
	w.setenv("ROTOR_AUTH_BASE_URL", auth.URL())

	_, file := w.codexLogin(t)
	login, err := accounts.ReadCodexAuth(file)
	if err != nil {
		t.Fatal(err)
	}
	auth.AddRefreshToken(login.RefreshToken)
	w.up.Set(login.AccessToken, upstreamtest.Behavior{Status: 401}) // expired: refresh

	if r := w.rotor(30*time.Second, "", "import", "codex"); r.code != 0 || !strings.Contains(r.stdout, "Linked") {
		t.Fatalf("import codex: %v", r)
	}
	args := append([]string{"exec", "--", "codex"}, e2eCodexFlags...)
	r := w.rotor(e2eCodexTimeout, "", append(args, "say hello")...)
	if r.code != 0 || !strings.Contains(r.stdout, e2eHello) {
		t.Fatalf("codex exec through rotor exec on the linked account: %v", r)
	}
	if n := auth.TokenCalls("refresh_token"); n != 1 {
		t.Fatalf("%d refresh calls during the run, want 1", n)
	}
	issued := auth.Issued()[0]
	now, err := accounts.ReadCodexAuth(file)
	if err != nil {
		t.Fatal(err)
	}
	if now.RefreshToken != issued.RefreshToken || now.AccessToken != issued.AccessToken {
		t.Fatal("after the run, CODEX_HOME/auth.json does not hold the pair rotor's refresh got")
	}
	// The headers this Codex sends with a turn reach the ChatGPT upstream
	// (it names its session "session-id" on the wire).
	for _, c := range w.up.Requests() {
		if c.Path != "/backend-api/codex/responses" {
			continue
		}
		for _, h := range []string{"session-id", "x-codex-turn-metadata", "x-codex-window-id", "x-codex-beta-features", "x-client-request-id"} {
			if c.Header.Get(h) == "" {
				t.Errorf("Codex's %s header did not reach the upstream: %v", h, c.Header)
			}
		}
	}
	for _, c := range e2eResponses(w.up) {
		if c.Token != login.AccessToken && c.Token != issued.AccessToken {
			t.Errorf("a call reached the upstream with another token")
		}
	}
	// What Codex would do next by itself: refresh with its file's token.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := oauth.NewClient(auth.URL()).Refresh(ctx, now.RefreshToken); err != nil {
		t.Errorf("Codex's own next refresh would fail: %v", err)
	}
}
