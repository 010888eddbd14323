package main

// End-to-end tests: real clients, unchanged, through the real rotor binary.
//
// These tests are part of `go test ./...`, so `make test` and CI run them.
// They build rotor (with -race when the tests are), start the fake upstream
// (proxy/upstreamtest) in this process, give every run its own ROTOR_HOME,
// HOME and CODEX_HOME, and drive:
//
//   - Codex CLI (`codex exec`) through `rotor exec`: a normal turn, and a pool
//     whose every account is at its usage limit;
//   - the `openai` Node SDK (testdata/e2e/sdk.mjs) through `rotor exec` and
//     through `rotor serve` + `rotor env`;
//   - `rotor exec` itself with plain `sh` children (no npm needed).
//
// The clients come from the npm registry, pinned by testdata/e2e/package.json
// and its lockfile, and are installed once per run with `npm ci` into
// .cache/e2e at the repo root (gitignored), reused while the lockfile, Node
// version and platform match. When the registry cannot be reached the client
// tests skip and say why (with npm's own error); any other install failure
// fails them. Apart from that install, nothing leaves loopback: Codex is run
// with the flags in e2eCodexFlags, which turn off its update check,
// analytics, feedback, telemetry export and plugin sync.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

const (
	// e2eHello is the text of testdata/sse/hello.sse.
	e2eHello = "Hello from the fake upstream."

	e2eBuildTimeout = 5 * time.Minute
	e2ePingTimeout  = 30 * time.Second
	e2eNpmTimeout   = 4 * time.Minute
	// e2eCodexTimeout bounds one Codex run, retries included.
	e2eCodexTimeout = 90 * time.Second
	// e2eNodeTimeout bounds one run of sdk.mjs.
	e2eNodeTimeout = 30 * time.Second
	// e2eStepTimeout bounds the wait for one line of a client's output.
	e2eStepTimeout = 20 * time.Second
	// e2eUsageReset is how far in the future the fake's usage limits reset.
	e2eUsageReset = 2 * time.Hour
)

// e2eCodexFlags make `codex exec` run one turn non-interactively, against
// nothing but the provider rotor exec configures:
//
//	--skip-git-repo-check   the work dir is a fresh temp dir, not a git repo
//	--ephemeral             no session files
//	--dangerously-bypass-approvals-and-sandbox
//	                        no approval prompts and no bubblewrap/landlock
//	                        setup (the fake never asks to run a command)
//	--color never           plain text to assert on
//	--disable plugins       no curated-plugin sync (it resolves github.com)
//	check_for_update_on_startup=false, analytics/feedback off, otel none
//	                        no update check, no analytics, no telemetry export
//
// Every key was checked with --strict-config against config.toml in the
// pinned Codex version.
var e2eCodexFlags = []string{
	"exec",
	"--skip-git-repo-check",
	"--ephemeral",
	"--dangerously-bypass-approvals-and-sandbox",
	"--color", "never",
	"--disable", "plugins",
	"-c", "check_for_update_on_startup=false",
	"-c", "analytics.enabled=false",
	"-c", "feedback.enabled=false",
	"-c", `otel.exporter="none"`,
}

// ---------------------------------------------------------------------------
// Shared setup: repo root, the rotor binary, the npm clients.

var e2eShared struct {
	rootOnce sync.Once
	root     string
	rootErr  error

	buildOnce sync.Once
	bin       string
	buildErr  error

	npmOnce sync.Once
	cache   string // .cache/e2e: node_modules and sdk.mjs
	npmSkip string // set when the registry cannot be reached
	npmErr  error

	ran, skipped atomic.Int32 // e2e tests past e2eClients, and skipped there
}

// e2eReport says whether the real-client tests ran, for "make test" to
// print at the end (the file named by ROTOR_E2E_REPORT): a skip deep in
// go test's output is easy to miss.
func e2eReport() string {
	s := &e2eShared
	ran, skipped := s.ran.Load(), s.skipped.Load()
	switch {
	case skipped > 0:
		return fmt.Sprintf("end-to-end client tests: %d SKIPPED: %s\n", skipped, s.npmSkip)
	case s.npmErr != nil:
		return fmt.Sprintf("end-to-end client tests: FAILED to install the clients: %v\n", s.npmErr)
	case ran > 0:
		return fmt.Sprintf("end-to-end client tests: %d ran against the real Codex CLI and npm clients\n", ran)
	}
	return "end-to-end client tests: not run (filtered out by -run or -short)\n"
}

// e2eRoot is the module root (where go.mod is).
func e2eRoot(t *testing.T) string {
	t.Helper()
	s := &e2eShared
	s.rootOnce.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			s.rootErr = err
			return
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				s.root = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				s.rootErr = errors.New("no go.mod above the test's directory")
				return
			}
			dir = parent
		}
	})
	if s.rootErr != nil {
		t.Fatal(s.rootErr)
	}
	return s.root
}

// e2eRotor builds the rotor binary once per test run, into .cache/e2e/bin
// (gitignored, overwritten each run), with -race when this test binary has
// it, so the real processes are checked for races too.
func e2eRotor(t *testing.T) string {
	t.Helper()
	root := e2eRoot(t)
	s := &e2eShared
	s.buildOnce.Do(func() {
		dir := filepath.Join(root, ".cache", "e2e", "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			s.buildErr = err
			return
		}
		bin := filepath.Join(dir, "rotor")
		args := []string{"build"}
		if e2eRaceEnabled() {
			args = append(args, "-race")
		}
		args = append(args, "-o", bin, "./cmd/rotor")
		ctx, cancel := context.WithTimeout(context.Background(), e2eBuildTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, e2eGoTool(), args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			s.buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		s.bin = bin
	})
	if s.buildErr != nil {
		t.Fatal(s.buildErr)
	}
	return s.bin
}

func e2eRaceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}

func e2eGoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// e2eClients installs the pinned clients once per test run and returns
// .cache/e2e, which holds node_modules and a copy of sdk.mjs. It skips the
// test, quoting npm, when the registry cannot be reached.
func e2eClients(t *testing.T) string {
	t.Helper()
	root := e2eRoot(t)
	s := &e2eShared
	s.npmOnce.Do(func() {
		s.cache, s.npmSkip, s.npmErr = e2eInstall(root)
	})
	if s.npmSkip != "" {
		s.skipped.Add(1)
		t.Skip("SKIP real-client e2e test: the npm registry cannot be reached, so Codex CLI and the openai SDK could not be installed: " + s.npmSkip)
	}
	if s.npmErr != nil {
		t.Fatal(s.npmErr)
	}
	s.ran.Add(1)
	return s.cache
}

// e2eNetworkError matches npm's errors for a registry it cannot reach.
var e2eNetworkError = regexp.MustCompile(`(?i)\b(ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ESOCKETTIMEDOUT|ENETUNREACH|EHOSTUNREACH|ENETDOWN|EPROTO|ERR_SOCKET_TIMEOUT|UNABLE_TO_GET_ISSUER_CERT_LOCALLY|SELF_SIGNED_CERT_IN_CHAIN|npm error network)\b|request to \S+ failed`)

// e2eInstall runs `npm ci` into root/.cache/e2e unless a matching install
// is there already.
func e2eInstall(root string) (cache, skip string, err error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return "", "", errors.New("the real-client e2e tests need node and npm on PATH (Node.js 20 or newer): " + err.Error())
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", "", errors.New("the real-client e2e tests need node and npm on PATH (Node.js 20 or newer): " + err.Error())
	}
	src := filepath.Join(root, "testdata", "e2e")
	cache = filepath.Join(root, ".cache", "e2e")
	pkg, err := os.ReadFile(filepath.Join(src, "package.json"))
	if err != nil {
		return "", "", err
	}
	lock, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	if err != nil {
		return "", "", err
	}
	nodeVersion, err := exec.Command(node, "--version").Output()
	if err != nil {
		return "", "", fmt.Errorf("node --version: %v", err)
	}
	sum := sha256.New()
	for _, b := range [][]byte{pkg, lock, nodeVersion, []byte(runtime.GOOS + "/" + runtime.GOARCH)} {
		sum.Write(b)
		sum.Write([]byte{0})
	}
	stamp := hex.EncodeToString(sum.Sum(nil))
	stampFile := filepath.Join(cache, ".installed")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", "", err
	}
	// The drivers are copied next to node_modules so that their imports
	// resolve.
	for _, name := range e2eDrivers {
		script, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			return "", "", err
		}
		if err := os.WriteFile(filepath.Join(cache, name), script, 0o644); err != nil {
			return "", "", err
		}
	}
	if have, _ := os.ReadFile(stampFile); string(have) == stamp && e2eInstalled(cache) {
		return cache, "", nil
	}
	os.Remove(stampFile)
	for name, data := range map[string][]byte{"package.json": pkg, "package-lock.json": lock} {
		if err := os.WriteFile(filepath.Join(cache, name), data, 0o644); err != nil {
			return "", "", err
		}
	}

	// Can npm reach its registry at all? Only this decides a skip.
	ctx, cancel := context.WithTimeout(context.Background(), e2ePingTimeout)
	defer cancel()
	// No retries here: an unreachable registry should say so at once.
	ping := exec.CommandContext(ctx, npm, "ping", "--fetch-retries=0", "--fetch-timeout=20000", "--no-update-notifier")
	ping.Dir = cache
	if out, err := ping.CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Sprintf("npm ping did not answer within %v", e2ePingTimeout), nil
		}
		return "", fmt.Sprintf("npm ping: %v: %s", err, e2eLastLines(out, 8)), nil
	}

	ctx, cancel = context.WithTimeout(context.Background(), e2eNpmTimeout)
	defer cancel()
	ci := exec.CommandContext(ctx, npm, "ci", "--prefix", cache, "--no-audit", "--no-fund", "--no-update-notifier")
	ci.Dir = cache
	out, err := ci.CombinedOutput()
	switch {
	case ctx.Err() != nil:
		return "", "", fmt.Errorf("npm ci did not finish within %v:\n%s", e2eNpmTimeout, e2eLastLines(out, 20))
	case err != nil && e2eNetworkError.Match(out):
		return "", fmt.Sprintf("npm ci: %v: %s", err, e2eLastLines(out, 8)), nil
	case err != nil:
		return "", "", fmt.Errorf("npm ci --prefix %s: %v\n%s", cache, err, e2eLastLines(out, 30))
	}
	if !e2eInstalled(cache) {
		return "", "", fmt.Errorf("npm ci succeeded but %s lacks the codex binary or the openai package:\n%s", cache, e2eLastLines(out, 20))
	}
	if err := os.WriteFile(stampFile, []byte(stamp), 0o644); err != nil {
		return "", "", err
	}
	return cache, "", nil
}

// e2eDrivers are the client drivers in testdata/e2e.
var e2eDrivers = []string{"sdk.mjs", "chat.mjs"}

func e2eInstalled(cache string) bool {
	for _, p := range []string{"node_modules/.bin/codex", "node_modules/openai/package.json", "node_modules/ai/package.json",
		"node_modules/@ai-sdk/openai/package.json", "node_modules/@langchain/openai/package.json"} {
		if _, err := os.Stat(filepath.Join(cache, p)); err != nil {
			return false
		}
	}
	return true
}

func e2eLastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ---------------------------------------------------------------------------
// One isolated world per test: a fake upstream, a ROTOR_HOME, a HOME.

type e2eWorld struct {
	t    *testing.T
	bin  string
	up   *upstreamtest.Server
	home string // ROTOR_HOME
	work string // the clients' working directory
	env  []string
}

func newE2EWorld(t *testing.T) *e2eWorld {
	t.Helper()
	bin := e2eRotor(t)
	// Served over TLS, as the real backends are; rotor trusts it through
	// SSL_CERT_FILE, the clients never reach it but through rotor.
	up := upstreamtest.New(filepath.Join(e2eRoot(t), "testdata"))
	if err := up.StartTLS("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	dir := t.TempDir()
	ca := filepath.Join(dir, "upstream-ca.pem")
	if err := os.WriteFile(ca, up.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	w := &e2eWorld{t: t, bin: bin, up: up, home: filepath.Join(dir, "rotor-home"), work: filepath.Join(dir, "work")}
	for _, d := range []string{w.work, filepath.Join(dir, "user"), filepath.Join(dir, "codex-home")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// A fresh environment, not this process's: nothing of the developer's
	// (OPENAI_API_KEY, ~/.codex, proxies) may leak into the run.
	w.env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + filepath.Join(dir, "user"),
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "user", ".config"),
		"TMPDIR=" + os.TempDir(),
		"TZ=UTC",
		"LANG=C.UTF-8",
		"NO_COLOR=1",
		"ROTOR_HOME=" + w.home,
		"ROTOR_SECRETS=file",
		"ROTOR_OPENAI_BASE_URL=" + up.OpenAIBase(),
		"ROTOR_CHATGPT_BASE_URL=" + up.ChatGPTBase(),
		"ROTOR_AUTH_BASE_URL=" + up.URL(),
		"CODEX_HOME=" + filepath.Join(dir, "codex-home"),
		"SSL_CERT_FILE=" + ca,
	}
	return w
}

// codexLogin writes what `codex login` leaves, CODEX_HOME/auth.json
// (testdata/jwt/codex_auth.json, ada's login), and returns Codex's home
// and that file.
func (w *e2eWorld) codexLogin(t *testing.T) (codexHome, file string) {
	t.Helper()
	for _, kv := range w.env {
		if v, ok := strings.CutPrefix(kv, "CODEX_HOME="); ok {
			codexHome = v
		}
	}
	data, err := os.ReadFile(filepath.Join(e2eRoot(t), "testdata", "jwt", "codex_auth.json"))
	if err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(codexHome, "auth.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return codexHome, file
}

func (w *e2eWorld) setenv(key, value string) {
	for i, kv := range w.env {
		if strings.HasPrefix(kv, key+"=") {
			w.env[i] = key + "=" + value
			return
		}
	}
	w.env = append(w.env, key+"="+value)
}

// useClients puts the installed clients first on PATH.
func (w *e2eWorld) useClients(cache string) {
	w.setenv("PATH", filepath.Join(cache, "node_modules", ".bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// command prepares a process in its own process group, killed as a group
// when ctx ends, so a hung client never outlives the test.
func (w *e2eWorld) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = w.env
	cmd.Dir = w.work
	ownGroup(cmd)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

type e2eResult struct {
	args           []string
	stdout, stderr string
	code           int
	elapsed        time.Duration
}

func (r e2eResult) String() string {
	return fmt.Sprintf("rotor %s: exit %d after %v\n--- stdout:\n%s\n--- stderr:\n%s", strings.Join(r.args, " "), r.code, r.elapsed.Round(time.Millisecond), r.stdout, r.stderr)
}

// rotor runs the rotor binary to completion within timeout.
func (w *e2eWorld) rotor(timeout time.Duration, stdin string, args ...string) e2eResult {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := w.command(ctx, w.bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := e2eResult{args: args, stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		w.t.Fatalf("did not finish within %v: %v", timeout, r)
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		w.t.Fatal(err)
	}
	return r
}

func (w *e2eWorld) addKey(label, key string) {
	w.t.Helper()
	if r := w.rotor(30*time.Second, key, "add-key", "--label", label); r.code != 0 {
		w.t.Fatalf("add-key: %v", r)
	}
}

// e2eProc is a running process whose stdout is read line by line.
type e2eProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	cancel context.CancelFunc
	stdin  io.WriteCloser
	lines  chan string
	stderr *e2eBuffer
	done   chan struct{}
	err    error
}

// e2eBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type e2eBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *e2eBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *e2eBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// start runs name args within timeout, with a stdin pipe and stdout lines.
func (w *e2eWorld) start(timeout time.Duration, name string, args ...string) *e2eProc {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	cmd := w.command(ctx, name, args...)
	p := &e2eProc{t: w.t, cmd: cmd, cancel: cancel, lines: make(chan string, 256), stderr: &e2eBuffer{}, done: make(chan struct{})}
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		w.t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		cancel()
		w.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.err = cmd.Wait()
		close(p.done)
	}()
	w.t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

// line returns the next line of stdout; it fails the test when none comes
// within e2eStepTimeout.
func (p *e2eProc) line() string {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			<-p.done
			p.t.Fatalf("%s exited (%v) before printing the next line\nstderr:\n%s", p.cmd.Path, p.err, p.stderr.String())
		}
		return l
	case <-time.After(e2eStepTimeout):
		p.t.Fatalf("no output from %s within %v\nstderr:\n%s", p.cmd.Path, e2eStepTimeout, p.stderr.String())
	}
	return ""
}

// json returns the next stdout line that is a JSON object.
func (p *e2eProc) json() gjson.Result {
	p.t.Helper()
	for {
		l := p.line()
		if strings.HasPrefix(l, "{") && gjson.Valid(l) {
			return gjson.Parse(l)
		}
		p.t.Logf("stdout: %s", l)
	}
}

func (p *e2eProc) send(s string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, s); err != nil {
		p.t.Fatalf("writing to %s: %v", p.cmd.Path, err)
	}
}

// wait closes stdin and returns the exit status.
func (p *e2eProc) wait() int {
	p.t.Helper()
	p.stdin.Close()
	for range p.lines {
	}
	<-p.done
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee) && ee.ExitCode() >= 0:
		return ee.ExitCode()
	default:
		p.t.Fatalf("%s: %v\nstderr:\n%s", p.cmd.Path, p.err, p.stderr.String())
	}
	return -1
}

// serve starts `rotor serve --port 0` and returns its proxy.json once it is
// written. The server is stopped with SIGTERM at the end of the test (it
// must exit 0).
func (w *e2eWorld) serve() home.Info {
	w.t.Helper()
	_, in, _ := w.serveWith()
	return in
}

// serveWith starts `rotor serve --port 0` with args and returns it
// once its proxy.json is written, and a stop that sends SIGTERM and
// expects exit 0 within 40 s (also run at the end of the test).
func (w *e2eWorld) serveWith(args ...string) (p *e2eProc, in home.Info, stop func()) {
	w.t.Helper()
	p = w.start(5*time.Minute, w.bin, append([]string{"serve", "--port", "0", "--log-format", "json"}, args...)...)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
				if p.err != nil {
					w.t.Errorf("rotor serve after SIGTERM: %v\nstderr:\n%s", p.err, p.stderr.String())
				}
			case <-time.After(40 * time.Second):
				w.t.Errorf("rotor serve did not stop within 40s of SIGTERM")
			}
		})
	}
	w.t.Cleanup(stop)
	go func() {
		for range p.lines {
		}
	}()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if in, err := home.ReadInfo(w.home); err == nil && in.PID == p.cmd.Process.Pid {
			return p, in, stop
		}
		select {
		case <-p.done:
			w.t.Fatalf("rotor serve exited: %v\nstderr:\n%s", p.err, p.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	w.t.Fatalf("rotor serve wrote no proxy.json within 15s\nstderr:\n%s", p.stderr.String())
	return nil, home.Info{}, nil
}

// e2ePost sends one Responses request to a rotor proxy.
func e2ePost(t *testing.T, base, key, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", strings.TrimRight(base, "/")+"/responses", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST %s/responses: %v", base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer of %s/responses: %v", base, err)
	}
	return resp, data
}

// e2eDeltas joins the output_text deltas of an SSE body.
func e2eDeltas(body []byte) string {
	var sb strings.Builder
	for l := range strings.SplitSeq(string(body), "\n") {
		data, ok := strings.CutPrefix(l, "data: ")
		if ok && gjson.Get(data, "type").String() == "response.output_text.delta" {
			sb.WriteString(gjson.Get(data, "delta").String())
		}
	}
	return sb.String()
}

// e2eResponses are the recorded upstream Responses requests: POSTs to
// /v1/responses, and response.create frames on sockets to it.
func e2eResponses(up *upstreamtest.Server) []upstreamtest.Recorded {
	var out []upstreamtest.Recorded
	for _, r := range up.Requests() {
		if (r.Method == http.MethodPost || r.Method == "WS") && r.Path == "/v1/responses" {
			out = append(out, r)
		}
	}
	return out
}

// e2eResponsesWith counts the Responses requests that reached the
// upstream with token.
func e2eResponsesWith(up *upstreamtest.Server, token string) int {
	n := 0
	for _, r := range e2eResponses(up) {
		if r.Token == token {
			n++
		}
	}
	return n
}

// e2eUsageLimit is the fake's answer for an account at its ChatGPT usage limit.
var e2eUsageLimit = upstreamtest.Behavior{Status: http.StatusTooManyRequests, ErrorFixture: "usage_limit_429.json", ResetIn: e2eUsageReset}

// ---------------------------------------------------------------------------
// 1. Codex CLI, one turn, through rotor exec.

func TestE2ECodexExec(t *testing.T) {
	cache := e2eClients(t)
	w := newE2EWorld(t)
	w.useClients(cache)
	const key = "sk-e2e-codex-one"
	w.addKey("one", key)

	args := append([]string{"exec", "--", "codex"}, e2eCodexFlags...)
	r := w.rotor(e2eCodexTimeout, "", append(args, "say hello")...)
	if r.code != 0 {
		t.Fatalf("codex exec through rotor exec failed: %v", r)
	}
	if !strings.Contains(r.stdout, e2eHello) {
		t.Fatalf("codex printed no %q on stdout: %v", e2eHello, r)
	}
	t.Logf("codex exec answered in %v", r.elapsed.Round(time.Millisecond))

	// What Codex sent, as the upstream saw it.
	calls := e2eResponses(w.up)
	if len(calls) == 0 {
		t.Fatalf("no POST /v1/responses reached the upstream; it saw %d requests", len(w.up.Requests()))
	}
	for i, c := range calls {
		if c.Token != key {
			t.Errorf("call %d reached the upstream with bearer %q, want the account's key", i, c.Token)
		}
		body := gjson.ParseBytes(c.Body)
		if !body.Get("stream").Bool() {
			t.Errorf("call %d: Codex sent stream=%s, want true", i, body.Get("stream").Raw)
		}
		if !strings.Contains(string(c.Body), "say hello") {
			t.Errorf("call %d does not carry the prompt", i)
		}
		if body.Get("model").String() == "" {
			t.Errorf("call %d has no model", i)
		}
	}
	for _, rec := range w.up.Requests() {
		if rec.Path != "/v1/responses" && rec.Path != "/v1/models" {
			t.Errorf("Codex made rotor call %s %s upstream; want only /v1/responses, as a POST or a socket (and /v1/models)", rec.Method, rec.Path)
		}
	}
	if strings.Contains(r.stdout+r.stderr, key) {
		t.Errorf("the account's key appears in the output")
	}
}

// ---------------------------------------------------------------------------
// 2. Codex CLI with every account at its usage limit.

// e2eTryAgain is how Codex ends its usage-limit message (codex-rs
// core/src/error.rs, UsageLimitReachedError): "You've hit your usage limit.
// … Try again at 3:04 PM." (same day) or "… at Jan 2nd, 2006 3:04 PM.".
var e2eTryAgain = regexp.MustCompile(`You.ve hit your usage limit\..*?[Tt]ry again at ([^.\n]+)\.`)

// e2eParseTryAgain reads Codex's reset time, printed in local time (the
// tests run Codex with TZ=UTC) to the minute.
func e2eParseTryAgain(s string, now time.Time) (time.Time, error) {
	now = now.UTC()
	if t, err := time.Parse("3:04 PM", s); err == nil {
		return time.Date(now.Year(), now.Month(), now.Day(), t.Hour(), t.Minute(), 0, 0, time.UTC), nil
	}
	day := regexp.MustCompile(`^(\w+ \d+)(st|nd|rd|th)(, .*)$`).ReplaceAllString(s, "$1$3")
	return time.ParseInLocation("Jan 2, 2006 3:04 PM", day, time.UTC)
}

func TestE2ECodexUsageLimit(t *testing.T) {
	cache := e2eClients(t)
	w := newE2EWorld(t)
	w.useClients(cache)
	keys := []string{"sk-e2e-limited-one", "sk-e2e-limited-two"}
	for i, k := range keys {
		w.addKey(fmt.Sprintf("limited-%d", i+1), k)
		w.up.Set(k, e2eUsageLimit)
	}

	// Codex's own retries are set low so a client that did retry could not
	// stretch the run; a usage limit must not be retried at all.
	args := append([]string{"exec", "--log-format", "json", "--log-level", "info", "--", "codex"}, e2eCodexFlags...)
	args = append(args,
		"-c", "model_providers.rotor.request_max_retries=1",
		"-c", "model_providers.rotor.stream_max_retries=1",
		"say hello")
	before := time.Now()
	r := w.rotor(e2eCodexTimeout, "", args...)
	after := time.Now()
	if r.code == 0 {
		t.Fatalf("codex exec succeeded with every account at its usage limit: %v", r)
	}

	// What the user reads: the usage limit, and when to come back.
	m := e2eTryAgain.FindStringSubmatch(r.stdout + r.stderr)
	if m == nil {
		t.Fatalf("codex did not report the usage limit with a reset time (want %q): %v", e2eTryAgain, r)
	}
	shown, err := e2eParseTryAgain(m[1], after)
	if err != nil {
		t.Fatalf("codex said %q; cannot read its reset time %q: %v", m[0], m[1], err)
	}
	lo, hi := before.Add(e2eUsageReset).Truncate(time.Minute), after.Add(e2eUsageReset)
	if shown.Before(lo) || shown.After(hi) {
		t.Errorf("codex says try again at %v (%q); the accounts reset between %v and %v", shown, m[1], lo, hi)
	}
	t.Logf("codex told the user: %s (exit %d, %v)", m[0], r.code, r.elapsed.Round(time.Millisecond))

	// rotor tried each account once, then answered itself.
	for _, k := range keys {
		if n := e2eResponsesWith(w.up, k); n != 1 {
			t.Errorf("account %s was called upstream %d times, want 1", k, n)
		}
	}

	// What went over the wire to Codex: rotor's request log line.
	var logged []gjson.Result
	for l := range strings.SplitSeq(r.stderr, "\n") {
		// Over Codex's WebSocket a turn opens with a warm-up that rotor
		// answers itself (code warm_up); the requests are the rest.
		if j := gjson.Parse(l); strings.HasPrefix(l, "{") && j.Get("message").String() == "request" && j.Get("code").Str != "warm_up" {
			logged = append(logged, j)
		}
	}
	if len(logged) == 0 {
		t.Fatalf("rotor exec --log-level info logged no request line: %v", r)
	}
	for _, j := range logged {
		if j.Get("status").Int() != http.StatusTooManyRequests || j.Get("code").String() != "codex_runtime_rotation_pool_exhausted" {
			t.Errorf("rotor answered Codex %s; want 429 codex_runtime_rotation_pool_exhausted", j.Raw)
		}
	}

	// The same answer, in full, from a rotor serve on the same ROTOR_HOME:
	// it knows the limits from the shared state and does not call upstream.
	in := w.serve()
	resp, body := e2ePost(t, in.URL, in.ClientKey, `{"model":"gpt-5","input":"say hello","stream":true}`)
	e := gjson.GetBytes(body, "error")
	if resp.StatusCode != http.StatusTooManyRequests || e.Get("code").String() != "codex_runtime_rotation_pool_exhausted" || e.Get("type").String() != "usage_limit_reached" {
		t.Fatalf("rotor serve answered %d %s; want 429 codex_runtime_rotation_pool_exhausted with type usage_limit_reached", resp.StatusCode, body)
	}
	if got := e.Get("reason").String(); got != "rate-limit" {
		t.Errorf("reason %q, want rate-limit: %s", got, body)
	}
	resetsAt := time.Unix(e.Get("resets_at").Int(), 0)
	if resetsAt.Before(before.Add(e2eUsageReset).Truncate(time.Second)) || resetsAt.After(after.Add(e2eUsageReset+time.Second)) {
		t.Errorf("resets_at %v; the accounts reset between %v and %v: %s", resetsAt, before.Add(e2eUsageReset), after.Add(e2eUsageReset), body)
	}
	if !resetsAt.Truncate(time.Minute).Equal(shown) {
		t.Errorf("codex showed %v, rotor's resets_at is %v", shown, resetsAt.UTC())
	}
	if in := e.Get("resets_in_seconds").Int(); in <= 0 || in > int64(e2eUsageReset/time.Second)+1 {
		t.Errorf("resets_in_seconds %d: %s", in, body)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Errorf("no Retry-After header on the 429")
	}
	for _, k := range keys {
		if n := e2eResponsesWith(w.up, k); n != 1 {
			t.Errorf("after the direct request, account %s was called upstream %d times, want still 1", k, n)
		}
	}
}

// ---------------------------------------------------------------------------
// 3. The openai Node SDK.

func TestE2EOpenAISDK(t *testing.T) {
	cache := e2eClients(t)

	// sdk runs `rotor exec -- node sdk.mjs <case>`.
	sdk := func(w *e2eWorld, name string) *e2eProc {
		w.work = cache
		return w.start(e2eNodeTimeout, w.bin, "exec", "--", "node", "sdk.mjs", name)
	}
	done := func(t *testing.T, p *e2eProc, name string) gjson.Result {
		t.Helper()
		j := p.json()
		if j.Get("step").String() != "done" {
			t.Fatalf("%s: %s", name, j.Raw)
		}
		if code := p.wait(); code != 0 {
			t.Fatalf("%s: node exited %d\nstderr:\n%s", name, code, p.stderr.String())
		}
		return j
	}

	t.Run("stream", func(t *testing.T) {
		w := newE2EWorld(t)
		w.useClients(cache)
		w.addKey("one", "sk-e2e-sdk")
		w.up.SetDefault(upstreamtest.Behavior{EventDelay: 10 * time.Millisecond})
		j := done(t, sdk(w, "stream"), "stream")
		if got := j.Get("text").String(); got != e2eHello {
			t.Errorf("streamed text %q, want %q (%s)", got, e2eHello, j.Raw)
		}
		if j.Get("first").String() != "response.created" || j.Get("last").String() != "response.completed" {
			t.Errorf("stream events: %s", j.Raw)
		}
		if j.Get("usage.total_tokens").Int() == 0 {
			t.Errorf("no usage in response.completed: %s", j.Raw)
		}
		calls := e2eResponses(w.up)
		if len(calls) != 1 || !gjson.GetBytes(calls[0].Body, "stream").Bool() || calls[0].Token != "sk-e2e-sdk" {
			t.Errorf("upstream saw %d calls; want one streamed call with the account's key", len(calls))
		}
	})

	t.Run("nonstream", func(t *testing.T) {
		w := newE2EWorld(t)
		w.useClients(cache)
		w.addKey("one", "sk-e2e-sdk")
		j := done(t, sdk(w, "nonstream"), "nonstream")
		if got := j.Get("text").String(); got != e2eHello {
			t.Errorf("output_text %q, want %q (%s)", got, e2eHello, j.Raw)
		}
		if j.Get("status").String() != "completed" {
			t.Errorf("status: %s", j.Raw)
		}
	})

	t.Run("toolcall", func(t *testing.T) {
		w := newE2EWorld(t)
		w.useClients(cache)
		const key = "sk-e2e-sdk-tools"
		w.addKey("one", key)
		w.up.Set(key, upstreamtest.Behavior{Stream: "tool_call.sse"})
		p := sdk(w, "toolcall")
		j := p.json()
		if j.Get("step").String() != "function_call" || j.Get("name").String() != "get_weather" || j.Get("arguments.city").String() != "Paris" {
			t.Fatalf("want a get_weather(Paris) function_call: %s", j.Raw)
		}
		callID := j.Get("call_id").String()
		// The model's next turn, after the tool result, is text.
		w.up.Set(key, upstreamtest.Behavior{})
		p.send("go\n")
		j = done(t, p, "toolcall")
		if got := j.Get("text").String(); got != e2eHello {
			t.Errorf("answer after the tool result %q, want %q", got, e2eHello)
		}
		calls := e2eResponses(w.up)
		if len(calls) != 2 {
			t.Fatalf("upstream saw %d calls, want 2", len(calls))
		}
		if got := gjson.GetBytes(calls[0].Body, "tools.0.name").String(); got != "get_weather" {
			t.Errorf("first call's tools[0].name %q", got)
		}
		out := gjson.GetBytes(calls[1].Body, `input.#(type=="function_call_output")`)
		if !out.Exists() || out.Get("call_id").String() != callID || gjson.Get(out.Get("output").String(), "temperature_c").Int() != 18 {
			t.Errorf("second call carries no function_call_output for %s: %s", callID, calls[1].Body)
		}
	})

	t.Run("abort", func(t *testing.T) {
		w := newE2EWorld(t)
		w.useClients(cache)
		w.addKey("one", "sk-e2e-sdk-abort")
		// 14 events 300 ms apart: the stream is still open when aborted.
		w.up.SetDefault(upstreamtest.Behavior{EventDelay: 300 * time.Millisecond})
		p := sdk(w, "abort")
		j := p.json()
		if j.Get("step").String() != "first_event" {
			t.Fatalf("want the first event: %s", j.Raw)
		}
		j = p.json()
		// hello.sse has 14 events; the SDK may still hand out the few it had
		// read before abort(), then must stop, quietly or with
		// APIUserAbortError.
		if j.Get("step").String() != "aborted" || j.Get("completed").Bool() || j.Get("events").Int() >= 14 ||
			(j.Get("error").Type != gjson.Null && !j.Get("error.user_abort").Bool()) {
			t.Fatalf("want the stream to stop early after abort(): %s", j.Raw)
		}
		// node is still running: only the abort can have closed the stream.
		aborted := time.Now()
		for w.up.Open() > 0 {
			if time.Since(aborted) > 2*time.Second {
				t.Fatalf("the upstream request is still open 2s after the client aborted (Open()=%d)", w.up.Open())
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("upstream request ended %v after the abort", time.Since(aborted).Round(time.Millisecond))
		p.send("go\n")
		done(t, p, "abort")
		if n := len(e2eResponses(w.up)); n != 1 {
			t.Errorf("upstream saw %d calls, want 1", n)
		}
	})

	// The 429 goes through `rotor serve` and `rotor env`, as a user's
	// shell would: eval "$(rotor env)"; node app.mjs.
	t.Run("ratelimit", func(t *testing.T) {
		w := newE2EWorld(t)
		w.useClients(cache)
		w.addKey("one", "sk-e2e-sdk-limited")
		w.up.Set("sk-e2e-sdk-limited", e2eUsageLimit)
		in := w.serve()
		r := w.rotor(30*time.Second, "", "env")
		if r.code != 0 {
			t.Fatalf("rotor env: %v", r)
		}
		exports := map[string]string{}
		for l := range strings.SplitSeq(strings.TrimSpace(r.stdout), "\n") {
			kv, ok := strings.CutPrefix(l, "export ")
			k, v, ok2 := strings.Cut(kv, "=")
			if !ok || !ok2 {
				t.Fatalf("rotor env printed %q", l)
			}
			exports[k] = v
		}
		if exports["OPENAI_BASE_URL"] != in.URL || exports["OPENAI_API_KEY"] != in.ClientKey {
			t.Fatalf("rotor env: %q; proxy.json has %s", r.stdout, in.URL)
		}
		w.setenv("OPENAI_BASE_URL", exports["OPENAI_BASE_URL"])
		w.setenv("OPENAI_API_KEY", exports["OPENAI_API_KEY"])
		w.work = cache

		check := func(t *testing.T, j gjson.Result) {
			t.Helper()
			e := j.Get("error")
			if !e.Get("rate_limit_error").Bool() || e.Get("status").Int() != 429 {
				t.Fatalf("want OpenAI.RateLimitError (429): %s", j.Raw)
			}
			if e.Get("code").String() != "codex_runtime_rotation_pool_exhausted" || e.Get("error.code").String() != "codex_runtime_rotation_pool_exhausted" {
				t.Errorf("err.code / err.error.code: %s", j.Raw)
			}
			if e.Get("type").String() != "usage_limit_reached" || e.Get("error.resets_at").Int() == 0 {
				t.Errorf("want type usage_limit_reached with resets_at: %s", j.Raw)
			}
		}

		// A program that turned retries off sees the error at once.
		w.setenv("SDK_MAX_RETRIES", "0")
		p := w.start(e2eNodeTimeout, "node", "sdk.mjs", "ratelimit")
		check(t, p.json())
		if code := p.wait(); code != 0 {
			t.Fatalf("node exited %d\nstderr:\n%s", code, p.stderr.String())
		}

		// With the SDK's defaults (2 retries, which wait as long as
		// retry-after-ms says) the error must still surface promptly: the
		// accounts are out for hours, not seconds.
		t.Run("default_retries", func(t *testing.T) {
			w.setenv("SDK_MAX_RETRIES", "")
			const bound = 15 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			cmd := w.command(ctx, "node", "sdk.mjs", "ratelimit")
			out, _ := cmd.Output()
			if ctx.Err() != nil {
				resp, body := e2ePost(t, in.URL, in.ClientKey, `{"model":"gpt-5","input":"hi"}`)
				t.Fatalf("the openai SDK with its default maxRetries (2) did not surface the 429 within %v: "+
					"it obeys retry-after-ms (%q ms) and sleeps that long before retrying, since rotor's answer has no "+
					"\"x-should-retry: false\" (x-should-retry: %q). rotor answered %d %s",
					bound, resp.Header.Get("retry-after-ms"), resp.Header.Get("x-should-retry"), resp.StatusCode, body)
			}
			check(t, gjson.Parse(strings.TrimSpace(string(out))))
		})
	})
}

// ---------------------------------------------------------------------------
// 4. rotor exec itself, with plain sh children (no npm).

// e2ePrintEnv prints what rotor exec gave the child, then waits for a line
// on stdin, so the test can use the proxy while the child runs.
const e2ePrintEnv = `printf '%s\n%s\n' "$OPENAI_BASE_URL" "$OPENAI_API_KEY"; read line; exit 0`

var e2eLoopbackV1 = regexp.MustCompile(`^http://127\.0\.0\.1:(\d+)/v1$`)

func TestE2EExecBasics(t *testing.T) {
	t.Run("exit_status", func(t *testing.T) {
		w := newE2EWorld(t)
		w.addKey("one", "sk-e2e-exec")
		for _, want := range []int{0, 3, 7} {
			r := w.rotor(30*time.Second, "", "exec", "--", "sh", "-c", fmt.Sprintf("exit %d", want))
			if r.code != want {
				t.Errorf("rotor exec -- sh -c 'exit %d' exited %d: %v", want, r.code, r)
			}
		}
	})

	t.Run("env_key_and_stop", func(t *testing.T) {
		w := newE2EWorld(t)
		const key = "sk-e2e-exec-env"
		w.addKey("one", key)
		w.setenv("OPENAI_BASE_URL", "http://example.invalid/v1") // replaced for the child
		w.setenv("OPENAI_API_KEY", "sk-users-own-key")
		p := w.start(60*time.Second, w.bin, "exec", "--", "sh", "-c", e2ePrintEnv)
		base, clientKey := p.line(), p.line()
		m := e2eLoopbackV1.FindStringSubmatch(base)
		if m == nil {
			t.Fatalf("child got OPENAI_BASE_URL=%q, want http://127.0.0.1:PORT/v1", base)
		}
		if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(clientKey) {
			t.Fatalf("child got OPENAI_API_KEY=%q, want a fresh 256-bit hex client key", clientKey)
		}

		// The key works against the proxy, and only it does.
		resp, body := e2ePost(t, base, clientKey, `{"model":"gpt-5","input":"Say hello","stream":true}`)
		if resp.StatusCode != 200 || e2eDeltas(body) != e2eHello {
			t.Fatalf("streamed request with the child's key: %d %s", resp.StatusCode, body)
		}
		resp, body = e2ePost(t, base, "sk-users-own-key", `{"model":"gpt-5","input":"hi"}`)
		if resp.StatusCode != 401 || gjson.GetBytes(body, "error.code").String() != "runtime_rotation_proxy_unauthorized" {
			t.Errorf("a wrong key got %d %s, want 401 runtime_rotation_proxy_unauthorized", resp.StatusCode, body)
		}
		calls := e2eResponses(w.up)
		if len(calls) != 1 || calls[0].Token != key {
			t.Errorf("upstream saw %d calls; want one, with the account's key", len(calls))
		}

		p.send("\n")
		if code := p.wait(); code != 0 {
			t.Fatalf("rotor exec exited %d\nstderr:\n%s", code, p.stderr.String())
		}
		// rotor exec has returned: its proxy is gone.
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+m[1], 2*time.Second); err == nil {
			c.Close()
			t.Errorf("the proxy on port %s still accepts connections after rotor exec exited", m[1])
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("dialing the stopped proxy: %v, want connection refused", err)
		}
	})

	t.Run("sigterm_forwarded", func(t *testing.T) {
		w := newE2EWorld(t)
		w.addKey("one", "sk-e2e-exec-term")
		// SIGTERM to rotor alone (as timeout(1) or a process manager sends
		// it) must reach the child, and rotor must wait for it and stop
		// the proxy, not die and leave the child running.
		p := w.start(60*time.Second, w.bin, "exec", "--", "sh", "-c",
			`trap 'echo got-sigterm; exit 42' TERM; echo "$OPENAI_BASE_URL"; while :; do sleep 0.05; done`)
		base := p.line()
		m := e2eLoopbackV1.FindStringSubmatch(base)
		if m == nil {
			t.Fatalf("child got OPENAI_BASE_URL=%q", base)
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if l := p.line(); l != "got-sigterm" {
			t.Fatalf("the child printed %q, want got-sigterm (the SIGTERM forwarded)", l)
		}
		if code := p.wait(); code != 42 {
			t.Fatalf("rotor exec exited %d after SIGTERM, want the child's 42\nstderr:\n%s", code, p.stderr.String())
		}
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+m[1], 2*time.Second); err == nil {
			c.Close()
			t.Errorf("the proxy on port %s still accepts connections after rotor exec exited", m[1])
		}
	})

	t.Run("account_pin", func(t *testing.T) {
		w := newE2EWorld(t)
		keys := []string{"sk-e2e-pin-one", "sk-e2e-pin-two", "sk-e2e-pin-three"}
		for i, k := range keys {
			w.addKey(fmt.Sprintf("acct-%d", i+1), k)
		}
		for _, sel := range []string{"2", "acct-2"} {
			p := w.start(60*time.Second, w.bin, "exec", "--account", sel, "--", "sh", "-c", e2ePrintEnv)
			base, clientKey := p.line(), p.line()
			for i := range 4 {
				resp, body := e2ePost(t, base, clientKey, fmt.Sprintf(`{"model":"gpt-5","input":"Say hello %d","stream":true}`, i))
				if resp.StatusCode != 200 || e2eDeltas(body) != e2eHello {
					t.Fatalf("--account %s, request %d: %d %s", sel, i, resp.StatusCode, body)
				}
			}
			p.send("\n")
			if code := p.wait(); code != 0 {
				t.Fatalf("rotor exec --account %s exited %d\nstderr:\n%s", sel, code, p.stderr.String())
			}
		}
		if a, b, c := w.up.Count(keys[0]), w.up.Count(keys[1]), w.up.Count(keys[2]); a != 0 || b != 8 || c != 0 {
			t.Errorf("upstream calls per account: %d, %d, %d; want 0, 8, 0 (only the pinned account 2)", a, b, c)
		}
	})
}
