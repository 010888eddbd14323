package accounts

import (
	"fmt"
	"time"

	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
)

// KeyOptions says how AddKey names a new API-key account, and whether a key
// already in the pool may be updated.
type KeyOptions struct {
	Label   string // empty: "api-key-" and the end of the id; kept on update
	BaseURL string // empty: the default OpenAI base; kept on update
	Update  bool   // a known key updates its account instead of failing
}

// AddKey adds an API-key account holding key, unless some account already
// holds that key: then it fails naming the account (a VALIDATION error),
// or with o.Update sets that account's label and base URL from o and stores
// the key again. It returns the account's 1-based index and whether it was
// created.
//
// A key is recognised by its keyed fingerprint (secrets.Fingerprint), never
// by comparing stored keys; API-key accounts added before fingerprints
// existed are fingerprinted here from their stored keys first, so they are
// recognised too. Everything happens under the store lock, and the account
// appears only once its key is stored.
func AddKey(st *Store, sec secrets.Store, key string, o KeyOptions, now time.Time) (acct Account, index int, created bool, err error) {
	salt, err := sec.Salt()
	if err != nil {
		return Account{}, 0, false, err
	}
	fp := secrets.Fingerprint(salt, key)
	s := secrets.Secret{APIKey: key}
	_, err = st.Update(func(p *Pool) error {
		FillFingerprints(p, sec, salt)
		index, created = p.KeyHolder(fp), false
		switch {
		case index == 0:
			index, created = p.AddAPIKey(o.Label, o.BaseURL, now), true
			p.At(index).KeyFingerprint = fp
		case !o.Update:
			a := p.At(index)
			return rerr.Validation("key", fmt.Sprintf("This API key is already account %d (%s); nothing was added. Pass --update to change that account's label or base URL.", index, a.Label))
		default:
			a := p.At(index)
			if o.Label != "" {
				a.Label = o.Label
			}
			if o.BaseURL != "" {
				a.BaseURL = o.BaseURL
			}
		}
		if !created {
			keepProxyPassword(sec, p.At(index).ID, &s)
		}
		acct = *p.At(index)
		return sec.Set(acct.ID, s)
	})
	return acct, index, created, err
}

// AddAPIKey appends an API-key account and returns its 1-based index. It
// stores no fingerprint; AddKey is the way to add a key.
func (p *Pool) AddAPIKey(label, baseURL string, now time.Time) int {
	id := NewID()
	if label == "" {
		label = "api-key-" + id[len(id)-4:]
	}
	p.Accounts = append(p.Accounts, Account{
		ID:      id,
		Label:   label,
		Kind:    KindAPIKey,
		BaseURL: baseURL,
		Enabled: true,
		AddedAt: now.UTC(),
	})
	return len(p.Accounts)
}

// KeyHolder returns the 1-based index of the first API-key account whose
// fingerprint is fp, or 0.
func (p *Pool) KeyHolder(fp string) int {
	for i := range p.Accounts {
		if a := &p.Accounts[i]; a.Kind == KindAPIKey && a.KeyFingerprint == fp {
			return i + 1
		}
	}
	return 0
}

// FillFingerprints gives every API-key account without a fingerprint the
// one of its stored key, and returns the 1-based indexes it filled.
// Accounts whose key cannot be read are left as they are.
func FillFingerprints(p *Pool, sec secrets.Store, salt []byte) []int {
	var filled []int
	for i := range p.Accounts {
		a := &p.Accounts[i]
		if a.Kind != KindAPIKey || a.KeyFingerprint != "" {
			continue
		}
		s, err := sec.Get(a.ID)
		if err != nil || s.APIKey == "" {
			continue
		}
		a.KeyFingerprint = secrets.Fingerprint(salt, s.APIKey)
		filled = append(filled, i+1)
	}
	return filled
}
