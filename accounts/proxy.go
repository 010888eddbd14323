package accounts

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/accounts/netproxy"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
)

// ParseProxy checks raw, an account's own proxy URL (docs/service.md), and
// splits it into what accounts.json keeps (Account.ProxyURL, no
// password) and the password, which only the secrets store keeps. An
// invalid URL is a VALIDATION error that never repeats the URL.
func ParseProxy(raw string) (shown, password string, err error) {
	shown, password, err = netproxy.Split(raw)
	if err != nil {
		return "", "", rerr.Validation("proxy", err.Error())
	}
	return shown, password, nil
}

// SetProxy gives account id its own outbound proxy raw, or with raw ""
// takes it away (the environment's rule applies again). The password goes
// to the account's secret, the rest to accounts.json. It holds the
// account's refresh lock while it rewrites the secret, so a token refresh
// in a running serve is never overwritten with the tokens read here.
func SetProxy(st *Store, sec secrets.Store, id, raw string) (*Pool, error) {
	shown, password := "", ""
	if raw != "" {
		var err error
		if shown, password, err = ParseProxy(raw); err != nil {
			return nil, err
		}
	}
	lock, err := home.LockFile(filepath.Join(st.Dir(), home.RefreshLock(id)), false, time.Minute)
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	return st.Update(func(p *Pool) error {
		i := p.IndexOf(id)
		if i == 0 {
			return rerr.Validation("account", fmt.Sprintf("no account with id %s", id))
		}
		s, err := sec.Get(id)
		if err != nil {
			return err
		}
		if s.ProxyPassword != password {
			s.ProxyPassword = password
			if err := sec.Set(id, s); err != nil {
				return err
			}
		}
		p.At(i).ProxyURL = shown
		return nil
	})
}

// keepProxyPassword carries the proxy password of the secret stored for
// id into s, which is about to replace it without one: storing new
// tokens or a new key must not unset the account's proxy.
func keepProxyPassword(sec secrets.Store, id string, s *secrets.Secret) {
	if s.ProxyPassword != "" {
		return
	}
	if cur, err := sec.Get(id); err == nil {
		s.ProxyPassword = cur.ProxyPassword
	}
}
