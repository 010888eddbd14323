package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/oauth"
	"github.com/rotorproxy/rotor/accounts/oauth/oauthtest"
	"github.com/rotorproxy/rotor/accounts/secrets"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation"
)

// Tests of docs/selection.md/docs/accounts.md token refresh inside one proxy: after a 401 the
// ChatGPT account's token is refreshed once and the call retried on the
// same account; an access token about to expire is refreshed before use; a
// refresh that fails cools the account down (and, when the refresh token is
// dead, flags it token-invalid) and the request moves on.

// chatgptRefreshEnv is a proxy wired like `rotor serve`, with a real
// oauth.Refresher against a fake authorization server, on the ROTOR_HOME
// and fake upstream of an env from newEnv.
type chatgptRefreshEnv struct {
	*env
	auth *oauthtest.Server
	sec  secrets.Store
}

func newChatGPTRefreshEnv(t *testing.T, accts []acct) *chatgptRefreshEnv {
	t.Helper()
	base := newEnv(t, accts)
	auth := oauthtest.New()
	if err := auth.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { auth.Close() })
	dir := base.store.Dir()
	sec, err := secrets.Open(dir, "file", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var e *env // set below; the refresher flags through its store and selector
	ref := &oauth.Refresher{
		Client:  oauth.NewClient(auth.URL()),
		Secrets: sec,
		Dir:     dir,
		Flag: func(id, reason string) error {
			p, err := e.store.Flag(id, reason, false)
			if err == nil {
				e.sel.SetPool(p) // what the watcher would do within a second
			}
			return err
		},
		Clock: clock.System{},
	}
	e = startProxy(t, base.up, dir, peerConfig{seed: 3, refresher: ref})
	return &chatgptRefreshEnv{env: e, auth: auth, sec: sec}
}

func (e *chatgptRefreshEnv) secret(i int) secrets.Secret {
	e.t.Helper()
	s, err := e.sec.Get(e.id(i))
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// expectOK reads a 200 hello stream.
func chatgptExpectOK(t *testing.T, resp *http.Response) {
	t.Helper()
	body := readAll(t, resp)
	if resp.StatusCode != 200 || !strings.Contains(body, "event: response.completed") {
		t.Fatalf("status %d: %.300s", resp.StatusCode, body)
	}
}

func TestChatGPTRefreshAfter401RetriesSameAccount(t *testing.T) {
	t.Parallel()
	e := newChatGPTRefreshEnv(t, []acct{{accounts.KindChatGPT, "c1"}})
	e.up.Set("c1", upstreamtest.Behavior{Status: 401})
	e.auth.AddRefreshToken("r-c1")

	chatgptExpectOK(t, e.do("POST", "/v1/responses", streamBody))
	if n := e.auth.TokenCalls("refresh_token"); n != 1 {
		t.Fatalf("%d refresh calls, want 1", n)
	}
	issued := e.auth.Issued()[0]
	if e.up.Count("c1") != 1 || e.up.Count(issued.AccessToken) != 1 {
		t.Errorf("upstream saw old %d, new %d", e.up.Count("c1"), e.up.Count(issued.AccessToken))
	}
	// The retry went to the same account, with its account id.
	for _, r := range e.up.Requests() {
		if r.Token == issued.AccessToken && r.Header.Get("chatgpt-account-id") != "cg-c1" {
			t.Errorf("retry carried chatgpt-account-id %q", r.Header.Get("chatgpt-account-id"))
		}
	}
	if s := e.secret(1); s.AccessToken != issued.AccessToken || s.RefreshToken != issued.RefreshToken {
		t.Error("secrets do not hold the refreshed tokens")
	}
	st := e.sel.Runtime().Snapshot(e.id(1))
	if !st.CooldownUntil.IsZero() || st.TokensAt.IsZero() || st.LastStatus != 200 {
		t.Errorf("state after a successful refresh %+v", st)
	}

	// The next request uses the new token at once.
	chatgptExpectOK(t, e.do("POST", "/v1/responses", streamBody))
	if e.up.Count("c1") != 1 || e.up.Count(issued.AccessToken) != 2 || e.auth.TokenCalls("") != 1 {
		t.Errorf("second request: old %d new %d token calls %d", e.up.Count("c1"), e.up.Count(issued.AccessToken), e.auth.TokenCalls(""))
	}
}

func TestChatGPTRefreshBeforeExpiry(t *testing.T) {
	t.Parallel()
	e := newChatGPTRefreshEnv(t, []acct{{accounts.KindChatGPT, "c1"}})
	if err := e.sec.Set(e.id(1), secrets.Secret{AccessToken: "c1", RefreshToken: "r-c1", ExpiresAt: time.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	e.auth.AddRefreshToken("r-c1")
	chatgptExpectOK(t, e.do("POST", "/v1/responses", streamBody))
	if e.up.Count("c1") != 0 {
		t.Error("a token expiring within 5 minutes was sent instead of refreshed")
	}
	if e.auth.TokenCalls("refresh_token") != 1 || e.up.Count(e.auth.Issued()[0].AccessToken) != 1 {
		t.Errorf("refresh calls %d", e.auth.TokenCalls("refresh_token"))
	}
}

func TestChatGPTDeadRefreshTokenFlagsAndRotates(t *testing.T) {
	t.Parallel()
	e := newChatGPTRefreshEnv(t, []acct{{accounts.KindChatGPT, "c1"}, {accounts.KindChatGPT, "c2"}})
	e.up.Set("c1", upstreamtest.Behavior{Status: 401})
	// r-c1 was never issued by the fake: invalid_grant.
	compatPrefer(e.env, 1)
	chatgptExpectOK(t, e.do("POST", "/v1/responses", streamBody))
	if e.up.Count("c1") != 1 || e.up.Count("c2") != 1 {
		t.Errorf("c1 %d c2 %d", e.up.Count("c1"), e.up.Count("c2"))
	}
	if n := e.auth.TokenCalls("refresh_token"); n != 1 {
		t.Errorf("%d refresh calls, want 1", n)
	}
	p, err := e.store.Load()
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := p.At(1).Flagged(); !ok || r != accounts.FlagTokenInvalid {
		t.Errorf("account 1 flag %q %v, want token-invalid", r, ok)
	}
	if s := e.sel.Status()[0]; s.State != rotation.SkipFlagged {
		t.Errorf("account 1 state %q", s.State)
	}
	if s := e.secret(1); s.AccessToken != "c1" || s.RefreshToken != "r-c1" {
		t.Error("a failed refresh changed the stored secret")
	}
}

func TestChatGPTRefreshServerErrorCoolsDownWithoutFlag(t *testing.T) {
	t.Parallel()
	e := newChatGPTRefreshEnv(t, []acct{{accounts.KindChatGPT, "c1"}, {accounts.KindChatGPT, "c2"}})
	e.up.Set("c1", upstreamtest.Behavior{Status: 401})
	e.auth.AddRefreshToken("r-c1")
	e.auth.FailRefresh(500, `{"error":"server_error"}`)
	compatPrefer(e.env, 1)
	chatgptExpectOK(t, e.do("POST", "/v1/responses", streamBody))
	if e.up.Count("c2") != 1 {
		t.Errorf("the request did not move on to account 2")
	}
	s := e.sel.Status()[0]
	if s.State != "cooling-down:"+rotation.CooldownAuthFailure {
		t.Errorf("account 1 state %q, want cooling-down:auth-failure", s.State)
	}
	if _, flagged := s.Account.Flagged(); flagged {
		t.Error("a transient refresh failure flagged the account")
	}
}
