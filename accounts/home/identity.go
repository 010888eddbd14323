package home

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// identityKeyLen is the identity key's length in bytes.
const identityKeyLen = 32

// IdentityKey returns the home's identity key, the secret rotor derives
// the client identity each account is shown from (docs/codex.md), making it
// on first use. Every process on the home gets the same key, so an
// account is always shown the same identity. A file that holds no key is
// an error and is never overwritten.
func IdentityKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, IdentityKeyFile)
	if k, err := readIdentityKey(path); !errors.Is(err, os.ErrNotExist) {
		return k, err
	}
	l, err := LockFile(filepath.Join(dir, IdentityKeyLock), false, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer l.Unlock()
	if k, err := readIdentityKey(path); !errors.Is(err, os.ErrNotExist) {
		return k, err // made by another process meanwhile
	}
	k := make([]byte, identityKeyLen)
	rand.Read(k)
	if err := WriteFile(path, []byte(hex.EncodeToString(k)+"\n")); err != nil {
		return nil, err
	}
	return k, nil
}

func readIdentityKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(k) != identityKeyLen {
		return nil, fmt.Errorf("%s does not hold an identity key (%d hex-encoded bytes); move it aside to make a new one", path, identityKeyLen)
	}
	return k, nil
}
