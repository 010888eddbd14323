package accounts

import (
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	rerr "github.com/rotorproxy/rotor/errors"
)

// HomeDir resolves the rotor home directory: ROTOR_HOME, else
// $XDG_CONFIG_HOME/rotor, else ~/.config/rotor.
func HomeDir(getenv func(string) string) (string, error) {
	if d := getenv("ROTOR_HOME"); d != "" {
		return filepath.Abs(d)
	}
	if x := getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "rotor"), nil
	}
	h := UserHome(getenv)
	if h == "" {
		return "", rerr.Validation("ROTOR_HOME", "cannot find a home directory; set ROTOR_HOME")
	}
	return filepath.Join(h, ".config", "rotor"), nil
}

// UserHome is the user's home directory as the environment getenv reads
// names it (HOME, or USERPROFILE on Windows), so a command run in-process
// with its own environment never falls back to this process's; "" when
// there is none.
func UserHome(getenv func(string) string) string {
	if h := getenv("HOME"); h != "" {
		return h
	}
	if runtime.GOOS == "windows" {
		return getenv("USERPROFILE")
	}
	return ""
}

// ParseIndex reads a 1-based account index as `rotor list` shows it. Any value
// that is not a whole number naming an account is reported as
// "Invalid index: <value>".
func (p *Pool) ParseIndex(arg string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(arg))
	if err != nil || n < 1 || n > len(p.Accounts) {
		return 0, rerr.Validation("index", "Invalid index: "+arg)
	}
	return n, nil
}

// Resolve finds the account a selector names: a 1-based index, an account
// id, a label or an email (case-insensitive for labels and emails). A label
// or email shared by several accounts is ambiguous and reported as such.
func (p *Pool) Resolve(sel string) (int, error) {
	sel = strings.TrimSpace(sel)
	if n, err := strconv.Atoi(sel); err == nil {
		if n < 1 || n > len(p.Accounts) {
			return 0, rerr.Validation("account", "Invalid index: "+sel)
		}
		return n, nil
	}
	if i := p.IndexOf(sel); i > 0 {
		return i, nil
	}
	found := 0
	for i := range p.Accounts {
		a := &p.Accounts[i]
		if strings.EqualFold(a.Label, sel) || (a.Email != "" && strings.EqualFold(a.Email, sel)) {
			if found != 0 {
				return 0, rerr.Validation("account", "Ambiguous account: "+sel+" matches several accounts; use the index or id")
			}
			found = i + 1
		}
	}
	if found == 0 {
		return 0, rerr.NotFound("No account matches: " + sel)
	}
	return found, nil
}
