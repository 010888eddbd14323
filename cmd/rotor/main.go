// Command rotor keeps a pool of OpenAI accounts and runs a loopback proxy
// that rotates between them. Run "rotor help" for the commands.
package main

import (
	"net/http"
	"os"

	"golang.org/x/term"

	"github.com/rotorproxy/rotor/accounts/clock"
)

func main() {
	in := int(os.Stdin.Fd())
	a := &app{
		stdin:      os.Stdin,
		stdout:     os.Stdout,
		stderr:     os.Stderr,
		getenv:     os.Getenv,
		environ:    os.Environ,
		clock:      clock.System{},
		httpClient: &http.Client{},
		stdinTTY:   term.IsTerminal(in),
		stdoutTTY:  term.IsTerminal(int(os.Stdout.Fd())),
		readHidden: func() (string, error) {
			b, err := term.ReadPassword(in)
			return string(b), err
		},
	}
	os.Exit(a.run(os.Args[1:]))
}
