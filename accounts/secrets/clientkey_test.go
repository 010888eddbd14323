package secrets

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rotorproxy/rotor/accounts/home"
)

// exerciseClientKey checks what both backends promise of the stable
// client key: created once and then the same for every Store on the home
// (even when many ask first at once), 256-bit, replaced by a rotation,
// whose stamp then changes.
func exerciseClientKey(t *testing.T, open func() Store) string {
	t.Helper()
	keys := make([]string, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			k, err := open().ClientKey()
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		})
	}
	wg.Wait()
	for _, k := range keys {
		if k != keys[0] {
			t.Fatalf("concurrent first uses made two keys: %q, %q", keys[0], k)
		}
	}
	if len(keys[0]) != 64 || strings.Trim(keys[0], "0123456789abcdef") != "" {
		t.Fatalf("key %q is not 256 bits in hex", keys[0])
	}
	st := open()
	before := st.ClientKeyStamp()
	if !before.Exists {
		t.Fatal("no stamp after the key was made")
	}
	rotated, err := st.RotateClientKey()
	if err != nil || rotated == keys[0] || len(rotated) != 64 {
		t.Fatalf("rotate: %q, %v", rotated, err)
	}
	if again, err := open().ClientKey(); err != nil || again != rotated {
		t.Fatalf("after rotation another Store reads %q, %v", again, err)
	}
	if st.ClientKeyStamp() == before {
		t.Error("the stamp did not change with the rotation")
	}
	return rotated
}

func TestClientKeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	open := func() Store { st, _ := Open(dir, "file", nil); return st }
	key := exerciseClientKey(t, open)
	path := filepath.Join(dir, home.ClientKeyFile)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, %v", path, fi, err)
	}
	if b, _ := os.ReadFile(path); string(b) != key+"\n" {
		t.Errorf("client-key holds %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, home.SecretsFile)); !os.IsNotExist(err) {
		t.Error("the client key touched secrets.json")
	}
	// A file that holds no key is reported without its content.
	os.WriteFile(path, []byte("leaked-but-short\n"), 0o600)
	_, err = open().ClientKey()
	if err == nil || strings.Contains(err.Error(), "leaked") || !strings.Contains(err.Error(), path) {
		t.Errorf("a short key file: %v", err)
	}
}

func TestClientKeyKeyring(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	kr := newMemKeyring()
	open := func() Store { st, _ := Open(dir, "keyring", nil, WithKeyring(kr)); return st }
	key := exerciseClientKey(t, open)
	if kr.items["rotor/_client_key"] != key {
		t.Errorf("keyring item = %q, want the key", kr.items["rotor/_client_key"])
	}
	if ids, _ := open().IDs(); len(ids) != 0 {
		t.Errorf("the key shows up as an account: %v", ids)
	}
	mark, err := os.ReadFile(filepath.Join(dir, home.ClientKeyMark))
	if err != nil || strings.Contains(string(mark), key) {
		t.Errorf("mark file %q, %v", mark, err)
	}
	if _, err := os.Stat(filepath.Join(dir, home.ClientKeyFile)); !os.IsNotExist(err) {
		t.Error("the keyring backend wrote the key to a file")
	}
}
