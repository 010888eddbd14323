//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package secrets

import (
	"errors"
	"os"
	"syscall"
)

// lockFile takes a blocking flock on f, retrying when a signal interrupts
// the wait (Go's runtime signals would otherwise surface as EINTR).
func lockFile(f *os.File, exclusive bool) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// syncDir fsyncs a directory so a rename inside it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
