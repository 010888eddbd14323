//go:build windows

package secrets

import (
	"os"

	"golang.org/x/sys/windows"
)

// lockFile takes a blocking LockFileEx lock on the first byte of f, the
// Windows counterpart of flock: released when f is closed or the process dies.
func lockFile(f *os.File, exclusive bool) error {
	var flags uint32
	if exclusive {
		flags = windows.LOCKFILE_EXCLUSIVE_LOCK
	}
	return windows.LockFileEx(windows.Handle(f.Fd()), flags, 0, 1, 0, new(windows.Overlapped))
}

// syncDir is a no-op: Windows cannot fsync a directory, and its rename
// (MoveFileEx with MOVEFILE_REPLACE_EXISTING) is already journaled by NTFS.
func syncDir(string) error { return nil }
