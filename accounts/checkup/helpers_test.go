package checkup_test

import (
	"encoding/json"
	"github.com/rotorproxy/rotor/rotation/rotationtest"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/checkup"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/accounts/oauth"
	"github.com/rotorproxy/rotor/accounts/secrets"
	"github.com/rotorproxy/rotor/proxy"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation"
)

// testHome is a prepared ROTOR_HOME with its secrets (file backend), a
// fake auth server and a fake upstream.
type testHome struct {
	t    *testing.T
	dir  string
	sec  secrets.Store
	auth *fakeAuth
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
	return &testHome{t: t, dir: dir, sec: sec, auth: newFakeAuth(t), up: up}
}

// checkup returns a checkup over the home wired like the CLI wires it,
// with the fakes as upstream and auth server.
func (h *testHome) checkup(opts ...func(*checkup.Deps)) *checkup.Checkup {
	d := checkup.Deps{
		Dir:         h.dir,
		Secrets:     h.sec,
		SecretsMode: secrets.ModeFile,
		Runtime:     rotation.NewRuntime(h.dir, rotation.SystemClock{}),
		Refresher: &oauth.Refresher{Client: oauth.NewClient(h.auth.srv.URL), Secrets: h.sec, Dir: h.dir,
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
		}
	}
	return p
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

// fakeAuth is a token endpoint: each refresh token is answered by its
// prefix. "rt-good..." gets new tokens (the access token "at-<refresh>"),
// "rt-dead..." is refused for good (invalid_grant), "rt-flaky..." fails
// with a 503 (retryable). Every call is counted.
type fakeAuth struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls map[string]int
}

func newFakeAuth(t *testing.T) *fakeAuth {
	f := &fakeAuth{calls: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/oauth/token" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		r.ParseForm()
		rt := r.PostForm.Get("refresh_token")
		f.mu.Lock()
		f.calls[rt]++
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.PostForm.Get("grant_type") != "refresh_token" || r.PostForm.Get("client_id") != oauth.ClientID:
			w.WriteHeader(400)
			io.WriteString(w, `{"error":"invalid_request"}`)
		case strings.HasPrefix(rt, "rt-good"):
			json.NewEncoder(w).Encode(map[string]any{"access_token": "at-" + rt, "refresh_token": rt + "-next", "expires_in": 3600})
		case strings.HasPrefix(rt, "rt-dead"):
			w.WriteHeader(400)
			io.WriteString(w, `{"error":"invalid_grant","error_description":"refresh token expired"}`)
		default:
			w.WriteHeader(503)
			io.WriteString(w, `{"error":"temporarily_unavailable"}`)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAuth) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		n += c
	}
	return n
}

func (f *fakeAuth) count(rt string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[rt]
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
