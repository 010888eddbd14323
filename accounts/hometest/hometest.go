// Package hometest prepares ROTOR_HOME directories for tests: accounts
// written through the real store, their secrets through the real file
// backend, and a snapshot of every file to tell what a command changed.
// Only tests import it.
package hometest

import (
	"io"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/accounts/secrets"
)

// Home is a ROTOR_HOME (0700, in the test's temporary directory) with its
// secrets in the file backend.
type Home struct {
	t       testing.TB
	Dir     string
	Secrets secrets.Store
}

// New makes an empty home for t.
func New(t testing.TB) *Home {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "home")
	if err := os.Mkdir(dir, home.DirMode); err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.Open(dir, secrets.ModeFile, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return &Home{t: t, Dir: dir, Secrets: sec}
}

// Account is an account to prepare.
type Account struct {
	Kind                           accounts.Kind
	Label, Email, ChatGPTAccountID string
	Enabled                        bool
	Flag                           string
	Secret                         *secrets.Secret // nil: none stored
	// NoFingerprint stores an API key without its fingerprint, as rotor
	// did before fingerprints.
	NoFingerprint bool
}

// APIKey is an enabled API-key account with key.
func APIKey(label, key string) Account {
	return Account{Kind: accounts.KindAPIKey, Label: label, Enabled: true, Secret: &secrets.Secret{APIKey: key}}
}

// ChatGPT is an enabled ChatGPT account whose access token expires in
// expires (negative: expired).
func ChatGPT(label, email, cg, access, refresh string, expires time.Duration) Account {
	return Account{Kind: accounts.KindChatGPT, Label: label, Email: email, ChatGPTAccountID: cg, Enabled: true,
		Secret: &secrets.Secret{AccessToken: access, RefreshToken: refresh, ExpiresAt: time.Now().Add(expires).UTC()}}
}

// Write appends accts through the real store (so backups rotate as in
// use), stores their secrets and returns the pool. Ids are acct_1,
// acct_2, … in pool order.
func (h *Home) Write(accts ...Account) *accounts.Pool {
	h.t.Helper()
	salt, err := h.Secrets.Salt()
	if err != nil {
		h.t.Fatal(err)
	}
	var ids []string
	p := h.Update(func(p *accounts.Pool) {
		for _, a := range accts {
			n := accounts.Account{ID: "acct_" + strconv.Itoa(len(p.Accounts)+1), Label: a.Label, Kind: a.Kind,
				Email: a.Email, ChatGPTAccountID: a.ChatGPTAccountID, Enabled: a.Enabled, AddedAt: time.Now().UTC()}
			n.SetFlag(a.Flag)
			if a.Kind == accounts.KindAPIKey && a.Secret != nil && !a.NoFingerprint {
				n.KeyFingerprint = secrets.Fingerprint(salt, a.Secret.APIKey) // as add-key stores it
			}
			p.Accounts = append(p.Accounts, n)
			ids = append(ids, n.ID)
		}
	})
	for i, a := range accts {
		if a.Secret != nil {
			if err := h.Secrets.Set(ids[i], *a.Secret); err != nil {
				h.t.Fatal(err)
			}
		}
	}
	return p
}

// Update changes the pool through the real store and returns it.
func (h *Home) Update(fn func(p *accounts.Pool)) *accounts.Pool {
	h.t.Helper()
	st, err := accounts.Open(h.Dir)
	if err != nil {
		h.t.Fatal(err)
	}
	p, err := st.Update(func(p *accounts.Pool) error { fn(p); return nil })
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// Path is the path of the home's file name.
func (h *Home) Path(name string) string { return filepath.Join(h.Dir, name) }

// Pool parses accounts.json as it is on disk.
func (h *Home) Pool() *accounts.Pool {
	h.t.Helper()
	return PoolIn(h.t, h.Dir)
}

// PoolIn parses dir's accounts.json as it is on disk, with the store's
// own checks.
func PoolIn(t testing.TB, dir string) *accounts.Pool {
	t.Helper()
	return PoolFile(t, filepath.Join(dir, home.AccountsFile))
}

// PoolFile parses the pool file at path (accounts.json or one of its
// backups) with the store's own checks.
func PoolFile(t testing.TB, path string) *accounts.Pool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := accounts.Parse(path, data)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Secret is the stored secret of account id, if it has one.
func (h *Home) Secret(id string) (secrets.Secret, bool) {
	s, err := h.Secrets.Get(id)
	return s, err == nil
}

// WriteFile writes the home's file name with exactly mode.
func (h *Home) WriteFile(name, content string, mode os.FileMode) {
	h.t.Helper()
	if err := os.WriteFile(h.Path(name), []byte(content), mode); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Chmod(h.Path(name), mode); err != nil {
		h.t.Fatal(err)
	}
}

// File is one file of a Snapshot.
type File struct {
	Mode os.FileMode
	Data string
}

// Snapshot is every file of a home by name, and the home itself as ".".
type Snapshot map[string]File

// Files snapshots the home, so a test can tell that a command changed
// nothing at all, or exactly what it changed.
func (h *Home) Files() Snapshot {
	h.t.Helper()
	return FilesOf(h.t, h.Dir)
}

// FilesOf snapshots directory dir: every entry's mode, and each file's
// bytes.
func FilesOf(t testing.TB, dir string) Snapshot {
	t.Helper()
	out := Snapshot{}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	out["."] = File{Mode: fi.Mode()}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		out[e.Name()] = File{Mode: fi.Mode(), Data: string(data)}
	}
	return out
}

// WithoutLocks is s without its lock files, which any reader may create
// and which carry nothing.
func (s Snapshot) WithoutLocks() Snapshot {
	out := maps.Clone(s)
	maps.DeleteFunc(out, func(name string, _ File) bool { return strings.HasSuffix(name, ".lock") })
	return out
}

// SameAs fails the test, naming each difference, unless the home's files
// are those of before.
func (h *Home) SameAs(before Snapshot) {
	h.t.Helper()
	after := h.Files()
	if maps.Equal(before, after) {
		return
	}
	for k, v := range before {
		if w, ok := after[k]; !ok {
			h.t.Errorf("%s was removed", k)
		} else if w != v {
			h.t.Errorf("%s changed (mode %v -> %v)", k, v.Mode, w.Mode)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			h.t.Errorf("%s was created", k)
		}
	}
}
