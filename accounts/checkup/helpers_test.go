package checkup_test

import (
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/checkup"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/accounts/oauth"
	"github.com/rotorproxy/rotor/accounts/oauth/oauthtest"
	"github.com/rotorproxy/rotor/accounts/secrets"
	"github.com/rotorproxy/rotor/proxy"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/rotationtest"
)

// testHome is a prepared ROTOR_HOME with its secrets (file backend), a
// fake auth server and a fake upstream.
type testHome struct {
	t    *testing.T
	dir  string
	sec  secrets.Store
	auth *oauthtest.Server
	up   *upstreamtest.Server
}

func newTestHome(t *testing.T) *testHome {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "home")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.Open(dir, secrets.ModeFile, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
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
	return &testHome{t: t, dir: dir, sec: sec, auth: auth, up: up}
}

// checkup returns a checkup over the home wired like the CLI wires it,
// with the fakes as upstream and auth server.
func (h *testHome) checkup(opts ...func(*checkup.Deps)) *checkup.Checkup {
	d := checkup.Deps{
		Dir:         h.dir,
		Secrets:     h.sec,
		SecretsMode: secrets.ModeFile,
		Runtime:     rotation.NewRuntime(h.dir, rotation.SystemClock{}),
		Refresher: &oauth.Refresher{Client: oauth.NewClient(h.auth.URL()), Secrets: h.sec, Dir: h.dir,
			Clock: rotationtest.Real()},
		Prober: proxy.Prober{ChatGPTBase: h.up.ChatGPTBase(), OpenAIBase: h.up.OpenAIBase()},
		Alive:  func(pid int) bool { return pid == os.Getpid() },
	}
	for _, o := range opts {
		o(&d)
	}
	return checkup.New(d)
}

// acct describes an account to put in the store, and its secret.
type acct struct {
	kind    accounts.Kind
	label   string
	email   string
	cg      string // chatgpt_account_id
	enabled bool
	flag    string
	secret  *secrets.Secret // nil: no secret
	legacy  bool            // an API key added before fingerprints: none stored
}

func apiKey(label, key string) acct {
	return acct{kind: accounts.KindAPIKey, label: label, enabled: true, secret: &secrets.Secret{APIKey: key}}
}

func chatgpt(label, email, cg, access, refresh string, expires time.Duration) acct {
	return acct{kind: accounts.KindChatGPT, label: label, email: email, cg: cg, enabled: true,
		secret: &secrets.Secret{AccessToken: access, RefreshToken: refresh, ExpiresAt: time.Now().Add(expires).UTC()}}
}

// write stores accts through the real store (so backups rotate as in use)
// and returns the pool.
func (h *testHome) write(accts ...acct) *accounts.Pool {
	h.t.Helper()
	st, err := accounts.Open(h.dir)
	if err != nil {
		h.t.Fatal(err)
	}
	salt, err := h.sec.Salt()
	if err != nil {
		h.t.Fatal(err)
	}
	p, err := st.Update(func(p *accounts.Pool) error {
		for i, a := range accts {
			p.Accounts = append(p.Accounts, accounts.Account{
				ID: "acct_" + strings.Repeat(string(rune('a'+i)), 4), Label: a.label, Kind: a.kind, Email: a.email,
				ChatGPTAccountID: a.cg, Enabled: a.enabled, AddedAt: time.Now().UTC(),
			})
			n := &p.Accounts[len(p.Accounts)-1]
			n.SetFlag(a.flag)
			if a.kind == accounts.KindAPIKey && a.secret != nil && !a.legacy {
				n.KeyFingerprint = secrets.Fingerprint(salt, a.secret.APIKey) // as add-key stores it
			}
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	for i, a := range accts {
		if a.secret != nil {
			if err := h.sec.Set(p.Accounts[i].ID, *a.secret); err != nil {
				h.t.Fatal(err)
			}
			h.teachAuth(a.secret.RefreshToken)
		}
	}
	return p
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

// update changes the store through the real store.
func (h *testHome) update(fn func(p *accounts.Pool)) *accounts.Pool {
	h.t.Helper()
	st, err := accounts.Open(h.dir)
	if err != nil {
		h.t.Fatal(err)
	}
	p, err := st.Update(func(p *accounts.Pool) error { fn(p); return nil })
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

func (h *testHome) path(name string) string { return filepath.Join(h.dir, name) }

func (h *testHome) pool() *accounts.Pool {
	h.t.Helper()
	data, err := os.ReadFile(h.path(home.AccountsFile))
	if err != nil {
		h.t.Fatal(err)
	}
	p, err := accounts.Parse("accounts.json", data)
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

func (h *testHome) secret(id string) (secrets.Secret, bool) {
	s, err := h.sec.Get(id)
	return s, err == nil
}

func (h *testHome) writeFile(name, content string, mode os.FileMode) {
	h.t.Helper()
	if err := os.WriteFile(h.path(name), []byte(content), mode); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Chmod(h.path(name), mode); err != nil {
		h.t.Fatal(err)
	}
}

// fileState is one file of the home: its mode and bytes.
type fileState struct {
	mode os.FileMode
	data string
}

// snapshot is every file of the home (and the home's own mode), so a test
// can tell that a dry run changed nothing at all.
func (h *testHome) snapshot() map[string]fileState {
	h.t.Helper()
	out := map[string]fileState{}
	fi, err := os.Stat(h.dir)
	if err != nil {
		h.t.Fatal(err)
	}
	out["."] = fileState{mode: fi.Mode()}
	ents, err := os.ReadDir(h.dir)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			h.t.Fatal(err)
		}
		data, _ := os.ReadFile(h.path(e.Name()))
		out[e.Name()] = fileState{mode: fi.Mode(), data: string(data)}
	}
	return out
}

func (h *testHome) sameAs(before map[string]fileState) {
	h.t.Helper()
	after := h.snapshot()
	if maps.Equal(before, after) {
		return
	}
	for k, v := range before {
		if w, ok := after[k]; !ok {
			h.t.Errorf("%s was removed", k)
		} else if w != v {
			h.t.Errorf("%s changed (mode %v -> %v)", k, v.mode, w.mode)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			h.t.Errorf("%s was created", k)
		}
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
