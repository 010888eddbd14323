//go:build unix

package main

// The newcomer's path (docs: README.md): the README's first-run lines, read
// from README.md and run as printed, one at a time, in one bash shell, as a
// user types them, against the real rotor binary and the fakes. Each line
// must do what the user is told it does; a line that changes into one that
// no longer works (a renamed command or flag, a step left out) fails here.
//
// `make demo`, the README's first command, runs in .ci/run on a clean
// clone; it is not run again here. The file is unix-only: the stand-in
// browser is xdg-open (open on macOS), and the shell is bash.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/accounts/oauth/oauthtest"
)

const (
	// newcomerLineTimeout bounds one README line (rotor is built with
	// -race under make test).
	newcomerLineTimeout = 60 * time.Second
	// newcomerPortWait bounds the wait for port 8787, which the README's
	// "rotor serve" listens on, to be free.
	newcomerPortWait = 60 * time.Second
)

// TestNewcomerPath runs the README's "Add accounts" block and its "Codex
// CLI, signed in with ChatGPT" block, line by line as printed.
func TestNewcomerPath(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("SKIP the newcomer's path: it runs the README's lines with bash, and there is no bash on PATH: " + err.Error())
	}
	data, err := os.ReadFile(filepath.Join(e2eRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	// Not parallel: "rotor serve" as printed listens on 8787, so this runs
	// while no other test of the package does (parallel tests start after
	// the sequential ones); newcomerPortFree waits out other programs.
	t.Run("add accounts", func(t *testing.T) { newcomerAddAccounts(t, bash, readme) })
	t.Run("codex signed in", func(t *testing.T) { newcomerCodex(t, bash, readme) })
}

// newcomerAddAccounts: a browser signed in to ada's ChatGPT account, where
// the user signs in with bob when the page asks; Codex CLI logged in as
// ada; an API key to paste. After the block, a client using the
// environment `eval "$(rotor env)"` exported gets a streamed answer.
func newcomerAddAccounts(t *testing.T, bash, readme string) {
	block := newcomerBlock(t, readme, "## Add accounts", "sh")
	w, auth := newNewcomerWorld(t)
	auth.SignInNext(bob)
	_, codexAuth := w.codexLogin(t)
	sh := newNewcomerShell(t, w, bash)

	type row struct{ kind, name string }
	var pool []row
	var serve newcomerRun
	var serveURL, proxyKey, baseURL, clientKey string
	const apiKey = "sk-newcomer-0123456789abcdefghijklmnop"
	for _, printed := range block {
		line := shellUncomment(printed)
		next := len(pool) + 1
		switch {
		case line == "rotor login":
			r := sh.run(line, "")
			r.ok(t)
			r.says(t, fmt.Sprintf("Added ChatGPT account %d (bob@example.com, plan pro).", next))
			r.says(t, fmt.Sprintf("The pool has %s (rotor list).", newcomerAccounts(next)))
			pool = append(pool, row{"chatgpt", "bob@example.com"})
		case line == "rotor import codex":
			r := sh.run(line, "")
			r.ok(t)
			r.says(t, fmt.Sprintf("Imported ChatGPT account %d (ada@example.com, plan plus) from %s.", next, codexAuth))
			pool = append(pool, row{"chatgpt", "ada@example.com"})
		case strings.HasPrefix(line, "rotor add-key"):
			// Piped on stdin, as the README's comment offers.
			r := sh.run(line, apiKey+"\n")
			r.ok(t)
			label := "-"
			if m := regexp.MustCompile(`--label[ =](\S+)`).FindStringSubmatch(line); m != nil {
				label = m[1]
			}
			r.says(t, fmt.Sprintf("Added API-key account %d (%s).", next, label))
			if strings.Contains(r.stdout+r.stderr, apiKey) {
				t.Errorf("%q echoed the API key:\n%v", line, r)
			}
			pool = append(pool, row{"api-key", label})
		case line == "rotor list":
			r := sh.run(line, "")
			r.ok(t)
			rows := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
			if len(rows) != len(pool)+1 || !strings.Contains(rows[0], "LABEL") || !strings.Contains(rows[0], "KIND") {
				t.Fatalf("%q shows %d lines, want a header and a row for each of %d accounts:\n%v", line, len(rows), len(pool), r)
			}
			for i, want := range pool {
				f := strings.Fields(rows[i+1])
				if len(f) < 4 || f[0] != strconv.Itoa(i+1) || f[1] != "available" || !strings.Contains(rows[i+1], " "+want.kind+" ") ||
					!strings.Contains(rows[i+1], " "+want.name+" ") {
					t.Errorf("%q: row %d is %q, want account %d, available, %s, %s", line, i+1, rows[i+1], i+1, want.kind, want.name)
				}
			}
		case strings.HasPrefix(line, "rotor serve"):
			// It keeps running: in the background, as a user keeps it
			// running in another terminal, and stopped at the end.
			serveURL = newcomerURL(t, printed)
			newcomerPortFree(t)
			serve = sh.run(line+" &", "")
			serve.ok(t)
			sh.await(t, serve, "rotor proxy listening on "+serveURL+"\n")
			// The comment says the client key is in proxy.json.
			in, err := home.ReadInfo(w.home)
			if err != nil || in.URL != serveURL || strconv.Itoa(in.PID) != serve.bg || in.ClientKey == "" {
				t.Fatalf("after %q, proxy.json holds %+v (%v), want pid %s at %s with its key", line, in, err, serve.bg, serveURL)
			}
			proxyKey = in.ClientKey
		case line == `eval "$(rotor env)"`:
			r := sh.run(line, "")
			r.ok(t)
			if r.stdout != "" || r.stderr != "" {
				t.Errorf("%q printed something:\n%v", line, r)
			}
			env := sh.run(`printf '%s\n' "$OPENAI_BASE_URL" "$OPENAI_API_KEY"`, "")
			env.ok(t)
			got := strings.Split(strings.TrimSuffix(env.stdout, "\n"), "\n")
			baseURL, clientKey = got[0], got[len(got)-1]
			if len(got) != 2 || serveURL == "" || baseURL != serveURL || clientKey != proxyKey {
				t.Fatalf("after %q the shell has OPENAI_BASE_URL and OPENAI_API_KEY %q, want the running serve's %s and its key from proxy.json", line, got, serveURL)
			}
		default:
			// Run, so that a broken line fails with its own words.
			sh.run(line, "").ok(t)
			t.Fatalf("README's \"## Add accounts\" has a line this test does not know: %q; say here what a user should see from it", printed)
		}
	}
	if serve.bg == "" || baseURL == "" {
		t.Fatalf("README's \"## Add accounts\" block no longer starts a proxy and exports its environment (rotor serve; eval \"$(rotor env)\"): %q", block)
	}
	if len(pool) < 3 {
		t.Fatalf("README's \"## Add accounts\" block adds %d accounts; this test expects a login, an import and an API key: %q", len(pool), block)
	}
	for _, q := range auth.Authorizations() {
		if q.Get("prompt") != "login" {
			t.Errorf("rotor login asked the sign-in page without prompt=login: %v", q)
		}
	}

	// A client configured from that environment, as the OpenAI SDKs read it.
	resp, body := e2ePost(t, baseURL, clientKey, `{"model":"gpt-5","input":"say hello","stream":true}`)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") ||
		e2eDeltas(body) != e2eHello {
		t.Fatalf("POST %s/responses with the exported key: %d %s\n%s", baseURL, resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	creds := map[string]bool{apiKey: true}
	for _, is := range auth.Issued() {
		creds[is.AccessToken] = true
	}
	if tok, err := accounts.ReadCodexAuth(codexAuth); err == nil {
		creds[tok.AccessToken] = true
	}
	served := false
	for _, r := range w.up.Requests() {
		if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/responses") {
			served = served || creds[r.Token]
			if r.Token == clientKey {
				t.Errorf("the client key reached the upstream")
			}
		}
	}
	if !served {
		t.Errorf("no account of the pool answered the request at the upstream")
	}
	sh.stopServe(t, serve)
}

// newcomerCodex: Codex CLI signed in with ChatGPT (ada), its config.toml
// holding a line of the user's own.
func newcomerCodex(t *testing.T, bash, readme string) {
	const heading = "## Codex CLI, signed in with ChatGPT"
	block := newcomerBlock(t, readme, heading, "sh")
	want := newcomerBlock(t, readme, heading, "toml")
	w, _ := newNewcomerWorld(t)
	_, codexAuth := w.codexLogin(t)
	config := filepath.Join(filepath.Dir(codexAuth), "config.toml")
	const own = "model = \"gpt-5-codex\"\n\n[profiles.fast]\nmodel = \"gpt-5-mini\"\n"
	if err := os.WriteFile(config, []byte(own), 0o600); err != nil {
		t.Fatal(err)
	}
	sh := newNewcomerShell(t, w, bash)
	var serve newcomerRun
	linked := false
	for _, printed := range block {
		line := shellUncomment(printed)
		switch {
		case line == "codex login":
			// Not run: it is the real Codex CLI signing in at the real
			// auth.openai.com. Its result, CODEX_HOME/auth.json, is
			// written above (e2eWorld.codexLogin).
		case line == "rotor import codex":
			r := sh.run(line, "")
			r.ok(t)
			r.says(t, fmt.Sprintf("Imported ChatGPT account 1 (ada@example.com, plan plus) from %s.", codexAuth))
		case line == "rotor service install":
			// Not run: it installs and starts a systemd user unit (a
			// launchd agent on macOS) in the user's session. The README's
			// own alternative, a rotor serve kept running, stands in.
			if !strings.Contains(printed, "rotor serve") {
				t.Fatalf("%q no longer names rotor serve as its alternative, which this test runs in its place", printed)
			}
			newcomerPortFree(t)
			serve = sh.run("rotor serve &", "")
			serve.ok(t)
			sh.await(t, serve, "rotor proxy listening on http://127.0.0.1:8787/v1\n")
		case line == "rotor codex link":
			if serve.bg == "" {
				t.Fatalf("%q comes before the block starts the proxy: Codex would connect to nothing", printed)
			}
			r := sh.run(line, "")
			r.ok(t)
			r.says(t, "Codex goes through rotor at http://127.0.0.1:8787")
			if strings.Contains(r.stderr, "no rotor serve is listening") {
				t.Errorf("%q says no serve listens, with one running:\n%v", line, r)
			}
			got, err := os.ReadFile(config)
			if err != nil {
				t.Fatal(err)
			}
			// The README's lines, as printed, among the top-level keys
			// (before the first table, where TOML reads them as such), and
			// the user's lines kept.
			var top, rest []string
			for l := range strings.SplitSeq(string(got), "\n") {
				if strings.HasPrefix(l, "[") || len(rest) > 0 {
					rest = append(rest, l)
				} else if l != "" {
					top = append(top, l)
				}
			}
			slices.Sort(top)
			wantTop := append([]string{`model = "gpt-5-codex"`}, want...)
			slices.Sort(wantTop)
			if !slices.Equal(top, wantTop) || strings.Join(rest, "\n") != "[profiles.fast]\nmodel = \"gpt-5-mini\"\n" {
				t.Fatalf("after %q, config.toml is\n%s\nwant the README's lines %q among its top-level keys, and the user's lines kept:\n%s", line, got, want, own)
			}
			linked = true
		case line == "codex":
			// Not run: the real Codex CLI comes from npm, and its turns
			// through a linked rotor are the real-client tests'
			// (e2e_signedin_test.go).
		default:
			sh.run(line, "").ok(t)
			t.Fatalf("README's %q block has a line this test does not know: %q; say here what a user should see from it", heading, printed)
		}
	}
	if serve.bg == "" || !linked {
		t.Fatalf("README's %q block no longer starts the proxy and links Codex to it: %q", heading, block)
	}
	sh.stopServe(t, serve)
}

// ---------------------------------------------------------------------------
// The README.

// newcomerBlock returns the lines of the first ```lang block in the
// README's section under heading, as printed, blank lines left out.
func newcomerBlock(t *testing.T, readme, heading, lang string) []string {
	t.Helper()
	var out []string
	in, inBlock := false, false
	for l := range strings.SplitSeq(readme, "\n") {
		switch {
		case !in:
			in = l == heading
		case inBlock && l == "```":
			return out
		case inBlock:
			if strings.TrimSpace(l) != "" {
				out = append(out, l)
			}
		case strings.HasPrefix(l, "## "):
			t.Fatalf("README.md's %q section has no ```%s block", heading, lang)
		case l == "```"+lang:
			inBlock = true
		}
	}
	t.Fatalf("README.md has no %q section with a ```%s block", heading, lang)
	return nil
}

// shellUncomment drops a line's trailing "# comment" (a # starting a word
// outside quotes, as bash reads it) and the blanks before it.
func shellUncomment(line string) string {
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
			}
		case c == '\\':
			i++
		case quote == '"':
			if c == '"' {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return strings.TrimRight(line[:i], " \t")
		}
	}
	return strings.TrimRight(line, " \t")
}

// newcomerURL is the proxy URL a line's comment promises.
func newcomerURL(t *testing.T, printed string) string {
	t.Helper()
	u := regexp.MustCompile(`http://127\.0\.0\.1:\d+/v1`).FindString(printed)
	if u == "" {
		t.Fatalf("%q no longer says where the proxy listens", printed)
	}
	return u
}

func newcomerAccounts(n int) string {
	if n == 1 {
		return "1 account"
	}
	return fmt.Sprintf("%d accounts", n)
}

// ---------------------------------------------------------------------------
// The world: fakes, a fresh HOME, ROTOR_HOME and CODEX_HOME, rotor and a
// browser on PATH.

// newNewcomerWorld is an e2e world whose sign-in server is a fake the
// stand-in browser signs in at (signed in to ada), with the rotor binary
// on PATH as an installed rotor is.
func newNewcomerWorld(t *testing.T) (*e2eWorld, *oauthtest.Server) {
	t.Helper()
	w := newE2EWorld(t)
	auth := oauthtest.New()
	if err := auth.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { auth.Close() })
	w.setenv("ROTOR_AUTH_BASE_URL", auth.URL())
	bin := t.TempDir()
	if err := os.Symlink(w.bin, filepath.Join(bin, "rotor")); err != nil {
		t.Fatal(err)
	}
	newcomerBrowser(t, bin)
	w.setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	w.setenv("ROTOR_LOGIN_ADDR", "127.0.0.1:0") // not 1455, which a login elsewhere may hold
	return w, auth
}

// newcomerPortFree waits, bounded, for 127.0.0.1:8787 to be free: the
// README's "rotor serve" listens there, and another program (another
// checkout's tests) may hold it for a while.
func newcomerPortFree(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(newcomerPortWait)
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:8787")
		if err == nil {
			ln.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("port 8787 stayed busy for %v (%v): the README's \"rotor serve\" listens there, so its lines cannot run while another program holds it", newcomerPortWait, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------
// The shell: one bash, reading the lines one at a time as a user types them.

type newcomerShell struct {
	t      *testing.T
	dir    string // each line's stdin, stdout and stderr
	stdin  io.WriteCloser
	marks  chan string
	done   chan struct{}
	stderr *e2eBuffer
	err    error
	n      int
}

// newcomerRun is what one line did.
type newcomerRun struct {
	line           string
	stdout, stderr string
	code           int
	bg             string // $! after the line: the pid of its background job
	out            string // the file its stdout went to
}

func (r newcomerRun) String() string {
	return fmt.Sprintf("$ %s\nexit %d\n--- stdout:\n%s--- stderr:\n%s", r.line, r.code, r.stdout, r.stderr)
}

func (r newcomerRun) ok(t *testing.T) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("a README line failed:\n%v", r)
	}
}

func (r newcomerRun) says(t *testing.T, want string) {
	t.Helper()
	if !strings.Contains(r.stdout, want) {
		t.Fatalf("%q does not say %q:\n%v", r.line, want, r)
	}
}

func newNewcomerShell(t *testing.T, w *e2eWorld, bash string) *newcomerShell {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	cmd := w.command(ctx, bash, "--noprofile", "--norc")
	s := &newcomerShell{t: t, dir: t.TempDir(), marks: make(chan string, 16), done: make(chan struct{}), stderr: &e2eBuffer{}}
	var err error
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.marks <- sc.Text()
		}
		close(s.marks)
		s.err = cmd.Wait()
		close(s.done)
	}()
	// The whole group goes, a serve a failed test left running included:
	// bash exits when its input ends, but its background jobs stay in its
	// process group.
	t.Cleanup(func() {
		s.stdin.Close()
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cancel()
		<-s.done
	})
	return s
}

// run types line, its stdin being input, and waits for the prompt.
func (s *newcomerShell) run(line, input string) newcomerRun {
	s.t.Helper()
	s.n++
	name := func(kind string) string { return filepath.Join(s.dir, fmt.Sprintf("%d.%s", s.n, kind)) }
	if err := os.WriteFile(name("in"), []byte(input), 0o600); err != nil {
		s.t.Fatal(err)
	}
	script := fmt.Sprintf("{\n%s\n} <'%s' >'%s' 2>'%s'\nprintf '__newcomer %d %%s %%s\\n' \"$?\" \"$!\"\n",
		line, name("in"), name("out"), name("err"), s.n)
	if _, err := io.WriteString(s.stdin, script); err != nil {
		s.t.Fatalf("typing %q: %v\nbash's stderr:\n%s", line, err, s.stderr.String())
	}
	r := newcomerRun{line: line, out: name("out")}
	timeout := time.After(newcomerLineTimeout)
	for {
		select {
		case m, open := <-s.marks:
			if !open {
				<-s.done
				s.t.Fatalf("bash exited (%v) during %q\nstderr:\n%s", s.err, line, s.stderr.String())
			}
			f := strings.Fields(m)
			if len(f) < 3 || f[0] != "__newcomer" || f[1] != strconv.Itoa(s.n) {
				s.t.Logf("bash: %s", m)
				continue
			}
			r.code, _ = strconv.Atoi(f[2])
			if len(f) > 3 {
				r.bg = f[3]
			}
			out, _ := os.ReadFile(name("out"))
			errOut, _ := os.ReadFile(name("err"))
			r.stdout, r.stderr = string(out), string(errOut)
			return r
		case <-timeout:
			out, _ := os.ReadFile(name("out"))
			errOut, _ := os.ReadFile(name("err"))
			s.t.Fatalf("%q did not finish within %v\n--- stdout:\n%s--- stderr:\n%s", line, newcomerLineTimeout, out, errOut)
		}
	}
}

// await waits, bounded, for r's background job to print want; it fails
// at once when the job exits first.
func (s *newcomerShell) await(t *testing.T, r newcomerRun, want string) {
	t.Helper()
	pid, err := strconv.Atoi(r.bg)
	if err != nil {
		t.Fatalf("%q started no background job ($! is %q)", r.line, r.bg)
	}
	deadline := time.Now().Add(newcomerLineTimeout)
	for {
		out, _ := os.ReadFile(r.out)
		if strings.Contains(string(out), want) {
			return
		}
		errOut, _ := os.ReadFile(strings.TrimSuffix(r.out, "out") + "err")
		if syscall.Kill(pid, 0) != nil {
			t.Fatalf("%q exited before saying %q\n--- stdout:\n%s--- stderr:\n%s", r.line, want, out, errOut)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q did not say %q within %v\n--- stdout:\n%s--- stderr:\n%s", r.line, want, newcomerLineTimeout, out, errOut)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopServe sends serve's background job SIGTERM, as a service manager
// does, and wants exit 0.
func (s *newcomerShell) stopServe(t *testing.T, serve newcomerRun) {
	t.Helper()
	r := s.run(fmt.Sprintf("kill -TERM %s && wait %s", serve.bg, serve.bg), "")
	if r.code != 0 {
		errOut, _ := os.ReadFile(strings.TrimSuffix(serve.out, "out") + "err")
		t.Errorf("%q exited %d after SIGTERM, want 0\n--- its stderr:\n%s", serve.line, r.code, errOut)
	}
}
