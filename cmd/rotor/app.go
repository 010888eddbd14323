package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/rotation"
)

// Set at build time with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = ""
)

// app is one run of the CLI: its streams and environment, injected so
// tests can run commands in-process.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
}

type command struct {
	run     func(a *app, args []string) error
	summary string
}

// commands is the CLI's surface (SPEC §3).
var commands map[string]command

func init() {
	commands = map[string]command{
		"serve":    {cmdServe, "serve [--host H] [--port P] [--account SEL]   run the proxy"},
		"exec":     {cmdExec, "exec [--account SEL] -- CMD [ARGS]            run CMD through a private proxy"},
		"env":      {cmdEnv, "env                                          print exports for the running proxy"},
		"login":    {cmdLogin, "login [--device] [--no-browser] [--label L]  add a ChatGPT account by signing in"},
		"import":   {cmdImport, "import codex [--file PATH] [--label L]      add the ChatGPT login of Codex CLI"},
		"add-key":  {cmdAddKey, "add-key [--label L] [--base-url URL]        add an API key (read from stdin)"},
		"list":     {cmdList, "list [--json]                                list accounts"},
		"status":   {cmdList, "status [--json]                              same as list"},
		"remove":   {cmdRemove, "remove <index>                               remove an account and its secrets"},
		"enable":   {cmdEnable, "enable <index>                               enable an account"},
		"disable":  {cmdDisable, "disable <index>                              disable an account"},
		"switch":   {cmdSwitch, "switch <index>                               pin every proxy to one account"},
		"unpin":    {cmdUnpin, "unpin                                        rotate again"},
		"rotation": {cmdRotation, "rotation status [--json]                     what each account is doing, and who is next"},
		"version":  {cmdVersion, "version                                      version, commit, Go version"},
		"help":     {cmdHelp, "help                                         this text"},

		// Diagnostics: they explain and repair the pool.
		"forecast":       {cmdForecast, "forecast [--json]                            who can serve now, who waits and why, at what risk"},
		"report":         {cmdReport, "report [--json]                              forecast, store health and usage over 1h, 24h, 7d"},
		"doctor":         {cmdDoctor, "doctor [--json]                              check the home, store, secrets, tokens, pin, proxy"},
		"fix":            {cmdFix, "fix [--dry-run] [--prune-secrets] [--json]   repair what doctor finds (--dry-run: list only)"},
		"verify-flagged": {cmdVerifyFlagged, "verify-flagged [--dry-run] [--json]          re-check flagged accounts, restore those that work"},
	}
}

func (a *app) usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: rotor <command> [options]")
	fmt.Fprintln(w, "")
	fmt.Fprintln(w, "Commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintln(w, "  rotor "+commands[n].summary)
	}
	fmt.Fprintln(w, "")
	fmt.Fprintln(w, "Accounts are chosen by their index in \"rotor list\" (--account also takes an id, label or email).")
}

// run executes one command line and returns the exit status.
func (a *app) run(args []string) int {
	if len(args) == 0 {
		a.usage(a.stderr)
		return 1
	}
	name := args[0]
	if name == "-h" || name == "--help" {
		name = "help"
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(a.stderr, "Unknown command: %s\n\n", name)
		a.usage(a.stderr)
		return 1
	}
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

// flags returns a flag set for a command that reports errors on stderr.
func (a *app) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("rotor "+name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	return fs
}

// parse parses args, allowing flags after positional arguments
// ("rotor switch 2 --json" as well as "rotor switch --json 2").
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
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
// command that only reads them needs.
func (a *app) runtime(st *accounts.Store, pool *accounts.Pool) (*rotation.Selector, error) {
	rt := rotation.NewRuntime(st.Dir(), rotation.SystemClock{})
	sel := rotation.NewSelector(rt, rotation.SystemClock{}, uint64(time.Now().UnixNano()))
	sel.SetPool(pool)
	if err := rt.Sync(nil); err != nil {
		if !errors.Is(err, rotation.ErrDamagedState) {
			return nil, err
		}
		fmt.Fprintf(a.stderr, "rotor: warning: %v (\"rotor fix\" rewrites it)\n", err)
	}
	return sel, nil
}

// warnExposedSecrets writes one warning line when secrets.json in dir can
// be read by other users: the keys in it are then theirs too.
func (a *app) warnExposedSecrets(dir string) {
	if mode, ok := secrets.Exposed(dir); ok {
		path := filepath.Join(dir, secrets.FileName)
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

// printJSON writes v as one pretty-printed JSON object.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func cmdVersion(a *app, args []string) error {
	goVersion := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		if commit == "" {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					commit = s.Value
				}
			}
		}
	}
	fmt.Fprintf(a.stdout, "rotor %s (commit %s, %s)\n", version, orDash(commit), goVersion)
	return nil
}

func cmdHelp(a *app, args []string) error {
	a.usage(a.stdout)
	return nil
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
