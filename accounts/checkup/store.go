package checkup

import (
	"github.com/rotorproxy/rotor/accounts/home"
	"os"
	"path/filepath"
)

// StoreHealth summarizes the account store and what surrounds it, for
// `rotor report`. Counts that could not be determined are nil or empty,
// never guessed.
type StoreHealth struct {
	Path     string  `json:"path"`
	Exists   bool    `json:"exists"`
	Readable bool    `json:"readable"`
	Error    *string `json:"error"`
	Accounts int     `json:"accounts"`
	Enabled  int     `json:"enabled"`
	Disabled int     `json:"disabled"`
	Flagged  int     `json:"flagged"`
	// PinnedAccountIndex is the pinned account's index; nil when nothing
	// is pinned (or the pin names a removed account: see PinValid).
	PinnedAccountIndex *int `json:"pinned_account_index"`
	PinValid           bool `json:"pin_valid"`
	// GoodBackups counts the backups of accounts.json that parse.
	GoodBackups    int     `json:"good_backups"`
	SecretsBackend *string `json:"secrets_backend"`
	// MissingSecrets lists the indexes of accounts without a secret, and
	// OrphanedSecrets counts secrets without an account; both nil when
	// the secrets could not be listed.
	MissingSecrets  []int   `json:"missing_secrets"`
	OrphanedSecrets *int    `json:"orphaned_secrets"`
	Duplicates      [][]int `json:"duplicates"`
	// UsageLogBytes is the size of usage.jsonl plus its rotated file.
	UsageLogBytes int64 `json:"usage_log_bytes"`
}

// Store reads the store's health. It changes nothing on disk.
func (c *Checkup) Store() StoreHealth {
	h := StoreHealth{Path: c.storePath(), Duplicates: [][]int{}}
	pr := c.readPool()
	h.Exists, h.Readable = pr.exists, pr.err == nil
	h.GoodBackups = len(c.goodBackups())
	for _, name := range []string{home.UsageFile, home.UsageOldFile} {
		if fi, err := os.Stat(filepath.Join(c.d.Dir, name)); err == nil {
			h.UsageLogBytes += fi.Size()
		}
	}
	if c.d.Secrets != nil {
		b := c.d.Secrets.Backend()
		h.SecretsBackend = &b
	}
	if pr.err != nil {
		msg := pr.err.Error()
		h.Error = &msg
		return h
	}
	p := pr.pool
	h.Accounts = len(p.Accounts)
	for i := range p.Accounts {
		a := &p.Accounts[i]
		if a.Enabled {
			h.Enabled++
		} else {
			h.Disabled++
		}
		if _, ok := a.Flagged(); ok {
			h.Flagged++
		}
	}
	if i := p.Pinned(); i > 0 {
		h.PinnedAccountIndex = &i
	}
	h.PinValid = p.PinnedAccountID == nil || p.Pinned() > 0
	if g := duplicates(p); g != nil {
		h.Duplicates = g
	}
	if ids, err := c.secretIDs(); err == nil {
		have := make(map[string]bool, len(ids))
		for _, id := range ids {
			have[id] = true
		}
		h.MissingSecrets = []int{}
		for i := range p.Accounts {
			if !have[p.Accounts[i].ID] {
				h.MissingSecrets = append(h.MissingSecrets, i+1)
			}
		}
		n := len(orphans(p, ids))
		h.OrphanedSecrets = &n
	}
	return h
}
