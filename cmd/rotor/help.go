package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"strings"
	"text/tabwriter"
)

// command is one rotor command: what runs it and what its help says.
type command struct {
	run     func(a *app, args []string) error
	group   string // heading it is listed under in "rotor help"
	usage   string // the usage line after "rotor "
	short   string // one sentence, for the command list and its help
	example string // shell lines shown under "Example:"
}

// Command groups, in the order "rotor help" shows them.
var groups = []string{"Proxy", "Accounts", "Diagnostics", "Other"}

// commands is the CLI's surface (docs/commands.md).
var commands map[string]command

func init() {
	commands = map[string]command{}
	for _, group := range []map[string]command{proxyCommands(), accountCommands(), diagnosticCommands()} {
		maps.Copy(commands, group)
	}
	// Here, not in a group: its help lists every command.
	commands["help"] = command{cmdHelp, "Other", "help [command]",
		"Show the commands, or one command's flags and an example.",
		"rotor help serve"}
}

// proxyCommands are the commands that run or point clients at the proxy.
func proxyCommands() map[string]command {
	return map[string]command{
		"serve": {cmdServe, "Proxy", "serve [--host H] [--port P] [--account SEL] [--stable-key]",
			"Run the proxy on loopback and print its base URL.",
			"rotor serve --port 8787\neval \"$(rotor env)\"   # in another shell: the proxy's base URL and key"},
		"key": {cmdKey, "Proxy", "key [rotate]",
			"Print the stable client key that the service and serve --stable-key accept (made on first use); rotate replaces it.",
			"rotor key            # paste into your editor's API key setting\nrotor key rotate     # running serves accept only the new key within 1s"},
		"exec": {cmdExec, "Proxy", "exec [--account SEL] -- CMD [ARGS]",
			"Run CMD with OPENAI_BASE_URL and OPENAI_API_KEY set to a private proxy.",
			"rotor exec -- codex \"explain this repo\""},
		"env": {cmdEnv, "Proxy", "env",
			"Print the exports that point a client at the running proxy.",
			"eval \"$(rotor env)\""},
		"dashboard": {cmdDashboard, "Proxy", "dashboard [--open]",
			"Print a one-time login link to the running proxy's dashboard (the pool, live).",
			"rotor dashboard --open"},
		"service": {cmdService, "Proxy", "service install|uninstall|status [--json]",
			"Run rotor serve --stable-key at login (systemd user unit, launchd agent or logon task), restarted after a crash.",
			"rotor service install\nrotor service status\nrotor key             # the key your editors keep"},
		"alias": {cmdAlias, "Proxy", "alias set FROM TO [--kind K] | list [--json] | rm FROM",
			"Send requests for model FROM as model TO (on accounts of one kind with --kind); running serves follow within 1s.",
			"rotor alias set gpt-4o gpt-5 --kind chatgpt\nrotor alias list\nrotor alias rm gpt-4o"},
		"codex": {cmdCodex, "Proxy", "codex link [--url URL] | unlink",
			"Point Codex CLI, signed in with ChatGPT as it is, at rotor: two settings in its config.toml (unlink removes them).",
			"rotor service install   # or rotor serve, kept running\nrotor codex link        # then run codex as always\nrotor codex unlink"},
	}
}

// accountCommands are the commands that manage the pool.
func accountCommands() map[string]command {
	return map[string]command{
		"login": {cmdLogin, "Accounts", "login [--device] [--no-browser] [--label L] [--proxy URL]",
			"Add a ChatGPT account by signing in; the page asks which account, so run it once per account.",
			"rotor login --label personal\nrotor login          # again, signing in with the next account"},
		"import": {cmdImport, "Accounts", "import codex [--file PATH] [--label L] [--unlink] [--proxy URL]",
			"Add the ChatGPT account Codex CLI is logged in with, linked to its auth.json so both share one refresh.",
			"rotor import codex"},
		"add-key": {cmdAddKey, "Accounts", "add-key [--label L] [--base-url URL] [--update] [--proxy URL]",
			"Add an OpenAI API key, read from stdin or a prompt that does not echo.",
			"printf '%s' \"$OPENAI_API_KEY\" | rotor add-key --label work"},
		"list": {cmdList, "Accounts", "list [--json]",
			"List the accounts with their index, state and pin.",
			"rotor list"},
		"status": {cmdList, "Accounts", "status [--json]",
			"Same as list.",
			"rotor status --json"},
		"remove": {cmdRemove, "Accounts", "remove <index>",
			"Remove an account and its secrets.",
			"rotor remove 2"},
		"enable": {cmdEnable, "Accounts", "enable <index>",
			"Let rotor use an account again.",
			"rotor enable 2"},
		"disable": {cmdDisable, "Accounts", "disable <index>",
			"Keep an account in the pool but never use it.",
			"rotor disable 2"},
		"unlink": {cmdUnlink, "Accounts", "unlink <index>",
			"Stop sharing refreshes with the Codex CLI auth.json the account was imported from.",
			"rotor unlink 1"},
		"set": {cmdSet, "Accounts", "set <index> --proxy URL | --no-proxy",
			"Send one account's requests, sign-in and refresh through its own proxy, which wins over HTTPS_PROXY.",
			"ROTOR_PROXY_PASSWORD=... rotor set 2 --proxy http://me@proxy.corp:3128\nrotor set 2 --no-proxy"},
		"switch": {cmdSwitch, "Accounts", "switch <index>",
			"Pin every proxy on this home to one account, until unpin.",
			"rotor switch 2"},
		"unpin": {cmdUnpin, "Accounts", "unpin",
			"Clear the pin: rotate between accounts again.",
			"rotor unpin"},
	}
}

// diagnosticCommands explain and repair the pool, and say what rotor is (Other).
func diagnosticCommands() map[string]command {
	return map[string]command{
		"rotation": {cmdRotation, "Diagnostics", "rotation status [--json]",
			"Show what each account is doing, and who is picked next and why.",
			"rotor rotation status"},
		"forecast": {cmdForecast, "Diagnostics", "forecast [--json]",
			"Show who can serve now, who waits and why, and at what risk.",
			"rotor forecast"},
		"report": {cmdReport, "Diagnostics", "report [--json]",
			"Show the forecast, store health and usage over 1 h, 24 h, 7 d.",
			"rotor report --json"},
		"doctor": {cmdDoctor, "Diagnostics", "doctor [--json]",
			"Check the home, store, secrets, tokens, pin and proxy; exit 1 on errors.",
			"rotor doctor"},
		"fix": {cmdFix, "Diagnostics", "fix [--dry-run] [--prune-secrets] [--json]",
			"Repair what doctor finds, listing every change; never deletes a secret.",
			"rotor fix --dry-run\nrotor fix"},
		"verify-flagged": {cmdVerifyFlagged, "Diagnostics", "verify-flagged [--dry-run] [--json]",
			"Re-check flagged accounts and restore those that work.",
			"rotor verify-flagged"},
		"version": {cmdVersion, "Other", "version",
			"Print rotor's version, commit and Go version.",
			"rotor version"},
	}
}

// synopsis is the usage line without its flags: "import codex",
// "switch <index>". The flags are in the command's own help.
func (c command) synopsis() string {
	s := c.usage
	for {
		i := strings.Index(s, " [--")
		if i < 0 {
			return s
		}
		j := strings.IndexByte(s[i:], ']')
		s = s[:i] + s[i+j+1:]
	}
}

// usage writes the command list: what "rotor help" shows.
func (a *app) usage(w io.Writer) {
	fmt.Fprintln(w, "rotor keeps a pool of OpenAI accounts and serves them as one, on loopback.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: rotor <command> [flags]")
	width := 0
	for _, c := range commands {
		width = max(width, len(c.synopsis()))
	}
	for _, g := range groups {
		fmt.Fprintf(w, "\n%s:\n", g)
		for _, n := range sortedNames() {
			if c := commands[n]; c.group == g {
				fmt.Fprintf(w, "  %-*s   %s\n", width, c.synopsis(), c.short)
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Accounts are chosen by their index in \"rotor list\" (--account also takes an id, label or email).")
	fmt.Fprintln(w, "Run \"rotor <command> --help\" for a command's flags and an example.")
}

// commandHelp writes one command's help: usage line, sentence, every flag
// with its default, and an example. fs is nil for commands without flags.
func commandHelp(w io.Writer, name string, fs *flag.FlagSet) {
	c := commands[name]
	fmt.Fprintf(w, "Usage: rotor %s\n\n%s\n", c.usage, c.short)
	if fs != nil {
		tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
		n := 0
		fs.VisitAll(func(f *flag.Flag) {
			if n == 0 {
				fmt.Fprintln(tw, "\nFlags:")
			}
			n++
			kind, text := flag.UnquoteUsage(f)
			if kind != "" {
				kind = " " + kind
			}
			if !strings.Contains(text, "(default") {
				text += " (default " + defaultText(f) + ")"
			}
			fmt.Fprintf(tw, "  --%s%s\t%s\n", f.Name, kind, text)
		})
		tw.Flush()
	}
	fmt.Fprintln(w, "\nExample:")
	for _, line := range strings.Split(c.example, "\n") {
		fmt.Fprintln(w, "  "+line)
	}
}

// defaultText shows a flag's default the way a person would type it.
func defaultText(f *flag.Flag) string {
	if f.DefValue == "" {
		return "none"
	}
	return f.DefValue
}

// suggest returns the command closest to a mistyped name, or "" when none
// is close enough to be what was meant.
func suggest(name string) string {
	best, bestDist := "", 3 // more than two edits away is another word
	for _, n := range sortedNames() {
		d := editDistance(strings.ToLower(name), n)
		if strings.HasPrefix(n, strings.ToLower(name)) && len(name) >= 3 {
			d = 1
		}
		if d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, with an
// adjacent transposition counted as one edit ("lsit" is one from "list").
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
