package secrets

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/rotorproxy/rotor/accounts/home"
)

// The stable client key (docs/service.md) is one key per home for serves that
// outlive their process (the login service, serve --stable-key), so an
// editor that keeps the key in its settings keeps working across restarts.
// It lives beside the account secrets: in ROTOR_HOME/client-key (0600)
// with the file backend, in the keyring item rotor/_client_key with the
// keyring backend. There, ROTOR_HOME/client-key.changed, which holds no
// secret, is rewritten whenever the key changes, so a serve notices a
// rotation with a stat instead of asking the keyring every tick.

// minClientKeyLen is the shortest stored key taken as one (docs/files.md).
const minClientKeyLen = 32

// NewClientKey returns a fresh random 256-bit client key, hex-encoded.
func NewClientKey() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand crashes the program instead)
	return hex.EncodeToString(b[:])
}

// clientKeys is the client-key half of a Store over one backend's get
// and set of the key. get must not take the store's lock: it runs under it.
type clientKeys struct {
	lock string                 // the secrets lock, which orders creation and rotation
	mark string                 // the file whose stamp changes with the key
	get  func() (string, error) // ErrNotFound when no key is stored
	set  func(key string) error
}

// ClientKey returns the stored key, creating it on first use. The second
// look, under the exclusive lock, makes concurrent first uses agree.
func (c clientKeys) ClientKey() (string, error) {
	key, err := c.get()
	if !errors.Is(err, ErrNotFound) {
		return key, err
	}
	err = withLock(c.lock, true, func() error {
		if key, err = c.get(); !errors.Is(err, ErrNotFound) {
			return err
		}
		key = NewClientKey()
		return c.set(key)
	})
	return key, err
}

// RotateClientKey stores a new random key and returns it.
func (c clientKeys) RotateClientKey() (string, error) {
	key := NewClientKey()
	return key, withLock(c.lock, true, func() error { return c.set(key) })
}

// ClientKeyStamp is the stamp of the file that changes with the key.
func (c clientKeys) ClientKeyStamp() home.Stamp { return home.StatStamp(c.mark) }

// fileClientKeys keeps the key in dir/client-key.
func fileClientKeys(dir string) clientKeys {
	path := filepath.Join(dir, home.ClientKeyFile)
	return clientKeys{
		lock: lockPath(dir),
		mark: path,
		get: func() (string, error) {
			// An atomic write renames the whole file in: no lock needed.
			b, err := os.ReadFile(path)
			if errors.Is(err, fs.ErrNotExist) {
				return "", ErrNotFound
			}
			if err != nil {
				return "", &Error{Code: CodeStorageUnreadable, Path: path,
					Message: fmt.Sprintf("client key file %s cannot be read: %v", path, err), Err: err}
			}
			return checkClientKey(strings.TrimSpace(string(b)), path)
		},
		set: func(key string) error {
			sweepTemps(dir, home.ClientKeyFile) // a crashed write's temp file holds a key
			if err := home.WriteFile(path, []byte(key+"\n")); err != nil {
				return &Error{Code: CodeStorageWrite, Path: path,
					Message: fmt.Sprintf("writing client key file %s failed: %v", path, err), Err: err}
			}
			return nil
		},
	}
}

// keyringClientKeys keeps the key in the keyring item rotor/_client_key,
// and marks each change in dir/client-key.changed.
func keyringClientKeys(dir string, s *keyringStore) clientKeys {
	mark := filepath.Join(dir, home.ClientKeyMark)
	return clientKeys{
		lock: s.lock,
		mark: mark,
		get: func() (string, error) {
			v, err := s.call("get", clientKeyUser, func() (string, error) { return s.kr.Get(Service, clientKeyUser) })
			if err != nil {
				return "", err
			}
			return checkClientKey(v, itemName(clientKeyUser))
		},
		set: func(key string) error {
			if _, err := s.call("set", clientKeyUser, func() (string, error) { return "", s.kr.Set(Service, clientKeyUser, key) }); err != nil {
				return err
			}
			// A new random generation, so the stamp changes even where the
			// file system keeps no file identity and a coarse mtime.
			note := "the stable client key is in the OS keyring; generation " + NewClientKey()[:16] + "\n"
			return home.WriteFile(mark, []byte(note))
		},
	}
}

// checkClientKey refuses a stored key too short to be one, naming where it
// is kept and never what it holds.
func checkClientKey(key, where string) (string, error) {
	if len(key) < minClientKeyLen {
		return "", &Error{Code: CodeStorageUnreadable, Path: where,
			Message: fmt.Sprintf("%s does not hold a client key (at least %d characters)", where, minClientKeyLen),
			Hint:    `run "rotor key rotate" to store a new one`}
	}
	return key, nil
}
