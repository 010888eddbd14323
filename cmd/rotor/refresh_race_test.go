package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/oauth/oauthtest"
	"github.com/rotorproxy/rotor/accounts/secrets"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// docs/accounts.md: refresh tokens are single-use, so at most one refresh per account
// may run at a time across every rotor process on a ROTOR_HOME. This test
// runs two real `rotor serve` processes on one ROTOR_HOME whose only
// ChatGPT account has an access token the upstream refuses, sends requests
// to both at once, and checks that exactly one refresh reached the token
// endpoint while every request succeeded.

const raceClientKey = "race-test-client-key-0123456789abcdef0123" // 40+ characters

// raceBuildRotor builds the rotor binary into the test's temporary
// directory (the build cache makes this quick after the first time).
func raceBuildRotor(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rotor")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startFakes runs a fake upstream and a fake authorization server for the
// test's lifetime.
func startFakes(t *testing.T) (*upstreamtest.Server, *oauthtest.Server) {
	t.Helper()
	up := upstreamtest.New("../../testdata")
	if err := up.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	auth := oauthtest.New()
	if err := auth.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { auth.Close() })
	return up, auth
}

// raceBuffer collects a child's output for the failure message.
type raceBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *raceBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *raceBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// raceProc is one running `rotor serve`.
type raceProc struct {
	name    string
	cmd     *exec.Cmd
	url     string // http://127.0.0.1:P/v1
	stderr  *raceBuffer
	exited  chan struct{} // closed once the process was waited for
	exitErr error         // valid after exited is closed
}

// raceServe starts `rotor serve --port 0` and waits (bounded) for its
// "rotor proxy listening on <url>" line.
func raceServe(t *testing.T, bin string, env []string, name string) *raceProc {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--port", "0", "--log-format", "json")
	cmd.Env = env
	return startServeCmd(t, cmd, name)
}

// startServeCmd starts cmd, a `rotor serve --port 0` however wrapped, and
// waits (bounded) for its "rotor proxy listening on <url>" line.
func startServeCmd(t *testing.T, cmd *exec.Cmd, name string) *raceProc {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &raceProc{name: name, cmd: cmd, stderr: &raceBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "rotor proxy listening on "); ok {
				urls <- strings.TrimSpace(u)
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	go func() {
		p.exitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			cmd.Process.Kill()
			select {
			case <-p.exited:
			case <-time.After(5 * time.Second):
			}
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, p.stderr.String())
		}
	})
	select {
	case p.url = <-urls:
	case <-p.exited:
		t.Fatalf("%s exited before listening (%v): %s", name, p.exitErr, p.stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not print its URL within 20s: %s", name, p.stderr.String())
	}
	if !strings.HasPrefix(p.url, "http://127.0.0.1:") || !strings.HasSuffix(p.url, "/v1") {
		t.Fatalf("%s URL %q", name, p.url)
	}
	return p
}

// stop sends SIGTERM and waits, at most 15 s, for a clean exit.
func (p *raceProc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %s: %v", p.name, err)
	}
	select {
	case <-p.exited:
		if p.exitErr != nil {
			t.Errorf("%s exited with %v after SIGTERM: %s", p.name, p.exitErr, p.stderr.String())
		}
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
		t.Errorf("%s did not exit within 15s of SIGTERM", p.name)
	}
}

var raceHTTP = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableCompression: true}}

// raceRequest sends one streamed Responses call through p and returns the
// status and body.
func raceRequest(p *raceProc) (int, string, error) {
	req, err := http.NewRequest("POST", p.url+"/responses", strings.NewReader(`{"model":"gpt-5","stream":true,"store":false,"instructions":"","input":"hi"}`))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+raceClientKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-race-proc", p.name) // forwarded: the fake records which process sent what
	resp, err := raceHTTP.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// raceHelloStream reports whether body is the whole hello.sse stream.
func raceHelloStream(body string) bool {
	return strings.HasPrefix(body, "event: response.created\n") &&
		strings.Contains(body, "event: response.completed\n") &&
		strings.Contains(body, `"text":"Hello from the fake upstream."`) &&
		!strings.Contains(body, "response.failed")
}

func TestRefreshRaceAcrossProcesses(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs rotor processes")
	}
	bin := raceBuildRotor(t)

	// The fake upstream refuses the imported (old) access token with 401
	// and accepts any other, i.e. the refreshed one.
	up, auth := startFakes(t)

	authFile := codexFixture(t)
	var codex struct {
		Tokens struct {
			AccessToken  string `json:"access_token"`
			RefreshToken string `json:"refresh_token"`
		} `json:"tokens"`
	}
	raw, err := os.ReadFile(authFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &codex); err != nil || codex.Tokens.AccessToken == "" {
		t.Fatalf("fixture %s: %v", authFile, err)
	}
	oldAT := codex.Tokens.AccessToken
	auth.AddRefreshToken(codex.Tokens.RefreshToken)

	home := filepath.Join(t.TempDir(), "rotor-home")
	scratch := t.TempDir()
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + scratch,
		"XDG_CONFIG_HOME=" + filepath.Join(scratch, "config"),
		"CODEX_HOME=" + filepath.Join(scratch, "codex"),
		"ROTOR_HOME=" + home,
		"ROTOR_SECRETS=file",
		"ROTOR_AUTH_BASE_URL=" + auth.URL(),
		"ROTOR_CHATGPT_BASE_URL=" + up.ChatGPTBase(),
		"ROTOR_OPENAI_BASE_URL=" + up.OpenAIBase(),
		"ROTOR_CLIENT_KEY=" + raceClientKey,
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	imp := exec.CommandContext(ctx, bin, "import", "codex", "--file", authFile)
	imp.Env = env
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("rotor import codex: %v\n%s", err, out)
	}
	st, err := accounts.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := st.Load()
	if err != nil || len(pool.Accounts) != 1 {
		t.Fatalf("pool after import: %v %+v", err, pool)
	}
	id := pool.At(1).ID

	a := raceServe(t, bin, env, "A")
	b := raceServe(t, bin, env, "B")
	// The serves read the account's usage as they start (docs/selection.md), one
	// for both; only then does the upstream refuse the old token, so the
	// requests below, not that read, are what meets the 401.
	usageRead := func() bool {
		for _, r := range up.Requests() {
			if r.Token == oldAT && r.Path == "/backend-api/wham/usage" {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(10 * time.Second); !usageRead(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no serve read the account's usage within 10s of starting")
		}
	}
	up.Set(oldAT, upstreamtest.Behavior{Status: 401}) // token_expired, not invalidated

	// Hold every refresh until all requests of both processes have met the
	// 401: then each of them goes through the refresh path at the same time.
	release := auth.HoldRefreshes()
	defer release()

	const perProc = 4
	type answer struct {
		proc   string
		status int
		body   string
		err    error
	}
	answers := make(chan answer, 2*perProc)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range []*raceProc{a, b} {
		for range perProc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				st, body, err := raceRequest(p)
				answers <- answer{p.name, st, body, err}
			}()
		}
	}
	close(gate)

	oldSeen := func() map[string]int {
		n := map[string]int{}
		for _, r := range up.Requests() {
			if r.Token == oldAT {
				n[r.Header.Get("x-race-proc")]++
			}
		}
		return n
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := oldSeen()
		if n["A"] == perProc && n["B"] == perProc && auth.TokenCalls("refresh_token") >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not every request met the 401 in time: old-token requests %v, refresh calls %d", n, auth.TokenCalls("refresh_token"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Give a second (wrong) refresh the chance to arrive, then let the
	// held one answer.
	time.Sleep(300 * time.Millisecond)
	release()

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("client requests did not finish within 60s")
	}
	close(answers)
	for ans := range answers {
		switch {
		case ans.err != nil:
			t.Errorf("request through %s: %v", ans.proc, ans.err)
		case ans.status != 200 || !raceHelloStream(ans.body):
			t.Errorf("request through %s: status %d body %.300s", ans.proc, ans.status, ans.body)
		}
	}

	if n := auth.TokenCalls("refresh_token"); n != 1 {
		t.Fatalf("%d refresh calls reached the token endpoint, want exactly 1", n)
	}
	issued := auth.Issued()
	if len(issued) != 1 {
		t.Fatalf("%d token sets issued", len(issued))
	}
	newAT := issued[0].AccessToken
	if n := up.Count(newAT); n != 2*perProc {
		t.Errorf("the upstream saw the new access token %d times, want %d (every request retried once)", n, 2*perProc)
	}
	if n := oldSeen(); n["A"] != perProc || n["B"] != perProc {
		t.Errorf("old-token requests %v, want %d per process", n, perProc)
	}

	sec, err := secrets.Open(home, "file", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sec.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if s.AccessToken != newAT || s.RefreshToken != issued[0].RefreshToken || s.IDToken != issued[0].IDToken {
		t.Error("secrets.json does not hold the refreshed tokens")
	}
	if s.RefreshToken == codex.Tokens.RefreshToken || s.ExpiresAt.Before(time.Now().Add(time.Hour)) {
		t.Errorf("stored refresh token not rotated or expiry %s wrong", s.ExpiresAt)
	}

	a.stop(t)
	b.stop(t)

	// A fresh process starts from what the race left behind: it must use
	// the new access token straight away, without refreshing.
	before := up.Count(oldAT)
	c := raceServe(t, bin, env, "C")
	st3, body, err := raceRequest(c)
	if err != nil || st3 != 200 || !raceHelloStream(body) {
		t.Errorf("request through C: %d %v %.300s", st3, err, body)
	}
	if up.Count(oldAT) != before {
		t.Error("the fresh process sent the old access token")
	}
	if n := up.Count(newAT); n != 2*perProc+1 {
		t.Errorf("the upstream saw the new access token %d times, want %d", n, 2*perProc+1)
	}
	if n := auth.TokenCalls(""); n != 1 {
		t.Errorf("%d token calls, want still 1", n)
	}
	c.stop(t)

	// The account came out of the race healthy and unflagged.
	lctx, lcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer lcancel()
	list := exec.CommandContext(lctx, bin, "list", "--json")
	list.Env = env
	out, err := list.Output()
	if err != nil {
		t.Fatalf("rotor list --json: %v", err)
	}
	var ls struct {
		Accounts []struct {
			State         string  `json:"state"`
			FlaggedReason *string `json:"flagged_reason"`
			Enabled       bool    `json:"enabled"`
		} `json:"accounts"`
	}
	if err := json.Unmarshal(out, &ls); err != nil || len(ls.Accounts) != 1 {
		t.Fatalf("rotor list --json: %v %s", err, out)
	}
	if acc := ls.Accounts[0]; acc.State != "available" || acc.FlaggedReason != nil || !acc.Enabled {
		t.Errorf("account after the race: %s", out)
	}
	if _, err := os.Stat(filepath.Join(home, "proxy.json")); !os.IsNotExist(err) {
		t.Errorf("proxy.json left behind after every proxy stopped (%v)", err)
	}
}
