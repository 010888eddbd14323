// Command rotor-demo shows rotor working with no real account (make demo):
// it starts the fake upstream, adds three API-key accounts (one of them at
// its usage limit) and a ChatGPT one with the real rotor CLI, runs `rotor
// serve`, streams answers through it as they arrive, and shows the
// failover, the quota bars of `rotor rotation status`, and the dashboard's
// login link (kept up until Enter when run from a terminal).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tidwall/gjson"
	"golang.org/x/term"

	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation"
)

func main() {
	rotor := flag.String("rotor", "bin/rotor", "the rotor binary")
	testdata := flag.String("testdata", "testdata", "the fixtures folder")
	flag.Parse()
	if err := run(*rotor, *testdata, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

// demo accounts: alice is at her usage limit for the next 15 minutes.
var demoAccounts = []struct{ label, key string }{
	{"alice", "sk-demo-alice"},
	{"bob", "sk-demo-bob"},
	{"carol", "sk-demo-carol"},
}

func run(rotor, testdata string, out io.Writer) error {
	rotor, err := filepath.Abs(rotor)
	if err != nil {
		return err
	}
	homeDir, err := os.MkdirTemp("", "rotor-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(homeDir)

	up := upstreamtest.New(testdata)
	if err := up.Start("127.0.0.1:0"); err != nil {
		return err
	}
	defer up.Close()
	up.SetDefault(upstreamtest.Behavior{EventDelay: 90 * time.Millisecond})
	up.Set("sk-demo-alice", upstreamtest.Behavior{Status: 429, ErrorFixture: "rate_limit_exceeded_429.json",
		ResetIn: 15 * time.Minute, Headers: map[string]string{"retry-after": "{{RESETS_IN}}"}})

	// dana is a ChatGPT account (the Codex CLI login in testdata) whose
	// answers carry the x-codex-* quota headers of a real one, so the bars
	// in rotation status and on the dashboard have real numbers.
	codexHome, err := os.MkdirTemp("", "rotor-demo-codex-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(codexHome)
	auth, err := os.ReadFile(filepath.Join(testdata, "jwt", "codex_auth.json"))
	if err != nil {
		return err
	}
	authFile := filepath.Join(codexHome, "auth.json")
	if err := os.WriteFile(authFile, auth, 0o600); err != nil {
		return err
	}
	up.Set(gjson.GetBytes(auth, "tokens.access_token").String(), upstreamtest.Behavior{EventDelay: 90 * time.Millisecond,
		Headers: map[string]string{
			"x-codex-plan-type":                     "plus",
			"x-codex-primary-used-percent":          "62",
			"x-codex-primary-window-minutes":        "300",
			"x-codex-primary-reset-after-seconds":   "7980",
			"x-codex-secondary-used-percent":        "35",
			"x-codex-secondary-window-minutes":      "10080",
			"x-codex-secondary-reset-after-seconds": "331200",
		}})

	env := append(os.Environ(),
		"ROTOR_HOME="+homeDir, "ROTOR_SECRETS=file",
		"ROTOR_OPENAI_BASE_URL="+up.OpenAIBase(), "ROTOR_CHATGPT_BASE_URL="+up.ChatGPTBase())
	step := func(s string) { fmt.Fprintf(out, "\n== %s\n", s) }
	cli := func(stdin string, args ...string) error {
		fmt.Fprintf(out, "$ rotor %s\n", strings.Join(args, " "))
		cmd := exec.Command(rotor, args...)
		cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, strings.NewReader(stdin), out, out
		return cmd.Run()
	}

	step("A fake OpenAI upstream is running on " + up.URL() + " (no real account, no network)")
	fmt.Fprintf(out, "ROTOR_HOME=%s\n", homeDir)

	step("Add three API-key accounts (keys are read from stdin, never argv)")
	for _, a := range demoAccounts {
		if err := cli(a.key, "add-key", "--label", a.label); err != nil {
			return err
		}
	}
	step("Add the ChatGPT account Codex CLI is logged in with (here a test login)")
	if err := cli("", "import", "codex", "--file", authFile, "--label", "dana"); err != nil {
		return err
	}
	if err := cli("", "list"); err != nil {
		return err
	}
	fmt.Fprintln(out, "(alice is out of quota upstream for 15 minutes; rotor does not know yet)")

	step("Start the proxy: rotor serve --port 0")
	serve := exec.Command(rotor, "serve", "--port", "0", "--log-format", "console")
	serve.Env = env
	stdout, err := serve.StdoutPipe()
	if err != nil {
		return err
	}
	logs, err := serve.StderrPipe()
	if err != nil {
		return err
	}
	if err := serve.Start(); err != nil {
		return err
	}
	defer serve.Process.Kill()
	logLines := make(chan string, 64)
	go forward(logs, logLines)
	sc := bufio.NewScanner(stdout)
	for i := 0; i < 2 && sc.Scan(); i++ {
		fmt.Fprintln(out, "  "+sc.Text())
	}
	go io.Copy(io.Discard, stdout)
	info, err := waitInfo(homeDir, serve.Process.Pid)
	if err != nil {
		return err
	}

	step("Requests through the proxy, streamed as they arrive, until one meets alice's limit")
	// rotor spreads requests over the accounts, so alice comes up within
	// a few; the one that meets her limit fails over before its first byte.
	for i := 1; i <= 3 || up.Count("sk-demo-alice") == 0; i++ {
		if i > 8 {
			return fmt.Errorf("rotor never picked alice in 8 requests")
		}
		fmt.Fprintf(out, "request %d: ", i)
		if err := stream(out, info); err != nil {
			return err
		}
		drain(out, logLines, 300*time.Millisecond)
	}

	step("Pin the ChatGPT account for one request: rotor switch 4, then rotor unpin")
	if err := cli("", "switch", "4"); err != nil {
		return err
	}
	time.Sleep(2 * rotation.WatchInterval) // the serve sees the pin on its next look
	fmt.Fprint(out, "one more request: ")
	if err := stream(out, info); err != nil {
		return err
	}
	drain(out, logLines, 300*time.Millisecond)
	if err := cli("", "unpin"); err != nil {
		return err
	}

	step("What rotor learned: rotor rotation status (quota bars from dana's x-codex-* headers)")
	if err := cli("", "rotation", "status"); err != nil {
		return err
	}

	step("The same, live in a browser: rotor dashboard prints a one-time login link")
	if err := cli("", "dashboard"); err != nil {
		return err
	}
	if term.IsTerminal(int(os.Stdin.Fd())) {
		fmt.Fprint(out, "Open that link now; press Enter to stop the proxy and end the demo. ")
		bufio.NewReader(os.Stdin).ReadString('\n')
	}

	step("Stop the proxy (SIGTERM: in-flight streams finish, state is saved)")
	serve.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- serve.Wait() }()
	select {
	case err := <-done:
		drain(out, logLines, 100*time.Millisecond)
		if err != nil {
			return fmt.Errorf("rotor serve: %w", err)
		}
	case <-time.After(10 * time.Second):
		return fmt.Errorf("rotor serve did not stop within 10s")
	}
	fmt.Fprintln(out, "proxy stopped cleanly; demo done.")
	fmt.Fprintln(out, "\nNext: rotor import codex (or rotor add-key), then rotor serve, or: rotor exec -- codex")
	return nil
}

// forward sends each log line of the proxy to lines, dropping lines when
// nobody reads (the demo must never block the proxy).
func forward(r io.Reader, lines chan<- string) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		select {
		case lines <- sc.Text():
		default:
		}
	}
	close(lines)
}

// drain prints the proxy's log lines that arrive within d.
func drain(out io.Writer, lines <-chan string, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return
			}
			fmt.Fprintln(out, "  [rotor log] "+l)
		case <-t.C:
			return
		}
	}
}

// waitInfo waits for the proxy to write proxy.json.
func waitInfo(dir string, pid int) (home.Info, error) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if in, err := home.ReadInfo(dir); err == nil && in.PID == pid {
			return in, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return home.Info{}, fmt.Errorf("rotor serve wrote no proxy.json within 10s")
}

// stream sends one streamed Responses request and prints the text deltas
// the moment they arrive.
func stream(out io.Writer, info home.Info) error {
	body, _ := json.Marshal(map[string]any{"model": "gpt-5", "stream": true, "input": "Say hello"})
	req, err := http.NewRequest("POST", info.URL+"/responses", strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+info.ClientKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		fmt.Fprintf(out, "HTTP %d %s\n", resp.StatusCode, b)
		return nil
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		switch gjson.Get(data, "type").String() {
		case "response.output_text.delta":
			fmt.Fprint(out, gjson.Get(data, "delta").String())
			if f, ok := out.(*os.File); ok {
				f.Sync()
			}
		case "response.completed":
			fmt.Fprintf(out, "   (%d tokens)\n", gjson.Get(data, "response.usage.total_tokens").Int())
		}
	}
	return sc.Err()
}
