package secrets

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/rotorproxy/rotor/accounts/home"
)

// fileVersion is the only secrets.json layout this package reads or writes.
const fileVersion = 1

// fileStore keeps every secret in dir/secrets.json:
//
//	{"version":1,"secrets":{"<id>":{...Secret}}}
//
// It caches nothing, because other rotor processes write the same file.
// Readers hold a shared flock and writers an exclusive one on
// dir/.secrets.lock for the whole read-modify-write, so concurrent writers
// never lose each other's updates; writes go to a temp file that is fsynced
// and renamed over secrets.json, so a crash leaves the old or the new file,
// never a torn one.
type fileStore struct {
	dir, path, lock string
	clientKeys
}

func newFileStore(dir string) *fileStore {
	return &fileStore{dir: dir, path: filepath.Join(dir, home.SecretsFile), lock: lockPath(dir), clientKeys: fileClientKeys(dir)}
}

func lockPath(dir string) string { return filepath.Join(dir, home.SecretsLock) }

// fileDoc keeps entries raw, so a rewrite preserves entries it did not touch
// byte for byte, including fields a newer rotor may have added.
type fileDoc struct {
	Version int                        `json:"version"`
	Salt    string                     `json:"fingerprint_salt,omitempty"`
	Secrets map[string]json.RawMessage `json:"secrets"`
}

// Backend returns "file".
func (s *fileStore) Backend() string { return BackendFile }

// Get returns the secret of id from secrets.json.
func (s *fileStore) Get(id string) (Secret, error) {
	if err := checkID(id); err != nil {
		return Secret{}, err
	}
	var sec Secret
	err := withLock(s.lock, false, func() error {
		doc, err := s.read()
		if err != nil {
			return err
		}
		raw, ok := doc.Secrets[id]
		if !ok {
			return notFoundErr(id)
		}
		if err := json.Unmarshal(raw, &sec); err != nil {
			return s.unreadable(fmt.Sprintf("the entry of account %q", id), err)
		}
		return nil
	})
	if err != nil {
		return Secret{}, err
	}
	return sec, nil
}

// Set replaces the secret of id in secrets.json.
func (s *fileStore) Set(id string, sec Secret) error {
	if err := checkID(id); err != nil {
		return err
	}
	raw, err := json.Marshal(sec)
	if err != nil {
		return &Error{Code: CodeStorageWrite, Message: fmt.Sprintf("encoding the secret of account %q failed", id)}
	}
	return withLock(s.lock, true, func() error {
		doc, err := s.read()
		if err != nil {
			return err
		}
		doc.Secrets[id] = raw
		return s.write(doc)
	})
}

// Delete removes the secret of id from secrets.json; the file is not
// rewritten when id has none.
func (s *fileStore) Delete(id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	return withLock(s.lock, true, func() error {
		doc, err := s.read()
		if err != nil {
			return err
		}
		if _, ok := doc.Secrets[id]; !ok {
			return nil
		}
		delete(doc.Secrets, id)
		return s.write(doc)
	})
}

// Salt returns the fingerprint salt kept in secrets.json, adding one when
// the file has none. It is called rarely (add-key, doctor, fix), so it
// simply takes the exclusive lock.
func (s *fileStore) Salt() ([]byte, error) {
	var salt []byte
	err := withLock(s.lock, true, func() error {
		doc, err := s.read()
		if err != nil {
			return err
		}
		if doc.Salt == "" {
			if doc.Salt, err = newSalt(); err != nil {
				return err
			}
			if err := s.write(doc); err != nil {
				return err
			}
		}
		salt, err = decodeSalt(doc.Salt, s.path)
		return err
	})
	return salt, err
}

// IDs lists the ids present in secrets.json, sorted.
func (s *fileStore) IDs() ([]string, error) {
	var ids []string
	err := withLock(s.lock, false, func() error {
		doc, err := s.read()
		if err != nil {
			return err
		}
		ids = make([]string, 0, len(doc.Secrets))
		for id := range doc.Secrets {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		return nil
	})
	return ids, err
}

// read loads secrets.json; a missing file is an empty store. A file that
// exists but cannot be read, parsed, or is of another version is an error,
// and since every writer reads first, such a file is never overwritten.
func (s *fileStore) read() (*fileDoc, error) {
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return &fileDoc{Version: fileVersion, Secrets: map[string]json.RawMessage{}}, nil
	}
	if err != nil {
		return nil, &Error{
			Code:    CodeStorageUnreadable,
			Path:    s.path,
			Message: fmt.Sprintf("secrets file %s cannot be read: %v", s.path, err),
			Hint:    "check its owner and permissions (it should be 0600 and yours)",
			Err:     err,
		}
	}
	var doc fileDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, s.unreadable("it", err)
	}
	if doc.Version != fileVersion {
		return nil, &Error{
			Code:    CodeStorageUnreadable,
			Path:    s.path,
			Message: fmt.Sprintf("secrets file %s has version %d, this rotor reads version %d; it was left untouched", s.path, doc.Version, fileVersion),
			Hint:    "use the rotor that wrote it, or move the file away and log in again",
		}
	}
	if doc.Secrets == nil {
		doc.Secrets = map[string]json.RawMessage{}
	}
	return &doc, nil
}

// unreadable reports a parse failure in secrets.json without the JSON
// error's text, which can quote bytes of a secret.
func (s *fileStore) unreadable(what string, err error) error {
	return &Error{
		Code:    CodeStorageUnreadable,
		Path:    s.path,
		Message: fmt.Sprintf("secrets file %s cannot be parsed: %s has %s; it was left untouched", s.path, what, jsonErrWhere(err)),
		Hint:    "repair it, or move it away and log in to the accounts again",
		Err:     errors.New("invalid JSON"),
	}
}

// write replaces secrets.json atomically; the caller holds the exclusive lock.
func (s *fileStore) write(doc *fileDoc) (err error) {
	fail := func(step string, cause error) error {
		return &Error{
			Code:    CodeStorageWrite,
			Path:    s.path,
			Message: fmt.Sprintf("writing secrets file %s failed (%s): %v", s.path, step, cause),
			Err:     cause,
		}
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		// Only a raw entry that is not JSON can fail here, and read
		// validated them all; the cause is dropped as it may quote one.
		return fail("encode", errors.New("invalid entry"))
	}
	b = append(b, '\n')
	sweepTemps(s.dir, home.SecretsFile) // a crashed write's temp file holds secrets
	if err := home.WriteFile(s.path, b); err != nil {
		return fail("atomic write", err)
	}
	return nil
}

// sweepTemps removes the temp files of dir/name left by a writer that
// crashed mid-write. The caller holds the exclusive lock, so no live
// writer owns one.
func sweepTemps(dir, name string) {
	matches, _ := filepath.Glob(filepath.Join(dir, home.TempPattern(name)))
	for _, m := range matches {
		os.Remove(m)
	}
}

// lockWait bounds the wait for the secrets lock: every holder is a short
// read or write, so waiting longer means something is wrong.
const lockWait = 30 * time.Second

// withLock runs fn holding a shared or exclusive lock on path (home's
// cross-process lock, which dies with its process).
func withLock(path string, exclusive bool, fn func() error) error {
	l, err := home.LockFile(path, !exclusive, lockWait)
	if err != nil {
		return &Error{Code: CodeStorageWrite, Path: path, Message: fmt.Sprintf("cannot lock %s: %v", path, err), Err: err}
	}
	defer l.Unlock()
	return fn()
}

// Exposed reports whether dir's secrets.json exists with a mode that lets
// other users read or write it, and that mode. The keyring backend has no
// such file; then it reports false.
func Exposed(dir string) (os.FileMode, bool) {
	fi, err := os.Stat(filepath.Join(dir, home.SecretsFile))
	if err != nil {
		return 0, false
	}
	return fi.Mode().Perm(), fi.Mode().Perm()&0o077 != 0
}
