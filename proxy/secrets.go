package proxy

import (
	"sync"
	"time"

	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/secrets"
)

// secretCache keeps secrets in memory so a request does not call the
// keyring; an entry is read again once runtime state says another process
// changed the account's tokens, or after secretTTL. A refresh after a 401
// puts the new secret in at once.
type secretCache struct {
	src   SecretSource
	clock clock.Clock // the one changedAt is told by
	mu    sync.Mutex
	m     map[string]cachedSecret
}

type cachedSecret struct {
	sec secrets.Secret
	at  time.Time
}

func newSecretCache(src SecretSource, clock clock.Clock) *secretCache {
	return &secretCache{src: src, clock: clock, m: make(map[string]cachedSecret)}
}

// secretTTL bounds how stale a cached secret may be, so tokens another
// process refreshed are picked up even without a state notice.
const secretTTL = 30 * time.Second

// get returns the secret of id, read again when the cached copy is older
// than secretTTL or than changedAt, the last time any process changed it.
func (c *secretCache) get(id string, changedAt time.Time) (secrets.Secret, error) {
	c.mu.Lock()
	e, ok := c.m[id]
	c.mu.Unlock()
	if ok && c.clock.Now().Sub(e.at) < secretTTL && !changedAt.After(e.at) {
		return e.sec, nil
	}
	sec, err := c.src.Get(id)
	if err != nil {
		return secrets.Secret{}, err
	}
	c.put(id, sec)
	return sec, nil
}

func (c *secretCache) put(id string, sec secrets.Secret) {
	c.mu.Lock()
	if len(c.m) > 10_000 {
		clear(c.m) // bounded: a cache miss costs one backend read
	}
	c.m[id] = cachedSecret{sec: sec, at: c.clock.Now()}
	c.mu.Unlock()
}
