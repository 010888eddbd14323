package accounts

import (
	"time"

	"github.com/rotorproxy/rotor/accounts/secrets"
)

// SaveChatGPT adds the ChatGPT account id describes, or updates the one
// already in the pool (see UpsertChatGPT), and stores s as its secret
// unless the stored one is newer: a re-import of an old auth.json must
// not bring back a refresh token that was already spent. edit, if not
// nil, adjusts the account before it is saved. The secret is stored under
// the store lock, so the account never appears without it. It returns the
// account, its 1-based index and whether it was created. An updated
// account keeps its proxy password unless s carries one.
func SaveChatGPT(st *Store, sec secrets.Store, id Identity, s secrets.Secret, label string, now time.Time, edit func(*Account)) (acct Account, index int, created bool, err error) {
	_, err = st.Update(func(p *Pool) error {
		index, created = p.UpsertChatGPT(id, label, now)
		if edit != nil {
			edit(p.At(index))
		}
		acct = *p.At(index)
		if !created {
			if cur, err := sec.Get(acct.ID); err == nil && cur.RefreshToken != "" && cur.ExpiresAt.After(s.ExpiresAt) {
				return nil
			}
			keepProxyPassword(sec, acct.ID, &s)
		}
		return sec.Set(acct.ID, s)
	})
	return acct, index, created, err
}
