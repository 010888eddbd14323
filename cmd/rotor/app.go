package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy"
	"github.com/rotorproxy/rotor/rotation"
)

// Set at build time with -ldflags "-X main.version=... -X main.commit=..."
// (make build and make release do); versionInfo fills in what is not set.
var (
	version = "dev"
	commit  = ""
)

// app is one run of the CLI: its streams, what they are connected to, and
// its environment, all injected (as gh's iostreams are) so that tests run
// every command in-process, as if on a terminal or not.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// environ is the whole environment getenv reads, for the programs
	// rotor starts (exec).
	environ func() []string

	// stdinTTY and stdoutTTY say whether stdin and stdout are terminals:
	// add-key then prompts, and tables are coloured (unless NO_COLOR).
	stdinTTY, stdoutTTY bool
	// readHidden reads one line from the terminal on stdin without echoing
	// it; only called when stdinTTY.
	readHidden func() (string, error)

	name string // the command being run, as typed

	// clock is the time every command decides by (clock.System unless
	// a test injects one); httpClient sends what the diagnostics send.
	// With the streams above, app is the factory every command gets its
	// dependencies from, as gh's cmdutil.Factory is.
	clock      clock.Clock
	httpClient *http.Client
	// host is the machine "rotor service" installs on (systemHost
	// unless a test poses as another).
	host *serviceHost
}

// now is the app clock's present.
func (a *app) now() time.Time { return a.clockOrSystem().Now() }

func (a *app) clockOrSystem() clock.Clock {
	if a.clock == nil {
		return clock.System{}
	}
	return a.clock
}

func (a *app) client() *http.Client {
	if a.httpClient == nil {
		return &http.Client{}
	}
	return a.httpClient
}

// run executes one command line and returns the exit status.
func (a *app) run(args []string) int {
	if len(args) == 0 {
		a.usage(a.stderr)
		return 1
	}
	name := args[0]
	switch name {
	case "-h", "--help":
		name = "help"
	case "--version", "-version":
		name = "version"
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(a.stderr, "Unknown command: %s\n", name)
		if s := suggest(name); s != "" {
			fmt.Fprintf(a.stderr, "Did you mean %q?\n", s)
		}
		fmt.Fprintln(a.stderr)
		a.usage(a.stderr)
		return 1
	}
	a.name = name
	if err := cmd.run(a, args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		a.printError(err)
		return 1
	}
	return 0
}

// sortedNames lists the commands alphabetically.
func sortedNames() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// printError writes err for a person: the message, and the stable code of
// typed errors other than plain input mistakes.
func (a *app) printError(err error) {
	var e *rerr.Error
	if errors.As(err, &e) && e.Code != rerr.CodeValidation && e.Code != rerr.CodeNotFound {
		fmt.Fprintf(a.stderr, "%s [%s]\n", err.Error(), e.Code)
		return
	}
	fmt.Fprintln(a.stderr, err.Error())
}

// flags returns the flag set of the command being run. Its errors go to
// stderr; --help prints the command's help on stdout (and run exits 0).
func (a *app) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("rotor "+a.name, flag.ContinueOnError)
	// The flag package calls Usage for --help and after a bad flag alike,
	// and names flags with one dash; parseFlags reports both instead.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args with fs. On --help it writes the command's help
// to stdout and returns flag.ErrHelp (run exits 0); after a bad flag,
// which fs has already named on stderr, it adds the usage line.
func (a *app) parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		commandHelp(a.stdout, a.name, fs)
	case err != nil:
		fmt.Fprintln(a.stderr, flagMistake(err))
		fmt.Fprintf(a.stderr, "Usage: rotor %s (\"rotor %s --help\" shows every flag)\n", commands[a.name].usage, a.name)
		return &exitError{code: 1}
	}
	return err
}

// flagMistake rewords the flag package's errors the way rotor's flags are
// written: "--port", not "-port".
func flagMistake(err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return "Unknown flag: --" + strings.TrimLeft(name, "-")
	}
	return strings.Replace(msg, " flag -", " flag --", 1)
}

// parse parses args, allowing flags after positional arguments
// ("rotor switch 2 --json" as well as "rotor switch --json 2").
func (a *app) parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := a.parseFlags(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func (a *app) home() (string, error) { return accounts.HomeDir(a.getenv) }

func (a *app) store() (*accounts.Store, error) {
	dir, err := a.home()
	if err != nil {
		return nil, err
	}
	return accounts.Open(dir)
}

func (a *app) secrets(dir string) (secrets.Store, error) {
	return secrets.Open(dir, a.getenv("ROTOR_SECRETS"), a.stderr)
}

// storeAndSecrets opens the store and the secrets backend beside it.
func (a *app) storeAndSecrets() (*accounts.Store, secrets.Store, error) {
	st, err := a.store()
	if err != nil {
		return nil, nil, err
	}
	sec, err := a.secrets(st.Dir())
	return st, sec, err
}

// runtime loads the shared runtime state and a selector over pool, as a
// command that only reads them needs. A damaged state.json is only warned
// about: the state is advisory, and the selector works without it.
func (a *app) runtime(st *accounts.Store, pool *accounts.Pool) (*rotation.Selector, error) {
	sel, err := rotation.Open(st.Dir(), pool, a.clockOrSystem(), uint64(a.now().UnixNano()))
	sel.SetEndpointOf(a.adapters().Endpoint)
	if err != nil {
		if !errors.Is(err, rotation.ErrDamagedState) {
			return nil, err
		}
		fmt.Fprintf(a.stderr, "rotor: warning: %v (\"rotor fix\" rewrites it)\n", err)
	}
	// The views judge accounts on credits by the policy serves on this
	// environment use (docs/selection.md); a bad value is serve's to refuse.
	if p, err := a.creditsPolicy(""); err == nil {
		sel.SetCredits(p)
	}
	return sel, nil
}

// adapters are the account kinds' adapters over this run's upstream bases
// (ROTOR_CHATGPT_BASE_URL, ROTOR_OPENAI_BASE_URL) and its proxy rule.
func (a *app) adapters() *proxy.Adapters {
	return proxy.NewAdapters(strings.TrimRight(a.getenv("ROTOR_CHATGPT_BASE_URL"), "/"),
		strings.TrimRight(a.getenv("ROTOR_OPENAI_BASE_URL"), "/")).WithEnvProxy(a.envProxy())
}

// warnExposedSecrets writes one warning line when secrets.json in dir can
// be read by other users: the keys in it are then theirs too.
func (a *app) warnExposedSecrets(dir string) {
	if mode, ok := secrets.Exposed(dir); ok {
		path := filepath.Join(dir, home.SecretsFile)
		fmt.Fprintf(a.stderr, "rotor: warning: %s is %04o: other users can read your keys; run \"chmod 600 %s\" (or \"rotor fix\")\n", path, mode, path)
	}
}

// selector opens the store and returns the pool and a selector over it
// with the shared runtime state loaded: what every read-only view needs.
func (a *app) selector() (*accounts.Pool, *rotation.Selector, error) {
	st, err := a.store()
	if err != nil {
		return nil, nil, err
	}
	pool, err := st.Load()
	if err != nil {
		return nil, nil, err
	}
	sel, err := a.runtime(st, pool)
	return pool, sel, err
}

func cmdVersion(a *app, args []string) error {
	if err := a.noArgs(a.flags(), args); err != nil {
		return err
	}
	bi, _ := debug.ReadBuildInfo()
	v, c, goVersion := versionInfo(version, commit, bi)
	fmt.Fprintf(a.stdout, "rotor %s (commit %s, %s)\n", v, orDash(c), goVersion)
	return nil
}

// versionInfo returns the version and commit stamped by -ldflags, or, for
// what was not stamped, what the Go toolchain recorded in bi (nil when it
// recorded nothing): the module version, which is the tag for `go install
// github.com/rotorproxy/rotor/cmd/rotor@v1.2.3`, and the VCS revision of a
// build in a clone. A build from the module proxy has no revision, so the
// commit is then "" rather than a guess.
func versionInfo(stampedVersion, stampedCommit string, bi *debug.BuildInfo) (v, c, goVersion string) {
	v, c, goVersion = stampedVersion, stampedCommit, "unknown"
	if bi == nil {
		return v, c, goVersion
	}
	goVersion = bi.GoVersion
	if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	if c == "" {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				c = s.Value
			}
		}
	}
	return v, c, goVersion
}

func cmdHelp(a *app, args []string) error {
	args, err := a.parse(a.flags(), args)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		a.usage(a.stdout)
		return nil
	}
	name := args[0]
	if _, ok := commands[name]; !ok {
		msg := "Unknown command: " + name
		if s := suggest(name); s != "" {
			msg += fmt.Sprintf(". Did you mean %q?", s)
		}
		return rerr.Validation("command", msg)
	}
	// The command's own flag set knows its flags: ask it for help. It
	// answers flag.ErrHelp, which run turns into exit 0.
	a.name = name
	return commands[name].run(a, []string{"--help"})
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
