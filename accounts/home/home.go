// Package home is ROTOR_HOME on disk: the one place that writes and locks
// its files the way every rotor file must be handled: atomically (temp
// file, fsync, rename, fsync of the directory), mode 0600 in a 0700
// directory, under cross-process locks (flock on Unix, LockFileEx on
// Windows). It also keeps the serves' records (proxy.json).
//
// A reader never sees a half-written file, and a writer killed at any moment
// leaves either the old or the new content behind, never a mix. A lock dies
// with its process, so a kill -9 never leaves a stale one behind.
package home

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// DirMode and FileMode are the permissions of ROTOR_HOME and of every file
// rotor writes in it.
const (
	DirMode  os.FileMode = 0o700
	FileMode os.FileMode = 0o600
)

// EnsureDir creates dir with mode 0700 if needed and tightens the mode of an
// existing one, so secrets are never readable by other users.
func EnsureDir(dir string) error {
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if fi.Mode().Perm() != DirMode {
		return os.Chmod(dir, DirMode)
	}
	return nil
}

// TempPattern is the glob of the temp files WriteFile makes for the file
// name: a writer killed mid-write leaves one behind. TempPattern("*")
// matches them all.
func TempPattern(name string) string { return "." + name + ".tmp-*" }

// WriteFile replaces path with data atomically, with mode 0600.
func WriteFile(path string, data []byte) error { return WriteFileMode(path, data, FileMode) }

// WriteFileMode replaces path with data atomically (temp file in the same
// directory, fsync, rename, fsync of the directory), with mode perm: a
// crash leaves the old file or the new one, never a torn one.
func WriteFileMode(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, TempPattern(filepath.Base(path)))
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	return syncDir(dir)
}

// Rotate keeps n rotating backups of path: path.bak is the newest, then
// path.bak.1 … path.bak.(n-1). It copies the current file to path.bak after
// shifting the older ones; a missing path is not an error.
func Rotate(path string, n int) error {
	cur, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for i := n - 1; i >= 1; i-- {
		from := BackupName(path, i-1)
		if _, err := os.Stat(from); err == nil {
			if err := os.Rename(from, BackupName(path, i)); err != nil {
				return err
			}
		}
	}
	return WriteFile(BackupName(path, 0), cur)
}

// BackupName is the name of the i-th newest backup of path (0 = newest).
func BackupName(path string, i int) string {
	if i == 0 {
		return path + ".bak"
	}
	return fmt.Sprintf("%s.bak.%d", path, i)
}

// Lock is a held cross-process lock on a lock file.
type Lock struct{ f *os.File }

// errBusy is what tryLock returns when another holder has the lock.
var errBusy = errors.New("lock is held")

// LockFile takes an exclusive (or, with shared, a shared) lock on path,
// creating it 0600, waiting at most timeout (0: one try). The lock is per
// open file: it excludes other goroutines of this process as well as
// other processes.
func LockFile(path string, shared bool, timeout time.Duration) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for {
		err := tryLock(f, shared)
		if err == nil {
			return &Lock{f: f}, nil
		}
		if !errors.Is(err, errBusy) {
			f.Close()
			return nil, err
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("timed out after %s waiting for the lock on %s", timeout, path)
		}
		time.Sleep(wait)
		if wait < 20*time.Millisecond {
			wait *= 2
		}
	}
}

// TryLock takes an exclusive lock on an existing lock file without
// waiting; ok is false when someone holds it. It never creates the file.
func TryLock(path string) (l *Lock, ok bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, false, err
	}
	switch err := tryLock(f, false); {
	case err == nil:
		return &Lock{f: f}, true, nil
	case errors.Is(err, errBusy):
		f.Close()
		return nil, false, nil
	default:
		f.Close()
		return nil, false, err
	}
}

// Unlock releases the lock.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the descriptor drops the lock
	l.f = nil
	return err
}

// KeepAside keeps the bytes of path under a new name starting with aside
// (aside, else aside-1, aside-2, …: an earlier damaged copy is never
// overwritten) and returns that name. It hard-links, so the kept file is
// the very same file, where the filesystem allows, else it copies (0600).
func KeepAside(path, aside string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for i := range 100 {
		name := aside
		if i > 0 {
			name = fmt.Sprintf("%s-%d", aside, i)
		}
		err := os.Link(path, name)
		if err == nil {
			return name, nil
		}
		if errors.Is(err, os.ErrExist) {
			continue
		}
		fh, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, FileMode)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		_, err = fh.Write(data)
		if err == nil {
			err = fh.Sync()
		}
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(name)
			return "", err
		}
		return name, nil
	}
	return "", fmt.Errorf("too many kept copies named %s-*", filepath.Base(aside))
}
