package main

// The end-to-end test of docs/codex.md with the real Codex CLI: Codex keeps its
// own ChatGPT sign-in and its built-in provider, and `rotor codex link`
// points both of its base URLs at a running `rotor serve`.
//
// Between Codex and rotor stands a tap (e2eTap): a reverse proxy in this
// process that passes every request and answer through unchanged and
// records them, because rotor answers some of Codex's calls itself
// (wham/usage) and logs no path for them, and the fake upstream sees
// nothing of those. `rotor codex link --url` names the tap's address; the
// tap forwards to the serve's.
//
// Run it alone with: go test -run TestE2ECodexSignedIn ./cmd/rotor/
// It skips, like the other client tests, when npm cannot reach its registry.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/oauth/oauthtest"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

const (
	// e2eSignedInPrompt makes the fake's ToolRoundTrip answer with a tool
	// call first, so the turn is two model requests.
	e2eSignedInPrompt = "what is the weather in Paris?"
	// e2eSignedInOwnUsed and e2eSignedInOtherUsed are the primary windows
	// the fake reports for the two accounts (x-codex-* headers). Above 95%
	// the other account is deferred (docs/selection.md): it serves only when Codex's
	// own account cannot, so the turn starts on Codex's own account.
	e2eSignedInOwnUsed   = 30
	e2eSignedInOtherUsed = 96
)

// e2eSignedInOther is the pool's second ChatGPT account.
var e2eSignedInOther = oauthtest.Identity{Email: "grace@example.com", AccountID: "7f3c2a10-5b6e-4d8f-9a01-fixture00002", PlanType: "pro"}

// ---------------------------------------------------------------------------
// The tap between Codex and rotor.

// e2eTapped is one exchange between Codex and rotor, as the tap saw it.
type e2eTapped struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Status                 int // 101 for a WebSocket that was opened
	RespHeader             http.Header
	RespBody               []byte // its first e2eTapBody bytes; nothing of a socket
}

func (x e2eTapped) bearer() string {
	b, _ := strings.CutPrefix(x.Header.Get("Authorization"), "Bearer ")
	return b
}

const e2eTapBody = 64 << 10

// e2eTap forwards every request to rotor unchanged (no X-Forwarded-*, no
// compression of its own, WebSocket upgrades included) and records each
// exchange once it is over.
type e2eTap struct {
	URL  string // http://127.0.0.1:PORT
	mu   sync.Mutex
	log  []e2eTapped
	open int // exchanges not over yet
}

// settle waits until no exchange is open (a WebSocket is recorded when it
// closes), at most d.
func (tp *e2eTap) settle(t *testing.T, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		tp.mu.Lock()
		open := tp.open
		tp.mu.Unlock()
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d exchanges between Codex and rotor still open %v after Codex exited", open, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (tp *e2eTap) exchanges() []e2eTapped {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return slices.Clone(tp.log)
}

// e2eTapWriter keeps the head of the body it passes on; Unwrap lets the
// reverse proxy flush and hijack (WebSocket) through it.
type e2eTapWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (w *e2eTapWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *e2eTapWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if room := e2eTapBody - w.body.Len(); room > 0 {
		w.body.Write(p[:min(room, len(p))])
	}
	return w.ResponseWriter.Write(p)
}

func (w *e2eTapWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type e2eTapKey struct{}

func newE2ETap(t *testing.T, target string) *e2eTap {
	t.Helper()
	to, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	transport := &http.Transport{Proxy: nil, DisableCompression: true, ResponseHeaderTimeout: time.Minute}
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(to) },
		Transport: transport,
		// Streams go on as they come.
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if rec, ok := resp.Request.Context().Value(e2eTapKey{}).(*e2eTapped); ok {
				rec.Status, rec.RespHeader = resp.StatusCode, resp.Header.Clone()
			}
			return nil
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tp := &e2eTap{URL: "http://" + ln.Addr().String()}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &e2eTapped{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone()}
		tp.mu.Lock()
		tp.open++
		tp.mu.Unlock()
		tw := &e2eTapWriter{ResponseWriter: w}
		rp.ServeHTTP(tw, r.WithContext(context.WithValue(r.Context(), e2eTapKey{}, rec)))
		if rec.Status == 0 { // the tap's own 502: rotor could not be reached
			rec.Status, rec.RespHeader = tw.status, w.Header().Clone()
		}
		rec.RespBody = tw.body.Bytes()
		tp.mu.Lock()
		tp.log = append(tp.log, *rec)
		tp.open--
		tp.mu.Unlock()
	})}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		transport.CloseIdleConnections()
	})
	return tp
}

// ---------------------------------------------------------------------------
// Helpers.

// e2eSignedInAuth writes a Codex auth.json for id into dir, with unsigned
// tokens shaped as the sign-in server issues them, and returns its tokens.
func e2eSignedInAuth(t *testing.T, dir string, id oauthtest.Identity) accounts.CodexTokens {
	t.Helper()
	claims := map[string]any{"chatgpt_account_id": id.AccountID, "chatgpt_plan_type": id.PlanType, "chatgpt_user_id": "user-" + id.Email}
	now := time.Now()
	tok := accounts.CodexTokens{
		IDToken: oauthtest.FakeJWT(map[string]any{"iss": "https://auth.openai.com", "aud": []string{oauthtest.ClientID},
			"sub": "auth0|" + id.Email, "email": id.Email, "email_verified": true, "https://api.openai.com/auth": claims,
			"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}),
		AccessToken: oauthtest.FakeJWT(map[string]any{"iss": "https://auth.openai.com", "aud": []string{"https://api.openai.com/v1"},
			"sub": "auth0|" + id.Email, "https://api.openai.com/auth": claims,
			"https://api.openai.com/profile": map[string]any{"email": id.Email, "email_verified": true},
			"iat":                            now.Unix(), "exp": now.Add(10 * 24 * time.Hour).Unix()}),
		RefreshToken: "rt_e2e_signedin_" + id.AccountID,
		AccountID:    id.AccountID,
	}
	body, err := json.MarshalIndent(map[string]any{"OPENAI_API_KEY": nil, "last_refresh": now.UTC().Format(time.RFC3339),
		"tokens": map[string]any{"id_token": tok.IDToken, "access_token": tok.AccessToken, "refresh_token": tok.RefreshToken, "account_id": tok.AccountID}}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "auth.json"), body, 0o600); err != nil {
		t.Fatal(err)
	}
	return tok
}

// e2eSignedInModelCalls are the Responses requests the fake's ChatGPT
// backend received (POSTs, and response.create frames on its sockets).
func e2eSignedInModelCalls(up *upstreamtest.Server) []upstreamtest.Recorded {
	var out []upstreamtest.Recorded
	for _, r := range up.Requests() {
		if (r.Method == http.MethodPost || r.Method == "WS") && r.Path == "/backend-api/codex/responses" {
			out = append(out, r)
		}
	}
	return out
}

// e2eSignedInLogs are rotor's JSON log lines whose message is msg.
func e2eSignedInLogs(stderr, msg string) []gjson.Result {
	var out []gjson.Result
	for l := range strings.SplitSeq(stderr, "\n") {
		if j := gjson.Parse(l); strings.HasPrefix(l, "{") && j.Get("message").Str == msg {
			out = append(out, j)
		}
	}
	return out
}

// e2eSignedInRollouts are the session files Codex wrote under codexHome.
func e2eSignedInRollouts(t *testing.T, codexHome string) []string {
	t.Helper()
	var files []string
	root := filepath.Join(codexHome, "sessions")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasPrefix(d.Name(), "rollout-") && strings.HasSuffix(d.Name(), ".jsonl") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading Codex's sessions under %s: %v", root, err)
	}
	return files
}

// ---------------------------------------------------------------------------
// The test.

// Codex signed in with ChatGPT, as an account of the pool, linked to a
// running rotor serve by `rotor codex link`, run as a user runs it: plain
// `codex exec`, its session kept. The turn is a tool call and its answer;
// Codex's own account reaches its usage limit after the tool call, so the
// answer comes from the pool's other account. Then `codex app-server`,
// asked for the account's rate limits as the TUI's /status asks, gets the
// pool's from rotor's wham/usage.
// newE2ESignedInWorld is a world for Codex signed in with ChatGPT: the
// clients, the path of the codex binary, and a fake sign-in server that
// both rotor and Codex refresh against.
func newE2ESignedInWorld(t *testing.T) (w *e2eWorld, codex string, auth *oauthtest.Server) {
	cache := e2eClients(t)
	w = newE2EWorld(t)
	w.useClients(cache)
	auth = oauthtest.New()
	if err := auth.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { auth.Close() })
	w.setenv("ROTOR_AUTH_BASE_URL", auth.URL())
	// Codex refreshes its own login; should it, it stays on loopback.
	w.setenv("CODEX_REFRESH_TOKEN_URL_OVERRIDE", auth.URL()+"/oauth/token")
	return w, filepath.Join(cache, "node_modules", ".bin", "codex"), auth
}

// e2eTwoSignedIn signs Codex in with its own ChatGPT login and imports
// it (account 1), then imports another ChatGPT login from a Codex home of
// its own (account 2); both refresh against auth. It returns Codex's home
// (CODEX_HOME again) and the two logins.
func e2eTwoSignedIn(t *testing.T, w *e2eWorld, auth *oauthtest.Server) (codexHome string, own, other accounts.CodexTokens) {
	t.Helper()
	codexHome, file := w.codexLogin(t)
	own, err := accounts.ReadCodexAuth(file)
	if err != nil {
		t.Fatal(err)
	}
	auth.AddRefreshToken(own.RefreshToken)
	if r := w.rotor(30*time.Second, "", "import", "codex"); r.code != 0 {
		t.Fatalf("rotor import codex: %v", r)
	}
	otherHome := filepath.Join(filepath.Dir(codexHome), "other-codex-home")
	other = e2eSignedInAuth(t, otherHome, e2eSignedInOther)
	auth.AddRefreshToken(other.RefreshToken)
	w.setenv("CODEX_HOME", otherHome)
	if r := w.rotor(30*time.Second, "", "import", "codex"); r.code != 0 {
		t.Fatalf("rotor import codex (the second login): %v", r)
	}
	w.setenv("CODEX_HOME", codexHome)
	return codexHome, own, other
}

func TestE2ECodexSignedIn(t *testing.T) {
	w, codex, auth := newE2ESignedInWorld(t)

	codexHome, own, other := e2eTwoSignedIn(t, w, auth)
	accountOf := map[string]string{own.AccessToken: own.AccountID, other.AccessToken: other.AccountID}
	nameOf := map[string]string{own.AccessToken: "Codex's own account", other.AccessToken: "the other account"}

	// Each account: a tool call, then the answer after the tool's result;
	// after one Responses request, its usage limit (for 2 hours).
	for tok, used := range map[string]int{own.AccessToken: e2eSignedInOwnUsed, other.AccessToken: e2eSignedInOtherUsed} {
		w.up.Set(tok, upstreamtest.Behavior{ToolRoundTrip: true, LimitAfter: 1, ResetIn: e2eUsageReset, Headers: map[string]string{
			"x-codex-primary-used-percent":        strconv.Itoa(used),
			"x-codex-primary-window-minutes":      "300",
			"x-codex-primary-reset-after-seconds": "3600",
			"x-codex-plan-type":                   map[bool]string{true: "plus", false: "pro"}[tok == own.AccessToken],
		}})
	}

	// rotor learns both accounts' quota first: a serve reads them from the
	// backend as it starts (docs/selection.md), and the runtime state is shared
	// through ROTOR_HOME. Above 95% used, the pool keeps the other account
	// for when Codex's own cannot serve.
	_, _, stopPin := w.serveWith("--account", "2")
	for deadline := time.Now().Add(10 * time.Second); e2eUsageReads(w.up) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the serve did not read both accounts' usage within 10s: %d reads", e2eUsageReads(w.up))
		}
	}
	stopPin()
	primed := len(w.up.Requests())
	rs := w.rotor(30*time.Second, "", "rotation", "status", "--json")
	if st := gjson.Parse(rs.stdout); rs.code != 0 || st.Get("accounts.1.quota.primary.used_percent").Int() != e2eSignedInOtherUsed || st.Get("next.index").Int() != 1 {
		t.Fatalf("after priming, rotor does not keep the other account for later (want its primary window %d%% used, next account 1): %v", e2eSignedInOtherUsed, rs)
	}

	// The serve Codex uses, and the link.
	serve, in, stopServe := w.serveWith("--log-level", "debug")
	tap := newE2ETap(t, strings.TrimSuffix(in.URL, "/v1"))
	r := w.rotor(30*time.Second, "", "codex", "link", "--url", tap.URL)
	if r.code != 0 {
		t.Fatalf("rotor codex link: %v", r)
	}
	cfg, err := os.ReadFile(filepath.Join(codexHome, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`openai_base_url = "` + tap.URL + `/v1"`, `chatgpt_base_url = "` + tap.URL + `/backend-api/"`} {
		if !slices.Contains(strings.Split(string(cfg), "\n"), want) {
			t.Fatalf("after rotor codex link, config.toml lacks the line %s:\n%s", want, cfg)
		}
	}
	if strings.Contains(string(cfg), "model_provider") {
		t.Fatalf("rotor codex link chose a model provider:\n%s", cfg)
	}
	if strings.Contains(r.stderr, "not signed in") || strings.Contains(r.stderr, "not in rotor's pool") {
		t.Errorf("rotor codex link warns about a login that is in the pool: %v", r)
	}

	// 1. codex exec, as a user runs it: no rotor exec, no --ephemeral.
	var flags []string
	for _, f := range e2eCodexFlags {
		if f != "--ephemeral" {
			flags = append(flags, f)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), e2eCodexTimeout)
	defer cancel()
	cmd := w.command(ctx, codex, append(flags, e2eSignedInPrompt)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("codex exec did not finish within %v\nstdout:\n%s\nstderr:\n%s", e2eCodexTimeout, stdout.String(), stderr.String())
	}
	if err != nil || !strings.Contains(stdout.String(), e2eHello) {
		t.Fatalf("codex exec, signed in and linked to rotor: %v\nstdout:\n%s\nstderr:\n%s\nrotor serve:\n%s", err, stdout.String(), stderr.String(), serve.stderr.String())
	}
	if !strings.Contains(stderr.String(), "provider: openai") {
		t.Errorf("codex exec did not run on its built-in provider:\n%s", stderr.String())
	}
	tap.settle(t, 10*time.Second)
	execCalls := tap.exchanges()

	// Its session is recorded under the built-in provider.
	rollouts := e2eSignedInRollouts(t, codexHome)
	if len(rollouts) != 1 {
		t.Fatalf("codex exec wrote %d session files under %s/sessions, want 1: %v", len(rollouts), codexHome, rollouts)
	}
	rf, err := os.Open(rollouts[0])
	if err != nil {
		t.Fatal(err)
	}
	metas := 0
	sc := bufio.NewScanner(rf)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		j := gjson.ParseBytes(sc.Bytes())
		if p := j.Get("payload.model_provider"); p.Exists() {
			metas++
			t.Logf("the session's %s records model_provider %q", j.Get("type").Str, p.Str)
			if p.Str != "openai" {
				t.Errorf("the session's %s records model_provider %q, want the built-in \"openai\"", j.Get("type").Str, p.Str)
			}
		}
	}
	rf.Close()
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if metas == 0 {
		t.Errorf("the session file %s records no model_provider", rollouts[0])
	}

	// The turn, upstream: a tool call on Codex's own account, its usage
	// limit there, and the answer from the other account, which received
	// the whole conversation and never Codex's credentials.
	calls := e2eSignedInModelCalls(w.up)
	var seq []string
	for _, c := range calls {
		seq = append(seq, nameOf[c.Token])
	}
	want := []string{nameOf[own.AccessToken], nameOf[own.AccessToken], nameOf[other.AccessToken]}
	if !slices.Equal(seq, want) {
		t.Fatalf("the turn's model requests reached the upstream as %q, want %q (tool call, its usage limit, the answer elsewhere)\nrotor serve:\n%s", seq, want, serve.stderr.String())
	}
	last := gjson.ParseBytes(calls[2].Body)
	var types []string
	for _, it := range last.Get("input").Array() {
		types = append(types, it.Get("type").Str)
	}
	if !slices.Contains(types, "function_call") || !slices.Contains(types, "function_call_output") {
		t.Errorf("the request moved to the other account lacks the conversation: input types %v", types)
	}
	for _, c := range w.up.Requests() {
		acct, ok := accountOf[c.Token]
		if !ok {
			t.Errorf("%s %s reached the upstream with a bearer that is no account's", c.Method, c.Path)
			continue
		}
		if got := c.Header.Get("chatgpt-account-id"); got != acct {
			t.Errorf("%s %s reached the upstream as %s with chatgpt-account-id %q, want %q", c.Method, c.Path, nameOf[c.Token], got, acct)
		}
		if c.Token == other.AccessToken {
			for k, vs := range c.Header {
				for _, v := range vs {
					if strings.Contains(v, own.AccessToken) || strings.Contains(v, own.AccountID) {
						t.Errorf("%s %s went to the other account carrying Codex's own credentials in %s", c.Method, c.Path, k)
					}
				}
			}
			if bytes.Contains(c.Body, []byte(own.AccessToken)) {
				t.Errorf("%s %s went to the other account with Codex's token in its body", c.Method, c.Path)
			}
		}
	}

	// The turn in rotor's log: the tool call on account 1, the failover,
	// the answer on account 2, over Codex's WebSocket.
	var served []gjson.Result
	for _, l := range e2eSignedInLogs(serve.stderr.String(), "request") {
		if l.Get("model").Str != "" {
			served = append(served, l)
		}
	}
	if len(served) != 2 || served[0].Get("account").Int() != 1 || served[0].Get("status").Int() != 200 ||
		served[1].Get("account").Int() != 2 || served[1].Get("status").Int() != 200 || served[1].Get("attempts").Int() != 2 {
		t.Errorf("rotor logged the turn's model requests as %v; want account 1 (200), then account 2 (200, 2 attempts)", served)
	}
	for _, l := range served {
		if l.Get("transport").Str != "websocket" {
			t.Errorf("a model request did not come over Codex's WebSocket: %s", l.Raw)
		}
	}
	fo := e2eSignedInLogs(serve.stderr.String(), "failover: trying another account")
	if len(fo) != 1 || fo[0].Get("account").Int() != 1 || fo[0].Get("outcome").Str != "usage-limit" {
		t.Errorf("rotor logged failovers %v; want one, from account 1 at its usage limit", fo)
	}

	// What Codex sent rotor: its own bearer and account on every call that
	// carries a credential, and none of them refused. (Its apps MCP client,
	// POST /backend-api/ps/mcp, sends no credential at all: rotor refuses
	// it as any caller without one, and Codex goes on without its apps.)
	for _, x := range execCalls {
		t.Logf("codex exec -> rotor: %s %s?%s: %d (bearer: %s, ChatGPT-Account-ID %q)", x.Method, x.Path, x.RawQuery, x.Status,
			map[bool]string{true: "Codex's own", false: "none"}[x.bearer() != ""], x.Header.Get("Chatgpt-Account-Id"))
		if x.bearer() == "" {
			continue
		}
		if x.bearer() != own.AccessToken || x.Header.Get("Chatgpt-Account-Id") != own.AccountID {
			t.Errorf("codex exec sent %s %s with another credential than its own login's", x.Method, x.Path)
		}
		if x.Status == http.StatusUnauthorized || x.Status == http.StatusForbidden {
			t.Errorf("rotor refused Codex's own token on %s %s: %d %s", x.Method, x.Path, x.Status, x.RespBody)
		}
	}
	var models, sockets int
	for _, x := range execCalls {
		switch {
		case x.Path == "/v1/models":
			models++
			if !strings.Contains(x.RawQuery, "client_version=") || x.Status != 200 || !gjson.GetBytes(x.RespBody, "models.0.slug").Exists() || x.RespHeader.Get("ETag") == "" {
				t.Errorf("Codex's models list: GET /v1/models?%s answered %d, ETag %q: %.200s; want the Codex catalog with its ETag",
					x.RawQuery, x.Status, x.RespHeader.Get("ETag"), x.RespBody)
			}
		case x.Path == "/v1/responses" && x.Status == http.StatusSwitchingProtocols:
			sockets++
			limits := map[string]string{}
			for k := range x.RespHeader {
				if strings.HasPrefix(strings.ToLower(k), "x-codex-") {
					limits[k] = x.RespHeader.Get(k)
				}
			}
			t.Logf("rotor opened Codex's WebSocket with x-codex-* headers %v", limits)
		}
	}
	if models == 0 || sockets == 0 {
		t.Errorf("codex exec asked rotor for the models list %d times and opened %d WebSockets; want both", models, sockets)
	}

	// 2. /status. codex exec (0.169.0) never asks for the usage limits, so
	// ask as the TUI's /status does: app-server's account/rateLimits/read,
	// which reads {chatgpt_base_url}/wham/usage (and, apart, the reset
	// credits' details at wham/rate-limit-reset-credits, which pass through).
	asked := 0
	for _, x := range execCalls {
		if x.Path == "/backend-api/wham/usage" {
			asked++
		}
	}
	t.Logf("codex exec asked GET /backend-api/wham/usage %d times", asked)
	as, rpc := e2eAppServer(t, w, codex)
	before := len(tap.exchanges())
	upstreamReads := e2eUsageReads(w.up)
	got := rpc(2, "account/rateLimits/read", "null")
	if code := as.wait(); code != 0 {
		t.Errorf("codex app-server exited %d\nstderr:\n%s", code, as.stderr.String())
	}
	tap.settle(t, 10*time.Second)
	t.Logf("account/rateLimits/read answered %s", got.Raw)
	rl := got.Get("result.rateLimits")
	if rl.Get("planType").Str != e2eSignedInOther.PlanType || rl.Get("primary.usedPercent").Int() != e2eSignedInOtherUsed || rl.Get("rateLimitReachedType").Type != gjson.Null {
		t.Errorf("Codex read the rate limits %s; want the pool's: the other account's (plan %s, %d%% used, no limit reached), Codex's own being spent",
			got.Raw, e2eSignedInOther.PlanType, e2eSignedInOtherUsed)
	}
	var usage []e2eTapped
	for _, x := range tap.exchanges()[before:] {
		t.Logf("codex app-server -> rotor: %s %s?%s: %d %.300s", x.Method, x.Path, x.RawQuery, x.Status, x.RespBody)
		if x.Path == "/backend-api/wham/usage" {
			usage = append(usage, x)
		}
		if x.bearer() != "" && (x.bearer() != own.AccessToken || x.Header.Get("Chatgpt-Account-Id") != own.AccountID) {
			t.Errorf("codex app-server sent %s %s with another credential than its own login's", x.Method, x.Path)
		}
	}
	if len(usage) == 0 {
		t.Fatal("account/rateLimits/read made Codex ask no GET /backend-api/wham/usage")
	}
	for _, u := range usage {
		if u.Method != http.MethodGet || u.bearer() != own.AccessToken || u.Header.Get("Chatgpt-Account-Id") != own.AccountID {
			t.Errorf("Codex asked %s wham/usage without its own token and account", u.Method)
		}
		body := gjson.ParseBytes(u.RespBody)
		if u.Status != 200 || body.Get("plan_type").Str != e2eSignedInOther.PlanType || !body.Get("rate_limit.allowed").Bool() ||
			body.Get("rate_limit.limit_reached").Bool() || body.Get("rate_limit.primary_window.used_percent").Int() != e2eSignedInOtherUsed {
			t.Errorf("rotor answered wham/usage %d %s; want the pool's: allowed, plan %s, %d%% used", u.Status, u.RespBody, e2eSignedInOther.PlanType, e2eSignedInOtherUsed)
		}
		if c := body.Get("rate_limit_reset_credits"); !c.IsObject() || c.Get("available_count").Type != gjson.Number {
			t.Errorf("rotor's wham/usage answer has no rate_limit_reset_credits {available_count} (docs/codex.md: \"answers docs/codex.md's shape from the pool, with rate_limit_reset_credits\"): %s", u.RespBody)
		}
	}
	// rotor's own reads of the accounts' usage (docs/selection.md) reach the
	// upstream; Codex's call does not add one: rotor answers it.
	if n := e2eUsageReads(w.up); n != upstreamReads {
		t.Errorf("Codex's wham/usage reached the upstream (%d reads there before it, %d after); rotor answers it from the pool", upstreamReads, n)
	}

	// Every other backend call went to the account whose token it carried,
	// unchanged, and rotor logged it by path and status alone.
	stopServe()
	passed := e2eSignedInLogs(serve.stderr.String(), "backend call passed through")
	var upBackend []upstreamtest.Recorded
	for _, c := range w.up.Requests()[primed:] {
		if strings.HasPrefix(c.Path, "/backend-api/") && !strings.HasPrefix(c.Path, "/backend-api/codex/") {
			upBackend = append(upBackend, c)
		}
	}
	// Calls run side by side, so the log and the upstream are compared as
	// counts by path, not in order.
	loggedPaths, upPaths := map[string]int{}, map[string]int{}
	for _, l := range passed {
		loggedPaths[l.Get("path").Str]++
		if l.Get("account").Int() != 1 || !l.Get("status").Exists() {
			t.Errorf("rotor logged a backend call of Codex's own account as %s", l.Raw)
		}
		var keys []string
		l.ForEach(func(k, _ gjson.Result) bool { keys = append(keys, k.Str); return true })
		slices.Sort(keys)
		if !slices.Equal(keys, []string{"account", "complete", "level", "message", "path", "request_id", "status", "time"}) {
			t.Errorf("rotor logged more of a backend call than its path and status: %s", l.Raw)
		}
	}
	for _, c := range upBackend {
		upPaths[c.Path]++
		if c.Token != own.AccessToken {
			t.Errorf("the backend call %s %s went upstream as %s, not as Codex's own account", c.Method, c.Path, nameOf[c.Token])
		}
	}
	if len(passed) == 0 || !maps.Equal(loggedPaths, upPaths) {
		t.Errorf("rotor logged the backend calls passed through as %v, the upstream received %v", loggedPaths, upPaths)
	}
	t.Logf("backend calls passed through to Codex's own account: %v", upPaths)
	if n := auth.TokenCalls("refresh_token"); n != 0 {
		t.Logf("%d refreshes at the sign-in server during the run", n)
	}
}

// e2eAppServer starts `codex app-server` in w, as the TUI runs it,
// initialized; rpc sends one request and returns its answer (bounded).
func e2eAppServer(t *testing.T, w *e2eWorld, codex string) (as *e2eProc, rpc func(id int, method, params string) gjson.Result) {
	t.Helper()
	as = w.start(60*time.Second, codex, "app-server", "--disable", "plugins", "-c", "check_for_update_on_startup=false",
		"-c", "analytics.enabled=false", "-c", "feedback.enabled=false", "-c", `otel.exporter="none"`)
	rpc = func(id int, method, params string) gjson.Result {
		t.Helper()
		as.send(`{"method":"` + method + `","id":` + strconv.Itoa(id) + `,"params":` + params + `}` + "\n")
		for range 100 {
			if j := as.json(); j.Get("id").Int() == int64(id) && (j.Get("result").Exists() || j.Get("error").Exists()) {
				return j
			}
		}
		t.Fatalf("codex app-server gave no answer to %s", method)
		return gjson.Result{}
	}
	if j := rpc(1, "initialize", `{"clientInfo":{"name":"rotor_e2e","title":"rotor e2e","version":"0.0.0"}}`); !j.Get("result").Exists() {
		t.Fatalf("codex app-server initialize: %s", j.Raw)
	}
	as.send(`{"method":"initialized"}` + "\n")
	return as, rpc
}

// e2eUsageReads counts the usage reads that reached the upstream.
func e2eUsageReads(up *upstreamtest.Server) int {
	n := 0
	for _, c := range up.Requests() {
		if c.Path == "/backend-api/wham/usage" {
			n++
		}
	}
	return n
}
