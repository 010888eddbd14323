package secrets

import (
	"errors"
	"github.com/rotorproxy/rotor/accounts/home"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestFingerprintIsKeyedAndStable(t *testing.T) {
	salt1 := []byte(strings.Repeat("a", saltLen))
	salt2 := []byte(strings.Repeat("b", saltLen))
	fp := Fingerprint(salt1, secretAPIKey)
	if !strings.HasPrefix(fp, "hmac-sha256:") || len(fp) != len("hmac-sha256:")+64 {
		t.Fatalf("fingerprint %q: want hmac-sha256: and 64 hex digits", fp)
	}
	if strings.Contains(fp, "SUPERSECRET") {
		t.Fatal("fingerprint holds the key")
	}
	if Fingerprint(salt1, secretAPIKey) != fp {
		t.Fatal("same salt and key give different fingerprints")
	}
	if Fingerprint(salt2, secretAPIKey) == fp {
		t.Fatal("another home's salt gives the same fingerprint: it is not keyed")
	}
	if Fingerprint(salt1, secretAPIKey+"x") == fp {
		t.Fatal("another key gives the same fingerprint")
	}
}

// Every Store on a home, in any number of goroutines (as separate processes
// would), must agree on one salt, and keep it across reopening.
func TestSaltOnePerHome(t *testing.T) {
	for _, backend := range []string{"file", "keyring"} {
		t.Run(backend, func(t *testing.T) {
			dir := t.TempDir()
			kr := newMemKeyring()
			open := func() Store {
				st, err := Open(dir, backend, nil, WithKeyring(kr))
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			if err := open().Set("acct0", sample()); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			seen := map[string]bool{}
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					s, err := open().Salt()
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					seen[string(s)] = true
					mu.Unlock()
				})
			}
			wg.Wait()
			if len(seen) != 1 {
				t.Fatalf("%d different salts drawn for one home", len(seen))
			}
			again, err := open().Salt()
			if err != nil || !seen[string(again)] || len(again) != saltLen {
				t.Fatalf("reopened salt differs or has the wrong size (%d bytes): %v", len(again), err)
			}
			// The salt is no account: it never shows up among the ids.
			ids, err := open().IDs()
			if err != nil || len(ids) != 1 || ids[0] != "acct0" {
				t.Fatalf("IDs() = %v, %v; want only acct0", ids, err)
			}
			if got, err := open().Get("acct0"); err != nil || !equalSecret(got, sample()) {
				t.Fatalf("drawing the salt changed acct0's secret: %v", err)
			}
		})
	}
}

func TestSaltDamagedIsReportedNotReplaced(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir, "file", nil)
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"version":1,"fingerprint_salt":"zz","secrets":{}}` + "\n"
	path := filepath.Join(dir, home.SecretsFile)
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = st.Salt()
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeStorageUnreadable || !strings.Contains(e.Message, "salt") {
		t.Fatalf("damaged salt: err = %v, want %s naming the salt", err, CodeStorageUnreadable)
	}
	if b, _ := os.ReadFile(path); string(b) != doc {
		t.Fatalf("secrets.json rewritten after a damaged salt:\n%s", b)
	}
}
