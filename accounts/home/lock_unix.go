//go:build unix

package home

import (
	"errors"
	"os"
	"syscall"
)

// tryLock takes a flock on f without waiting: errBusy when it is held.
// A signal interrupting the call is retried (Go's runtime signals would
// otherwise surface as EINTR).
func tryLock(f *os.File, shared bool) error {
	how := syscall.LOCK_EX
	if shared {
		how = syscall.LOCK_SH
	}
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return errBusy
		}
		return err
	}
}

// syncDir fsyncs a directory so a rename inside it is durable. Some
// filesystems refuse fsync on a directory; the rename is done either way.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}
