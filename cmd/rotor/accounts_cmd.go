package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/view"
)

func cmdAddKey(a *app, args []string) error {
	fs := a.flags()
	label := fs.String("label", "", "name the account `L`")
	base := fs.String("base-url", "", "an OpenAI-compatible base `URL` (default $ROTOR_OPENAI_BASE_URL, else https://api.openai.com/v1)")
	update := fs.Bool("update", false, "when the key is already in the pool, update that account's label and base URL")
	proxy := fs.String("proxy", "", proxyFlagHelp)
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		// Never echo the argument: it may be the key itself.
		return rerr.Validation("key", "rotor add-key takes no arguments: the key is read from stdin only. Usage: printf '%s' \"$KEY\" | rotor add-key [--label L]")
	}
	if *base != "" {
		if u, err := url.Parse(*base); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return rerr.Validation("base-url", "Invalid --base-url: "+*base+" (want http(s)://host/path)")
		}
		*base = strings.TrimRight(*base, "/")
	}
	proxyURL, err := a.proxyArg(*proxy)
	if err != nil {
		return err
	}
	key, err := a.readKey()
	if err != nil {
		return err
	}
	st, sec, err := a.storeAndSecrets()
	if err != nil {
		return err
	}
	acct, idx, created, err := accounts.AddKey(st, sec, key, accounts.KeyOptions{Label: *label, BaseURL: *base, Update: *update}, a.now())
	if err != nil {
		return err
	}
	verb := "Updated"
	if created {
		verb = "Added"
	}
	fmt.Fprintf(a.stdout, "%s API-key account %d (%s).\n", verb, idx, acct.Label)
	return a.giveProxy(st, sec, acct.ID, proxyURL)
}

// readKey reads an API key: on a terminal from a prompt that does not echo
// it, else the first line of stdin, trimmed. Keys never come from argv,
// where other users could read them.
func (a *app) readKey() (string, error) {
	var line string
	var err error
	if a.stdinTTY && a.readHidden != nil {
		fmt.Fprint(a.stderr, "Paste the API key (it is not shown): ")
		line, err = a.readHidden()
		fmt.Fprintln(a.stderr) // the newline the terminal did not echo
	} else {
		line, err = bufio.NewReader(io.LimitReader(a.stdin, 64<<10)).ReadString('\n')
		if err == io.EOF {
			err = nil // a key piped without a newline
		}
	}
	if err != nil {
		return "", rerr.Validation("key", "cannot read the API key: "+err.Error())
	}
	key := strings.TrimSpace(line)
	switch {
	case key == "" && a.stdinTTY:
		return "", rerr.Validation("key", "No API key entered; nothing was added.")
	case key == "":
		return "", rerr.Validation("key", "No API key on stdin. Usage: printf '%s' \"$KEY\" | rotor add-key [--label L] (on a terminal, rotor add-key prompts for it)")
	}
	if strings.ContainsAny(key, " \t\r\n") {
		return "", rerr.Validation("key", "The API key contains spaces; pass exactly one key")
	}
	return key, nil
}

func cmdImport(a *app, args []string) error {
	fs := a.flags()
	file := fs.String("file", "", "read the Codex login from `PATH` (default $CODEX_HOME/auth.json, else ~/.codex/auth.json)")
	label := fs.String("label", "", "name the account `L` (default its email)")
	unlink := fs.Bool("unlink", false, "do not keep the account linked to the file (rotor then never reads or writes it again)")
	proxy := fs.String("proxy", "", proxyFlagHelp)
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "codex" {
		return rerr.Validation("source", "Usage: rotor "+commands[a.name].usage)
	}
	proxyURL, err := a.proxyArg(*proxy)
	if err != nil {
		return err
	}
	path := *file
	if path == "" {
		path = accounts.CodexAuthPath(a.getenv)
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs // the link must not depend on the directory serve runs in
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		// The usual cause is a Codex that never signed in here: say what
		// to run, not the open(2) error.
		return rerr.Validation("file", "Codex CLI is not logged in: there is no "+path+". Run \"codex login\" first "+
			"(sign in with ChatGPT), then \"rotor import codex\" again; or sign in with rotor itself: \"rotor login\".")
	}
	tok, err := accounts.ReadCodexAuth(path)
	if err != nil {
		return err
	}
	id := tok.Identity()
	st, sec, err := a.storeAndSecrets()
	if err != nil {
		return err
	}
	link := path
	if *unlink {
		link = ""
	}
	acct, idx, created, err := accounts.SaveChatGPT(st, sec, id, secrets.Secret{
		AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, IDToken: tok.IDToken, ExpiresAt: id.ExpiresAt,
	}, *label, a.now(), func(acct *accounts.Account) { acct.CodexAuthFile = link })
	if err != nil {
		return err
	}
	verb := "Updated"
	if created {
		verb = "Imported"
	}
	fmt.Fprintf(a.stdout, "%s ChatGPT account %d (%s, plan %s) from %s.\n", verb, idx, orDash(acct.Email), orDash(acct.PlanType), path)
	if link != "" {
		fmt.Fprintf(a.stdout, "Linked to that file: rotor and Codex CLI share one refresh (\"rotor unlink %d\" stops it).\n", idx)
	}
	return a.giveProxy(st, sec, acct.ID, proxyURL)
}

// indexArg reads the single <index> argument of remove/enable/disable/switch.
func (a *app) indexArg(name string, args []string) (string, error) {
	// "-1" is a (bad) index, not a flag: keep it positional so the user
	// reads "Invalid index: -1" rather than a flag error.
	if len(args) == 1 && len(args[0]) > 1 && args[0][0] == '-' && strings.Trim(args[0][1:], "0123456789") == "" {
		return args[0], nil
	}
	pos, err := a.parse(a.flags(), args)
	if err != nil {
		return "", err
	}
	if len(pos) == 0 {
		return "", rerr.Validation("index", fmt.Sprintf("Missing index. Usage: rotor %s <index>", name))
	}
	if len(pos) > 1 {
		return "", rerr.Validation("index", fmt.Sprintf("Too many arguments. Usage: rotor %s <index>", name))
	}
	return pos[0], nil
}

// updateAt runs fn on the account named by the <index> argument under the
// store lock and prints done.
func (a *app) updateAt(name string, args []string, fn func(p *accounts.Pool, i int) (string, error)) error {
	arg, err := a.indexArg(name, args)
	if err != nil {
		return err
	}
	st, err := a.store()
	if err != nil {
		return err
	}
	var msg string
	_, err = st.Update(func(p *accounts.Pool) error {
		i, err := p.ParseIndex(arg)
		if err != nil {
			return err
		}
		msg, err = fn(p, i)
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(a.stdout, msg)
	return nil
}

func cmdRemove(a *app, args []string) error {
	var removed accounts.Account
	err := a.updateAt("remove", args, func(p *accounts.Pool, i int) (string, error) {
		removed = p.Remove(i)
		return fmt.Sprintf("Removed account %d (%s).", i, removed.Label), nil
	})
	if err != nil {
		return err
	}
	// After the store write: a crash in between leaves an orphaned secret,
	// which "rotor fix" removes, never an account without its secret.
	st, _ := a.store()
	sec, err := a.secrets(st.Dir())
	if err == nil {
		err = sec.Delete(removed.ID)
	}
	if err != nil {
		fmt.Fprintf(a.stderr, "warning: the account is removed but its secret could not be deleted (%v); \"rotor fix\" removes orphaned secrets\n", err)
	}
	return nil
}

func cmdEnable(a *app, args []string) error {
	return a.updateAt("enable", args, func(p *accounts.Pool, i int) (string, error) {
		p.At(i).Enabled = true
		return fmt.Sprintf("Enabled account %d (%s).", i, p.At(i).Label), nil
	})
}

func cmdDisable(a *app, args []string) error {
	return a.updateAt("disable", args, func(p *accounts.Pool, i int) (string, error) {
		p.At(i).Enabled = false
		return fmt.Sprintf("Disabled account %d (%s).", i, p.At(i).Label), nil
	})
}

func cmdUnlink(a *app, args []string) error {
	return a.updateAt("unlink", args, func(p *accounts.Pool, i int) (string, error) {
		acct := p.At(i)
		if acct.CodexAuthFile == "" {
			return fmt.Sprintf("Account %d (%s) is not linked to a Codex CLI login.", i, acct.Label), nil
		}
		file := acct.CodexAuthFile
		acct.CodexAuthFile = ""
		return fmt.Sprintf("Unlinked account %d (%s) from %s: rotor no longer reads or writes that file.", i, acct.Label, file), nil
	})
}

func cmdSwitch(a *app, args []string) error {
	return a.updateAt("switch", args, func(p *accounts.Pool, i int) (string, error) {
		p.Pin(i)
		msg := fmt.Sprintf("Pinned account %d (%s): every rotor proxy on this home uses only it until \"rotor unpin\".", i, p.At(i).Label)
		if !p.At(i).Enabled {
			msg += "\nwarning: that account is disabled; requests will fail until you enable it."
		}
		return msg, nil
	})
}

func cmdUnpin(a *app, args []string) error {
	if _, err := a.parse(a.flags(), args); err != nil {
		return err
	}
	st, err := a.store()
	if err != nil {
		return err
	}
	was := false
	_, err = st.Update(func(p *accounts.Pool) error {
		was = p.Unpin()
		return nil
	})
	if err != nil {
		return err
	}
	if was {
		fmt.Fprintln(a.stdout, "Unpinned: rotor rotates between accounts again.")
	} else {
		fmt.Fprintln(a.stdout, "Nothing was pinned; rotor rotates between accounts.")
	}
	return nil
}

// listAccount is one account in `rotor list --json` (docs/commands.md).
type listAccount struct {
	Index         int     `json:"index"`
	ID            string  `json:"id"`
	Label         string  `json:"label"`
	Kind          string  `json:"kind"`
	Email         string  `json:"email"`
	PlanType      string  `json:"plan_type"`
	Enabled       bool    `json:"enabled"`
	FlaggedReason *string `json:"flagged_reason"`
	Pinned        bool    `json:"pinned"`
	State         string  `json:"state"`
	Until         *string `json:"until"`
	// ProxyURL is the account's own proxy as stored: never its password.
	ProxyURL string `json:"proxy_url,omitempty"`
	// ResetCredits are the account's banked rate-limit reset credits, as
	// its backend last reported them; null when unknown (docs/selection.md).
	ResetCredits *int `json:"reset_credits"`
	// The whole meter (docs/selection.md): Credits (null when unknown), OnCredits
	// (a main window is full and credits are spent now), Workspace (no
	// windows: the workspace budgets), Families (other limit families
	// with the model each meters), FamilyLimits (those limited now), and
	// LimitReason (the backend's reached type of a usage limit).
	Credits           *view.Credits      `json:"credits"`
	OnCredits         bool               `json:"on_credits"`
	Workspace         bool               `json:"workspace"`
	Families          []view.Family      `json:"families"`
	FamilyLimits      []view.FamilyLimit `json:"family_limits"`
	LimitReason       *string            `json:"limit_reason"`
	WaitsForWorkspace bool               `json:"waits_for_workspace"`
}

func cmdList(a *app, args []string) error {
	fs := a.flags()
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := a.parse(fs, args); err != nil {
		return err
	}
	pool, sel, err := a.selector()
	if err != nil {
		return err
	}
	if dir, err := a.home(); err == nil {
		a.warnExposedSecrets(dir)
	}
	rows := sel.Status()
	if *asJSON {
		out := struct {
			PinnedAccountIndex *int          `json:"pinned_account_index"`
			Accounts           []listAccount `json:"accounts"`
		}{PinnedAccountIndex: view.IndexOrNil(pool.Pinned())}
		for _, r := range rows {
			la := listAccount{
				Index: r.Index, ID: r.Account.ID, Label: r.Account.Label, Kind: string(r.Account.Kind),
				Email: r.Account.Email, PlanType: r.Account.PlanType, Enabled: r.Account.Enabled,
				FlaggedReason: r.Account.FlaggedReason, Pinned: r.Pinned, State: r.State, Until: view.TimeOrNil(r.Until),
				ProxyURL: r.Account.ProxyURL, ResetCredits: resetCredits(r.Quota),
				OnCredits: r.OnCredits, Families: []view.Family{}, FamilyLimits: view.FamilyLimitsOf(r.FamilyLimits, r.Quota),
				LimitReason: stringOrNil(r.LimitReason), WaitsForWorkspace: rotation.WorkspaceLimit(r.LimitReason),
			}
			if q := view.QuotaOf(r.Quota); q != nil {
				la.Credits, la.Workspace, la.Families = q.Credits, q.Workspace, q.Families
			}
			out.Accounts = append(out.Accounts, la)
		}
		return a.exportJSON("status", out)
	}
	if len(rows) == 0 {
		fmt.Fprintln(a.stdout, "No accounts yet. Add one with \"rotor import codex\", \"rotor login\" or \"rotor add-key\".")
		return nil
	}
	pal := a.palette()
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  #\t%s\tLABEL\tKIND\tEMAIL\tPLAN\t%s\t%s\tRESETS\tCREDITS\n", pal.header("STATE"), pal.header("PRIMARY QUOTA"), pal.header("SECONDARY QUOTA"))
	now := a.now()
	for _, r := range rows {
		pin := " "
		if r.Pinned {
			pin = "*"
		}
		p, s := pal.quotaCells(r.Quota, now)
		fmt.Fprintf(tw, "%s %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", pin, r.Index, pal.state(stateText(r, now)), r.Account.Label,
			r.Account.Kind, orDash(r.Account.Email), orDash(r.Account.PlanType), p, s,
			creditsText(r.Quota), creditsCell(r.Quota))
	}
	tw.Flush()
	printMeterNotes(a.stdout, rows, now)
	if p := pool.Pinned(); p > 0 {
		fmt.Fprintf(a.stdout, "\n* pinned: every proxy uses only account %d (\"rotor unpin\" to rotate).\n", p)
	}
	return nil
}

// resetCredits are q's reset credits, nil when unknown.
func resetCredits(q *rotation.Quota) *int {
	if q == nil {
		return nil
	}
	return q.ResetCredits
}

// creditsText is the RESETS column: the banked reset credits, "-" when
// unknown.
func creditsText(q *rotation.Quota) string {
	if c := resetCredits(q); c != nil {
		return fmt.Sprint(*c)
	}
	return "-"
}

// stateText is an account's state with its reason and how long, from now,
// it lasts.
func stateText(r rotation.AccountStatus, now time.Time) string {
	s := r.State
	if r.State == rotation.SkipFlagged && r.Reason != "" {
		s += ":" + r.Reason
	}
	switch {
	case rotation.WorkspaceLimit(r.LimitReason):
		// Its Until is only a bound: a usage read lifts it.
		s += ": " + limitReasonText(r.LimitReason)
	case !r.Until.IsZero():
		s += " for " + accounts.HumanDuration(r.Until.Sub(now))
		if r.LimitReason != "" {
			s += " (" + r.LimitReason + ")"
		}
	}
	if r.OnCredits && r.State == "available" {
		s += ", on credits"
	}
	if r.Endpoint != "" {
		s += " (" + r.Endpoint + ": " + r.Error + ")"
	}
	return s
}
