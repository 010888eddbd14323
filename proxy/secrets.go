package proxy

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/secrets"
	"github.com/rotorproxy/rotor/rotation"
)

// secretCache keeps secrets in memory so a request does not call the
// keyring; an entry is read again once runtime state says another process
// changed the account's tokens, or after secretTTL. A refresh after a 401
// puts the new secret in at once. Concurrent misses for one account share
// one read: a burst of requests at serve start, or at a TTL's end, would
// otherwise each ask the keyring (a D-Bus round trip each on Linux).
type secretCache struct {
	src    SecretSource
	clock  clock.Clock // the one changedAt is told by
	mu     sync.Mutex
	m      map[string]cachedSecret
	flight map[string]*secretRead // reads in progress, by account id
}

type cachedSecret struct {
	sec secrets.Secret
	at  time.Time
}

// secretRead is one read of the secret store that concurrent misses wait
// for; sec and err are set before done closes.
type secretRead struct {
	at   time.Time // when the read started: it sees changes made before
	done chan struct{}
	sec  secrets.Secret
	err  error
	// panicked is what the read panicked with, nil if it returned.
	panicked any
}

func newSecretCache(src SecretSource, clock clock.Clock) *secretCache {
	return &secretCache{src: src, clock: clock, m: make(map[string]cachedSecret), flight: make(map[string]*secretRead)}
}

// secretTTL bounds how stale a cached secret may be, so tokens another
// process refreshed are picked up even without a state notice.
const secretTTL = 30 * time.Second

// get returns the secret of id, read again when the cached copy is older
// than secretTTL or than changedAt, the last time any process changed it.
// A read already in progress that started after changedAt is joined.
func (c *secretCache) get(id string, changedAt time.Time) (secrets.Secret, error) {
	return c.getAt(id, changedAt, c.clock.Now())
}

// getAt is get at now, a reading of the clock the caller took a moment
// before (the pick's).
func (c *secretCache) getAt(id string, changedAt, now time.Time) (secrets.Secret, error) {
	c.mu.Lock()
	if e, ok := c.m[id]; ok && now.Sub(e.at) < secretTTL && !changedAt.After(e.at) {
		c.mu.Unlock()
		return e.sec, nil
	}
	if r := c.flight[id]; r != nil && !changedAt.After(r.at) {
		c.mu.Unlock()
		<-r.done
		if r.panicked != nil {
			panic(r.panicked)
		}
		return r.sec, r.err
	}
	r := &secretRead{at: now, done: make(chan struct{})}
	c.flight[id] = r
	c.mu.Unlock()
	c.read(id, r)
	return r.sec, r.err
}

// read runs r, caches what it read, and lets r's waiters go, whatever
// happens: a read that panics must not leave them waiting. A panic goes
// on up the reader's request and is raised again in each waiter's, as if
// each had read for itself.
func (c *secretCache) read(id string, r *secretRead) {
	defer func() {
		r.panicked = recover()
		c.mu.Lock()
		if c.flight[id] == r {
			delete(c.flight, id)
		}
		if r.err == nil && r.panicked == nil {
			c.store(id, r.sec, r.at)
		}
		c.mu.Unlock()
		close(r.done)
		if r.panicked != nil {
			panic(r.panicked)
		}
	}()
	r.sec, r.err = c.src.Get(id)
}

// put caches sec as id's secret from now on.
func (c *secretCache) put(id string, sec secrets.Secret) {
	c.mu.Lock()
	c.store(id, sec, c.clock.Now())
	c.mu.Unlock()
}

// store caches sec as read at at, unless a newer copy is already in.
// Callers hold c.mu.
func (c *secretCache) store(id string, sec secrets.Secret, at time.Time) {
	if e, ok := c.m[id]; ok && e.at.After(at) {
		return // a refresh put a newer secret in while this read ran
	}
	if len(c.m) > 10_000 {
		clear(c.m) // bounded: a cache miss costs one backend read
	}
	c.m[id] = cachedSecret{sec: sec, at: at}
}

// secretOf writes the secret of ch's account to sec; a failure if it has
// none usable. Like the helpers of send, a function of its own, so that
// attempt's frame stays small while the attempt runs.
//
//go:noinline
func (s *Server) secretOf(r *request, ch *rotation.Choice, now time.Time, sec *secrets.Secret) *failure {
	got, err := s.secrets.getAt(ch.Account.ID, s.runtime().TokensAt(ch.Account.ID), now)
	if err != nil {
		s.deps.Log.Warn().Str("request_id", r.id).Int("account", ch.Index).Err(err).Msg("account has no usable secret")
		return &failure{verdict: verdictUnauthorized, status: 401, err: err, own: true}
	}
	*sec = got
	return nil
}

// refreshInto refreshes the tokens in sec, and reports whether it did.
//
//go:noinline
func (s *Server) refreshInto(r *request, ch *rotation.Choice, sec *secrets.Secret) bool {
	fresh, ok := s.refresh(r, ch, *sec)
	if ok {
		*sec = fresh
	}
	return ok
}

func (s *Server) refresh(r *request, ch *rotation.Choice, stale secrets.Secret) (secrets.Secret, bool) {
	// Not the request's context: fasthttp's must not outlive the handler,
	// and a refresh cut off midway may have spent the single-use refresh
	// token without storing its successor.
	return s.renew(context.Background(), &ch.Account, stale,
		s.deps.Log.Warn().Str("request_id", r.id).Int("account", ch.Index))
}

// renew refreshes a's tokens, stale being the ones that failed or are
// old, within a minute of ctx: the new secret is cached and every process
// told; a failure is logged on fail.
func (s *Server) renew(ctx context.Context, a *accounts.Account, stale secrets.Secret, fail *zerolog.Event) (secrets.Secret, bool) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	fresh, err := s.deps.Refresher.Refresh(ctx, *a, stale)
	if err != nil {
		fail.Err(err).Msg("token refresh failed")
		return secrets.Secret{}, false
	}
	s.secrets.put(a.ID, fresh)
	s.runtime().TokensChanged(a.ID)
	return fresh, true
}
