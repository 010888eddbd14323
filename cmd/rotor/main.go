// Command rotor keeps a pool of OpenAI accounts and runs a loopback proxy
// that rotates between them. Run "rotor help" for the commands.
package main

import (
	"os"
)

func main() {
	a := &app{
		stdin:  os.Stdin,
		stdout: os.Stdout,
		stderr: os.Stderr,
		getenv: os.Getenv,
	}
	os.Exit(a.run(os.Args[1:]))
}
