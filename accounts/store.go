// Package accounts keeps rotor's pool of accounts: the accounts.json store,
// the identity read from ChatGPT tokens, and the import of Codex CLI logins.
// Secrets live apart, in package accounts/secrets; accounts.json never holds a
// token or a key.
package accounts

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rotorproxy/rotor/accounts/home"
	rerr "github.com/rotorproxy/rotor/errors"
)

// Kind is the kind of an account, which decides its upstream adapter.
type Kind string

// Account kinds (docs/files.md).
const (
	KindChatGPT Kind = "chatgpt"
	KindAPIKey  Kind = "api-key"
)

// Flag reasons stored in flagged_reason.
const (
	FlagTokenInvalid = "token-invalid"
	FlagDeactivated  = "workspace-deactivated"
)

// Account is one entry of accounts.json. It holds no secret.
type Account struct {
	ID               string    `json:"id"`
	Label            string    `json:"label"`
	Kind             Kind      `json:"kind"`
	Email            string    `json:"email"`
	ChatGPTAccountID string    `json:"chatgpt_account_id"`
	PlanType         string    `json:"plan_type"`
	BaseURL          string    `json:"base_url,omitempty"`
	KeyFingerprint   string    `json:"key_fingerprint,omitempty"` // API keys only: secrets.Fingerprint of the key
	Enabled          bool      `json:"enabled"`
	AddedAt          time.Time `json:"added_at"`
	FlaggedReason    *string   `json:"flagged_reason"`
	// CodexAuthFile links a ChatGPT account to the Codex CLI auth.json it
	// was imported from (docs/codex.md): refreshes read it first and write back.
	CodexAuthFile string `json:"codex_auth_file,omitempty"`
	// ProxyURL is the account's own outbound proxy (docs/service.md), which wins
	// over the environment's, as netproxy.Display shows it: never with a
	// password, which is kept in the account's secret (ProxyPassword).
	ProxyURL string `json:"proxy_url,omitempty"`
}

// Flagged reports whether the account is flagged, and why.
func (a *Account) Flagged() (string, bool) {
	if a.FlaggedReason == nil || *a.FlaggedReason == "" {
		return "", false
	}
	return *a.FlaggedReason, true
}

// SetFlag flags the account with reason; an empty reason clears the flag.
func (a *Account) SetFlag(reason string) {
	if reason == "" {
		a.FlaggedReason = nil
		return
	}
	a.FlaggedReason = &reason
}

// Pool is the content of accounts.json.
type Pool struct {
	Version            int       `json:"version"`
	Accounts           []Account `json:"accounts"`
	PinnedAccountID    *string   `json:"pinned_account_id"`
	AffinityGeneration int64     `json:"affinity_generation"`
}

// Pinned returns the 1-based index of the pinned account, or 0 when nothing
// is pinned or the pin names an account that is gone.
func (p *Pool) Pinned() int {
	if p.PinnedAccountID == nil {
		return 0
	}
	return p.IndexOf(*p.PinnedAccountID)
}

// IndexOf returns the 1-based index of the account with id, or 0.
func (p *Pool) IndexOf(id string) int {
	for i := range p.Accounts {
		if p.Accounts[i].ID == id {
			return i + 1
		}
	}
	return 0
}

// At returns the account at a 1-based index, or nil.
func (p *Pool) At(index int) *Account {
	if index < 1 || index > len(p.Accounts) {
		return nil
	}
	return &p.Accounts[index-1]
}

// Pin makes the account at a 1-based index the only one every proxy on
// this home uses (`rotor switch`). Moving the affinity generation drops
// the sessions other proxies hold on other accounts.
func (p *Pool) Pin(index int) {
	id := p.At(index).ID
	p.PinnedAccountID = &id
	p.AffinityGeneration++
}

// Unpin lets every proxy rotate again (`rotor unpin`) and reports whether
// something was pinned.
func (p *Pool) Unpin() bool {
	was := p.PinnedAccountID != nil
	p.PinnedAccountID = nil
	p.AffinityGeneration++
	return was
}

// Remove deletes the account at a 1-based index. A pin on it is cleared;
// a pin on any other account stays on that account.
func (p *Pool) Remove(index int) Account {
	a := p.Accounts[index-1]
	p.Accounts = append(p.Accounts[:index-1], p.Accounts[index:]...)
	if p.PinnedAccountID != nil && *p.PinnedAccountID == a.ID {
		p.PinnedAccountID = nil
		p.AffinityGeneration++
	}
	return a
}

// Store is accounts.json in a rotor home directory. Every write is atomic,
// done under a cross-process lock, and keeps three rotating backups; a file
// that cannot be read is never overwritten.
type Store struct {
	dir  string
	path string
	lock string
	// LockTimeout bounds the wait for another rotor process's write.
	LockTimeout time.Duration
}

// Backups is how many rotating backups of accounts.json are kept.
const Backups = 3

// Open returns the store in dir, creating dir (mode 0700) if needed.
func Open(dir string) (*Store, error) {
	if err := home.EnsureDir(dir); err != nil {
		return nil, fmt.Errorf("cannot prepare rotor home %s: %w", dir, err)
	}
	return &Store{
		dir:         dir,
		path:        filepath.Join(dir, home.AccountsFile),
		lock:        filepath.Join(dir, home.AccountsLock),
		LockTimeout: 15 * time.Second,
	}, nil
}

// Dir is the rotor home directory.
func (s *Store) Dir() string { return s.dir }

// Path is the path of accounts.json.
func (s *Store) Path() string { return s.path }

// Load reads the store. A missing file is an empty pool; a file that cannot
// be read or parsed is a STORAGE_UNREADABLE error naming it.
func (s *Store) Load() (*Pool, error) {
	data, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return &Pool{Version: 1, Accounts: []Account{}}, nil
	}
	if err != nil {
		return nil, rerr.StorageUnreadable(s.path, err)
	}
	return Parse(s.path, data)
}

// Parse decodes accounts.json content; path is only used in errors.
func Parse(path string, data []byte) (*Pool, error) {
	var p Pool
	if err := home.DecodeJSON(data, &p); err != nil {
		return nil, rerr.StorageUnreadable(path, err)
	}
	if p.Version != 1 {
		return nil, rerr.StorageUnreadable(path, fmt.Errorf("unsupported version %d", p.Version))
	}
	seen := make(map[string]bool, len(p.Accounts))
	for i, a := range p.Accounts {
		if a.ID == "" || seen[a.ID] {
			return nil, rerr.StorageUnreadable(path, fmt.Errorf("account %d has a missing or repeated id", i+1))
		}
		if a.Kind != KindChatGPT && a.Kind != KindAPIKey {
			return nil, rerr.StorageUnreadable(path, fmt.Errorf("account %d has unknown kind %q", i+1, a.Kind))
		}
		seen[a.ID] = true
	}
	if p.Accounts == nil {
		p.Accounts = []Account{}
	}
	return &p, nil
}

// Update runs fn on the current pool under the store lock and writes the
// result atomically, then rotates the backups so accounts.json.bak is the
// result too. If fn returns an error nothing
// is written. An unreadable store is reported and left untouched.
func (s *Store) Update(fn func(*Pool) error) (*Pool, error) {
	edit := func(p *Pool) (*Pool, error) { return p, fn(p) }
	// Backed up after the write, so the newest backup always holds the
	// current good state (docs/files.md): restoring it loses nothing. A crash
	// in between leaves the previous state there, which is still good.
	backup := func() error {
		if err := home.Rotate(s.path, Backups); err != nil {
			return fmt.Errorf("cannot back up %s: %w", s.path, err)
		}
		return nil
	}
	return home.UpdateJSON(s.path, s.lock, s.LockTimeout, s.Load, edit, backup)
}

// NewID returns a fresh random account id.
func NewID() string {
	var b [8]byte
	rand.Read(b[:])
	return "acct_" + hex.EncodeToString(b[:])
}

// Flag flags the account with id (and disables it when disable is set), as
// the proxy does when an upstream says its token or workspace is dead. It
// returns the updated pool.
func (s *Store) Flag(id, reason string, disable bool) (*Pool, error) {
	return s.Update(func(p *Pool) error {
		i := p.IndexOf(id)
		if i == 0 {
			return rerr.NotFound("no account with id " + id)
		}
		a := p.At(i)
		a.SetFlag(reason)
		if disable {
			a.Enabled = false
		}
		return nil
	})
}
