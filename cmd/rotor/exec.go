package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/rotorproxy/rotor/accounts"
	rerr "github.com/rotorproxy/rotor/errors"
)

// exitError carries a child's exit status out of exec.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func cmdExec(a *app, args []string) error {
	fs := a.flags()
	var o proxyOptions
	o.register(fs, false)
	o.host, o.port = "127.0.0.1", 0
	if err := a.parseFlags(fs, args); err != nil {
		return err
	}
	argv := fs.Args()
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return rerr.Validation("command", "Missing command. Usage: rotor exec [--account SEL] -- CMD [ARGS]")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return rerr.Validation("command", "Cannot run "+argv[0]+": "+err.Error())
	}
	// Proxy logs go to stderr only when asked for (--log-level); by default
	// the child owns the terminal and only warnings are shown.
	logOut := a.stderr
	levelSet := false
	fs.Visit(func(f *flag.Flag) { levelSet = levelSet || f.Name == "log-level" })
	if !levelSet {
		o.logLevel = "warn"
	}
	r, err := a.startProxy(o, logOut)
	if err != nil {
		return err
	}
	defer r.stop()

	signedIn := false
	if filepath.Base(argv[0]) == "codex" {
		_, signedIn = a.codexLogin()
	}
	child := exec.Command(path, append(codexOverrides(argv[0], r.url, signedIn), argv[1:]...)...)
	child.Stdin, child.Stdout, child.Stderr = a.stdin, a.stdout, a.stderr
	child.Env = append(a.environ(), "OPENAI_BASE_URL="+r.url)
	if !signedIn {
		// Codex signed in as itself sends its own token: a key in its
		// environment could only make it use that instead.
		child.Env = append(child.Env, "OPENAI_API_KEY="+r.key)
	}
	// The child gets the terminal's signals itself; rotor only waits.
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT)
	defer signal.Reset(syscall.SIGINT, syscall.SIGQUIT)
	// A SIGTERM or SIGHUP sent to rotor alone (timeout(1), a process
	// manager) goes to the child; rotor outlives it to stop the proxy and
	// pass its status on, instead of dying and orphaning it.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err = child.Start(); err == nil {
		waited := make(chan struct{})
		go func() {
			for {
				select {
				case s := <-sigs:
					child.Process.Signal(s)
				case <-waited:
					return
				}
			}
		}()
		err = child.Wait()
		close(waited)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal()) // as a shell reports it
		}
		r.stop()
		return &exitError{code: code}
	}
	return err
}

// codexOverrides are the -c flags that make Codex CLI talk to the proxy
// (docs/commands.md exec); other commands get none. Codex signed in with ChatGPT
// as an account of the pool keeps its sign-in and built-in provider, and
// gets the two base URLs "rotor codex link" writes (docs/codex.md); otherwise
// it talks through a "rotor" model provider with the client key (docs/codex.md).
func codexOverrides(cmd, url string, signedIn bool) []string {
	if filepath.Base(cmd) != "codex" {
		return nil
	}
	if signedIn {
		openai, chatgpt := codexBases(strings.TrimSuffix(url, "/v1"))
		return []string{
			"-c", fmt.Sprintf("%s=%q", accounts.CodexOpenAIBaseKey, openai),
			"-c", fmt.Sprintf("%s=%q", accounts.CodexChatGPTBaseKey, chatgpt),
		}
	}
	return []string{
		"-c", `model_provider="rotor"`,
		// Codex switches remote compaction on for the provider named
		// "OpenAI" only (ModelProviderInfo::is_openai): rotor is OpenAI's
		// Responses API, so it takes the name and Codex compacts as it does
		// talking to OpenAI directly (docs/codex.md).
		"-c", `model_providers.rotor.name="OpenAI"`,
		"-c", fmt.Sprintf("model_providers.rotor.base_url=%q", url),
		"-c", `model_providers.rotor.wire_api="responses"`,
		"-c", `model_providers.rotor.env_key="OPENAI_API_KEY"`,
		"-c", `model_providers.rotor.requires_openai_auth=false`,
		// Responses over one WebSocket per session, as Codex talks to
		// OpenAI directly (docs/codex.md).
		"-c", `model_providers.rotor.supports_websockets=true`,
	}
}
