package home

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestEnsureDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "x", "home")
	if err := EnsureDir(dir); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, dir); m != DirMode {
		t.Errorf("new dir mode %v, want %v", m, DirMode)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := EnsureDir(dir); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, dir); m != DirMode {
		t.Errorf("loose dir mode after EnsureDir %v, want %v", m, DirMode)
	}
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := EnsureDir(file); err == nil {
		t.Error("EnsureDir of a regular file succeeded")
	}
}

func TestWriteFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	// A file someone else left readable is replaced by a private one.
	if err := os.WriteFile(path, []byte("old content that is longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "new" {
		t.Errorf("content %q, want %q", got, "new")
	}
	if m := mode(t, path); m != FileMode {
		t.Errorf("mode %v, want %v", m, FileMode)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(before, after) {
		t.Error("WriteFile rewrote the file in place; want a new file renamed over it")
	}
	if n := names(t, dir); !slices.Equal(n, []string{"state.json"}) {
		t.Errorf("files after WriteFile: %q, want only state.json (no temp file)", n)
	}

	// A failed write (the target is a directory) leaves no temp file.
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "keep"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(sub, []byte("x")); err == nil {
		t.Error("WriteFile over a non-empty directory succeeded")
	}
	if n := names(t, dir); !slices.Equal(n, []string{"state.json", "sub"}) {
		t.Errorf("files after a failed WriteFile: %q", n)
	}
}

func TestRotate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "accounts.json")
	if err := Rotate(path, 3); err != nil {
		t.Fatalf("Rotate of a missing file: %v", err)
	}
	if n := names(t, dir); len(n) != 0 {
		t.Fatalf("Rotate of a missing file created %q", n)
	}
	for _, v := range []string{"v1", "v2", "v3", "v4", "v5"} {
		if err := Rotate(path, 3); err != nil {
			t.Fatal(err)
		}
		if err := WriteFile(path, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{
		"accounts.json": "v5", "accounts.json.bak": "v4", "accounts.json.bak.1": "v3", "accounts.json.bak.2": "v2",
	} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
		if m := mode(t, filepath.Join(dir, name)); m != FileMode {
			t.Errorf("%s mode %v, want %v", name, m, FileMode)
		}
	}
	if n := names(t, dir); len(n) != 4 {
		t.Errorf("files %q, want the file and 3 backups", n)
	}
	if BackupName(path, 0) != path+".bak" || BackupName(path, 2) != path+".bak.2" {
		t.Errorf("BackupName: %s, %s", BackupName(path, 0), BackupName(path, 2))
	}
}

func TestLockFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), ".lock")
	l, err := LockFile(path, false, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m := mode(t, path); m != FileMode {
		t.Errorf("lock file mode %v, want %v", m, FileMode)
	}

	// flock conflicts between open file descriptions, so a second LockFile in
	// this process stands in for another process.
	start := time.Now()
	if l2, err := LockFile(path, false, 100*time.Millisecond); err == nil {
		l2.Unlock()
		t.Fatal("two exclusive locks held at once")
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 5*time.Second {
		t.Errorf("a contended LockFile gave up after %v, want about its 100ms timeout", d)
	}
	if l2, err := LockFile(path, true, 50*time.Millisecond); err == nil {
		l2.Unlock()
		t.Fatal("a shared lock was granted while an exclusive one was held")
	}

	// A waiter gets the lock as soon as it is released.
	got := make(chan error, 1)
	go func() {
		l2, err := LockFile(path, false, 10*time.Second)
		if err == nil {
			err = l2.Unlock()
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the released lock")
	}

	// Shared locks coexist, and keep an exclusive one out.
	s1, err := LockFile(path, true, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := LockFile(path, true, time.Second)
	if err != nil {
		t.Fatalf("second shared lock: %v", err)
	}
	if l3, err := LockFile(path, false, 50*time.Millisecond); err == nil {
		l3.Unlock()
		t.Error("an exclusive lock was granted while shared ones were held")
	}
	s1.Unlock()
	s2.Unlock()
	if err := (*Lock)(nil).Unlock(); err != nil {
		t.Errorf("Unlock of nil: %v", err)
	}

	if _, err := LockFile(filepath.Join(t.TempDir(), "missing", ".lock"), false, time.Second); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LockFile in a missing directory: %v, want ErrNotExist", err)
	}
}
