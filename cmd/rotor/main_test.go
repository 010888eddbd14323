package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/hometest"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// rotorBin is the rotor binary the tests run, built once by TestMain.
var rotorBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rotor-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rotorBin = filepath.Join(dir, "rotor")
	build := exec.Command("go", "build", "-o", rotorBin, "./cmd/rotor")
	build.Dir = filepath.Join("..", "..") // the module root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building rotor: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if path := os.Getenv("ROTOR_E2E_REPORT"); path != "" {
		os.WriteFile(path, []byte(e2eReport()+browserReport()), 0o644)
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// cmdTimeout bounds every run of the binary.
const cmdTimeout = 60 * time.Second

// cliHome is a rotor home for one test, and the environment rotor runs with:
// a fresh HOME, ROTOR_HOME (not created yet: rotor creates it),
// ROTOR_SECRETS=file and a CODEX_HOME with no login in it.
type cliHome struct {
	t    *testing.T
	dir  string // ROTOR_HOME
	env  []string
	logs []result     // every run, so tests can check no output leaks a secret
	host *serviceHost // the machine in-process runs of "rotor service" see; nil: this one
}

func newHome(t *testing.T) *cliHome {
	t.Helper()
	root := t.TempDir()
	h := &cliHome{t: t, dir: filepath.Join(root, "rotor-home")}
	h.env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + filepath.Join(root, "user"),
		"ROTOR_HOME=" + h.dir,
		"ROTOR_SECRETS=file",
		"CODEX_HOME=" + filepath.Join(root, "codex-empty"),
		// Nothing a test runs may reach the real backends (a serve reads
		// its ChatGPT accounts' usage at start): a closed loopback port
		// unless the test names its fakes.
		"ROTOR_AUTH_BASE_URL=http://127.0.0.1:1",
		"ROTOR_CHATGPT_BASE_URL=http://127.0.0.1:1",
		"ROTOR_OPENAI_BASE_URL=http://127.0.0.1:1",
	}
	return h
}

// newServedHome is a home with one API-key account (label "a", key
// "sk-a") whose upstream is a fresh fake, closed when the test ends.
func newServedHome(t *testing.T) (*cliHome, *upstreamtest.Server) {
	t.Helper()
	up := upstreamtest.New("../../testdata")
	if err := up.Start(""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	h := newHome(t)
	h.setenv("ROTOR_OPENAI_BASE_URL", up.OpenAIBase())
	h.addKey("a", "sk-a")
	return h, up
}

// setenv sets one variable of the environment rotor runs with.
func (h *cliHome) setenv(key, value string) {
	for i, kv := range h.env {
		if strings.HasPrefix(kv, key+"=") {
			h.env[i] = key + "=" + value
			return
		}
	}
	h.env = append(h.env, key+"="+value)
}

// unsetenv removes one variable from the environment rotor runs with.
func (h *cliHome) unsetenv(key string) {
	h.env = slices.DeleteFunc(h.env, func(kv string) bool { return strings.HasPrefix(kv, key+"=") })
}

type result struct {
	args           []string
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("rotor %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// command prepares a run of the rotor binary with stdin.
func (h *cliHome) command(ctx context.Context, stdin string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.CommandContext(ctx, rotorBin, args...)
	cmd.Env = h.env
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return cmd, &stdout, &stderr
}

// run runs one rotor command line in-process, with stdin and the home's
// environment, as the binary would (the same app, streams injected), and
// returns its output and exit status. Tests where a real process is the
// point (locks, signals, kill -9, a running serve) use command instead.
func (h *cliHome) run(stdin string, args ...string) result {
	h.t.Helper()
	return h.runApp(stdin, false, args)
}

// runApp is run, with stdout a terminal or not.
func (h *cliHome) runApp(stdin string, stdoutTTY bool, args []string) result {
	h.t.Helper()
	env := map[string]string{}
	for _, kv := range h.env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	var stdout, stderr bytes.Buffer
	a := &app{stdin: strings.NewReader(stdin), stdout: &stdout, stderr: &stderr,
		getenv: func(k string) string { return env[k] }, environ: func() []string { return slices.Clone(h.env) },
		stdoutTTY: stdoutTTY, host: h.host}
	done := make(chan int, 1)
	go func() { done <- a.run(args) }()
	var r result
	select {
	case code := <-done:
		r = result{args: args, stdout: stdout.String(), stderr: stderr.String(), code: code}
	case <-time.After(cmdTimeout):
		h.t.Fatalf("rotor %s did not finish within %v", strings.Join(args, " "), cmdTimeout)
	}
	h.logs = append(h.logs, r)
	return r
}

// ok runs rotor and fails the test unless it exits 0.
func (h *cliHome) ok(stdin string, args ...string) result {
	h.t.Helper()
	r := h.run(stdin, args...)
	if r.code != 0 {
		h.t.Fatalf("want exit 0: %v", r)
	}
	return r
}

// addKey adds an API-key account with label and key.
func (h *cliHome) addKey(label, key string) {
	h.t.Helper()
	h.ok(key, "add-key", "--label", label)
}

func (h *cliHome) path(name string) string { return filepath.Join(h.dir, name) }

// pool parses accounts.json with the store's own parser.
func (h *cliHome) pool() *accounts.Pool {
	h.t.Helper()
	return hometest.PoolIn(h.t, h.dir)
}

// secretsFile is the content of secrets.json: account id to secret fields.
func (h *cliHome) secretsFile() map[string]map[string]any {
	h.t.Helper()
	data, err := os.ReadFile(h.path("secrets.json"))
	if err != nil {
		h.t.Fatal(err)
	}
	var doc struct {
		Secrets map[string]map[string]any `json:"secrets"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		h.t.Fatalf("secrets.json: %v", err)
	}
	return doc.Secrets
}

// jsonObject decodes out as exactly one JSON object and checks it is
// pretty-printed.
func jsonObject(t *testing.T, out string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("more than one JSON value:\n%s", out)
	}
	if !strings.HasPrefix(out, "{\n  \"") {
		t.Errorf("not pretty-printed:\n%s", out)
	}
	return v
}

// hasKeys checks that obj has every key.
func hasKeys(t *testing.T, what string, obj any, keys ...string) map[string]any {
	t.Helper()
	m, ok := obj.(map[string]any)
	if !ok {
		t.Fatalf("%s is %T, want an object", what, obj)
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s has no %q field: %v", what, k, m)
		}
	}
	return m
}

// makeJWT builds an unsigned JWT (header.payload.signature) with claims.
func makeJWT(t *testing.T, claims map[string]any, sig string) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]string{"alg": "RS256", "typ": "JWT"}) + "." + enc(claims) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(sig))
}

// codexLogin is a Codex CLI auth.json and the tokens in it.
type codexLogin struct {
	idToken, accessToken, refreshToken string
}

// writeCodexAuth writes a Codex auth.json for a ChatGPT login to path. The
// account id is only in the JWT claims unless accountID is set.
func writeCodexAuth(t *testing.T, path, email, chatgptAccountID, plan, accountID, tag string) codexLogin {
	t.Helper()
	return writeCodexAuthExp(t, path, email, chatgptAccountID, plan, accountID, tag, time.Now().Add(10*24*time.Hour))
}

// writeCodexAuthExp is writeCodexAuth with the access token expiring at exp.
func writeCodexAuthExp(t *testing.T, path, email, chatgptAccountID, plan, accountID, tag string, exp time.Time) codexLogin {
	t.Helper()
	auth := map[string]any{"chatgpt_account_id": chatgptAccountID, "chatgpt_plan_type": plan}
	l := codexLogin{
		idToken: makeJWT(t, map[string]any{"email": email, "https://api.openai.com/auth": auth,
			"exp": time.Now().Add(time.Hour).Unix()}, "id-sig-"+tag),
		accessToken: makeJWT(t, map[string]any{"https://api.openai.com/auth": auth,
			"exp": exp.Unix()}, "access-sig-"+tag),
		refreshToken: "rt_" + tag + "_refresh_secret",
	}
	tokens := map[string]any{"id_token": l.idToken, "access_token": l.accessToken, "refresh_token": l.refreshToken}
	if accountID != "" {
		tokens["account_id"] = accountID
	}
	b, err := json.MarshalIndent(map[string]any{"OPENAI_API_KEY": nil, "tokens": tokens, "last_refresh": time.Now()}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return l
}

// codexFixture copies testdata/jwt/codex_auth.json into a fresh Codex home
// and returns its path. An import links the account to the file, and a
// refresh writes back to it: tests must never link the repository's own.
func codexFixture(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "jwt", "codex_auth.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "codex-home")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
