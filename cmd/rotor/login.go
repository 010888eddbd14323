package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/oauth"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
)

func cmdLogin(a *app, args []string) error {
	fs := a.flags()
	device := fs.Bool("device", false, "sign in with a device code (for machines without a browser)")
	noBrowser := fs.Bool("no-browser", false, "print the sign-in URL and read the redirect URL you paste back")
	label := fs.String("label", "", "name the account `L` (default its email)")
	proxy := fs.String("proxy", "", proxyFlagHelp)
	if pos, err := a.parse(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return rerr.Validation("args", "Unexpected argument: "+pos[0]+". Usage: rotor "+commands["login"].usage)
	}
	proxyURL, err := a.proxyArg(*proxy)
	if err != nil {
		return err
	}
	st, sec, err := a.storeAndSecrets()
	if err != nil {
		return err
	}
	if _, err := st.Load(); err != nil {
		return err // fail before the user signs in, not after
	}
	client := a.signInClient(proxyURL)
	ctx, cancel := context.WithTimeout(context.Background(), oauth.DefaultTimeout)
	defer cancel()
	var t oauth.Tokens
	// Another account signs in where the sign-in page asks for one; a
	// device code is entered on a page of whatever account the browser is
	// signed in to, so only signing out there changes the account.
	another := "To add another account, run \"rotor login\" again and sign in with that account when the page asks " +
		"(if it does not ask, sign out of ChatGPT in the browser first, or open the URL in a private window)."
	switch {
	case *device:
		another = "A device code signs in the account the browser is signed in to: to add another, sign out of ChatGPT " +
			"in the browser (or use a private window), sign in with that account, and run \"rotor login --device\" again."
		t, err = client.LoginDevice(ctx, a.stderr)
	case *noBrowser:
		t, err = client.LoginPaste(ctx, a.stdin, a.stderr)
	default:
		addr := a.getenv("ROTOR_LOGIN_ADDR") // tests listen elsewhere than 1455
		if addr == "" {
			addr = fmt.Sprintf("127.0.0.1:%d", oauth.CallbackPort)
		}
		t, err = client.LoginCallback(ctx, addr, a.openBrowser, a.stderr)
	}
	if err != nil {
		return err
	}
	return a.saveLogin(st, sec, t, *label, proxyURL, another)
}

// saveLogin adds or updates the account a sign-in produced, with its own
// proxy when proxyURL is not "", and names it on stdout: a login of an
// account already in the pool says so, with another (how to add a
// different one), since the user meant to add one. Every login ends with
// the pool's size and the next step.
func (a *app) saveLogin(st *accounts.Store, sec secrets.Store, t oauth.Tokens, label, proxyURL, another string) error {
	id := t.Identity()
	if id.ChatGPTAccountID == "" {
		return rerr.Validation("token", "the tokens carry no ChatGPT account id; was this a ChatGPT (Codex) sign-in?")
	}
	now := a.now()
	acct, idx, created, err := accounts.SaveChatGPT(st, sec, id, oauth.SecretFrom(t, now), label, now, nil)
	if err != nil {
		return err
	}
	if created {
		fmt.Fprintf(a.stdout, "Added ChatGPT account %d (%s, plan %s).\n", idx, orDash(acct.Email), orDash(acct.PlanType))
	} else {
		name := acct.Email
		if name == "" {
			name = acct.Label
		}
		fmt.Fprintf(a.stdout, "Already account %d, %s; its tokens were renewed. %s\n", idx, name, another)
	}
	if err := a.giveProxy(st, sec, acct.ID, proxyURL); err != nil {
		return err
	}
	p, err := st.Load()
	if err != nil {
		return err
	}
	n := "1 account"
	if len(p.Accounts) != 1 {
		n = fmt.Sprintf("%d accounts", len(p.Accounts))
	}
	fmt.Fprintf(a.stdout, "The pool has %s (rotor list). Next: start the proxy with \"rotor serve\" "+
		"(or \"rotor service install\" to run it at every login), then \"rotor codex link\" to point Codex at it; "+
		"\"rotor login\" again adds another account.\n", n)
	return nil
}

// openBrowser asks the desktop to open u; it fails on machines without one,
// and the caller then prints the URL. The opener is found on, and runs
// with, this run's environment.
func (a *app) openBrowser(u string) error {
	var name string
	var args []string
	switch runtime.GOOS {
	case "darwin":
		name, args = "open", []string{u}
	case "windows":
		name, args = "rundll32", []string{"url.dll,FileProtocolHandler", u}
	default:
		name, args = "xdg-open", []string{u}
	}
	path, err := a.lookPath(name)
	if err != nil {
		return err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = a.environ()
	if err := cmd.Start(); err != nil {
		return err
	}
	go cmd.Wait()
	return nil
}

// lookPath finds an executable on this run's PATH, which is not this
// process's when the command runs in-process.
func (a *app) lookPath(name string) (string, error) {
	if runtime.GOOS == "windows" {
		return exec.LookPath(name) // PATHEXT rules; Windows runs the binary
	}
	for _, dir := range filepath.SplitList(a.getenv("PATH")) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH", name)
}

// newRefresher wires token refresh on the home dir, for serve and for the
// diagnostics alike. flag, when not nil, flags an account whose refresh
// hard-fails (serve); the checkup passes nil, because it flags and lists
// that change itself.
func newRefresher(a *app, dir string, sec secrets.Store, flag func(id, reason string) error) *oauth.Refresher {
	return &oauth.Refresher{
		Client:   oauth.NewClient(a.getenv("ROTOR_AUTH_BASE_URL")),
		EnvProxy: a.envProxy(),
		Secrets:  sec,
		Dir:      dir,
		LinkError: func(acct accounts.Account, err error) {
			fmt.Fprintf(a.stderr, "rotor: warning: account %s: its linked Codex CLI login %s: %v\n", acct.Label, acct.CodexAuthFile, err)
		},
		Flag:  flag,
		Clock: a.clockOrSystem(),
	}
}
