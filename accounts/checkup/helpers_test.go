package checkup_test

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/checkup"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/clock/clocktest"
	"github.com/rotorproxy/rotor/accounts/hometest"
	"github.com/rotorproxy/rotor/accounts/oauth"
	"github.com/rotorproxy/rotor/accounts/oauth/oauthtest"
	"github.com/rotorproxy/rotor/accounts/secrets"
	"github.com/rotorproxy/rotor/proxy"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation"
)

// testHome is a prepared ROTOR_HOME (hometest) with a fake auth server
// and a fake upstream.
type testHome struct {
	*hometest.Home
	t    *testing.T
	auth *oauthtest.Server
	up   *upstreamtest.Server
}

func newTestHome(t *testing.T) *testHome {
	t.Helper()
	up := upstreamtest.New("../../testdata")
	if err := up.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	auth := oauthtest.New()
	if err := auth.Start(""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { auth.Close() })
	// A refresh names the new tokens after the spent one ("at-rt-x",
	// "rt-x-next"), so a test can tell the upstream what to do with them.
	auth.SetTokenNames(func(rt string) (string, string) { return "at-" + rt, rt + "-next" })
	return &testHome{Home: hometest.New(t), t: t, auth: auth, up: up}
}

// checkup returns a checkup over the home wired like the CLI wires it,
// with the fakes as upstream and auth server.
func (h *testHome) checkup(opts ...func(*checkup.Deps)) *checkup.Checkup {
	adapters := proxy.NewAdapters(h.up.ChatGPTBase(), h.up.OpenAIBase())
	d := checkup.Deps{
		Dir:         h.Dir,
		Secrets:     h.Secrets,
		SecretsMode: secrets.ModeFile,
		Runtime:     rotation.NewRuntime(h.Dir, clock.System{}),
		Refresher: &oauth.Refresher{Client: oauth.NewClient(h.auth.URL()), Secrets: h.Secrets, Dir: h.Dir,
			Clock: clocktest.Real()},
		Adapters: func(k accounts.Kind) checkup.Adapter { return adapters.For(k) },
		Alive:    func(pid int) bool { return pid == os.Getpid() },
	}
	for _, o := range opts {
		o(&d)
	}
	return checkup.New(d)
}

// write prepares accts (hometest.Home.Write) and teaches the fake token
// endpoint their refresh tokens.
func (h *testHome) write(accts ...hometest.Account) *accounts.Pool {
	h.t.Helper()
	for _, a := range accts {
		if a.Secret != nil {
			h.teachAuth(a.Secret.RefreshToken)
		}
	}
	return h.Write(accts...)
}

// teachAuth tells the fake token endpoint how to answer refresh token rt,
// by its prefix: "rt-good..." refreshes, "rt-flaky..." fails with a 503
// (retryable), and anything else, "rt-dead..." included, is unknown to it
// and refused for good (invalid_grant).
func (h *testHome) teachAuth(rt string) {
	switch {
	case strings.HasPrefix(rt, "rt-good"):
		h.auth.AddRefreshToken(rt)
	case strings.HasPrefix(rt, "rt-flaky"):
		h.auth.FailRefreshToken(rt, http.StatusServiceUnavailable, `{"error":"temporarily_unavailable"}`)
	}
}

// action finds the first action of kind on target (target "" matches any).
func action(res checkup.FixResult, kind, target string) *checkup.Action {
	for i, a := range res.Actions {
		if a.Action == kind && (target == "" || strings.Contains(a.Target, target)) {
			return &res.Actions[i]
		}
	}
	return nil
}

// check finds the check named name.
func check(res checkup.DoctorResult, name string) checkup.Check {
	for _, c := range res.Checks {
		if c.Name == name {
			return c
		}
	}
	return checkup.Check{Name: name, Status: "missing"}
}

func secretsOf(key string) secrets.Secret { return secrets.Secret{APIKey: key} }
