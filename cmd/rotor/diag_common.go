package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/checkup"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/rotation"
)

// noArgs parses args and refuses positional arguments, naming the usage.
func (a *app) noArgs(fs *flag.FlagSet, args []string) error {
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return rerr.Validation("args", "Unexpected argument: "+pos[0]+". Usage: rotor "+commands[a.name].usage)
	}
	return nil
}

// checkup wires a checkup.Checkup to the home dir and this run's
// environment. It does not open the account store: the checkup does that
// only to write (see package checkup). A secrets backend that fails to
// open is not an error here: doctor reports it.
func (a *app) checkup(dir string) *checkup.Checkup {
	mode := a.getenv("ROTOR_SECRETS")
	sec, secErr := secrets.Open(dir, mode, a.stderr)
	adapters := a.adapters()
	d := checkup.Deps{
		Dir:         dir,
		Secrets:     sec,
		SecretsErr:  secErr,
		SecretsMode: mode,
		Runtime:     rotation.NewRuntime(dir, a.clockOrSystem()),
		HTTP:        a.client(),
		Adapters:    func(k accounts.Kind) checkup.Adapter { return adapters.For(k) },
		Clock:       a.clockOrSystem(),
	}
	if sec != nil {
		d.Refresher = newRefresher(a, dir, sec, nil)
	}
	return checkup.New(d)
}

// diagExit1 makes a command exit 1 after it printed its own report.
var diagExit1 = &exitError{code: 1}

// diagPlural is "1 thing" or "n things".
func diagPlural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// diagCount is a token or request count as people read it: 950, 12.3k, 4.5M.
func diagCount(n int64) string {
	switch {
	case n < 10_000:
		return fmt.Sprint(n)
	case n < 1_000_000:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/1e3), ".0") + "k"
	case n < 1_000_000_000:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/1e6), ".0") + "M"
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/1e9), ".0") + "G"
}
