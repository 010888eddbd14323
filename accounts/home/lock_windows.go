//go:build windows

package home

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// tryLock takes a LockFileEx lock on the first byte of f without waiting:
// errBusy when it is held. Windows drops it when f is closed or the
// process dies, as flock does.
func tryLock(f *os.File, shared bool) error {
	flags := uint32(windows.LOCKFILE_FAIL_IMMEDIATELY)
	if !shared {
		flags |= windows.LOCKFILE_EXCLUSIVE_LOCK
	}
	err := windows.LockFileEx(windows.Handle(f.Fd()), flags, 0, 1, 0, new(windows.Overlapped))
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) || errors.Is(err, windows.ERROR_IO_PENDING) {
		return errBusy
	}
	return err
}

// syncDir does nothing: Windows cannot fsync a directory, and NTFS
// journals the rename (MoveFileEx with MOVEFILE_REPLACE_EXISTING).
func syncDir(string) error { return nil }
