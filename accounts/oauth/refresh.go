package oauth

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/accounts/netproxy"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
)

// RefreshLead is how long before expiry a token is refreshed.
const RefreshLead = 5 * time.Minute

// Refresher renews ChatGPT tokens so that, across every rotor process on
// one ROTOR_HOME, at most one refresh per account runs at a time: it takes
// the account's refresh lock, then reads the secret again, and only calls
// the token endpoint when no other process has refreshed meanwhile.
//
// An account linked to a Codex CLI auth.json (docs/codex.md) shares its login
// with Codex, and refresh tokens are single-use, so under the same lock
// the Refresher also reads that file first: when Codex has refreshed, it
// adopts Codex's tokens instead of spending its own (already spent) one;
// and after it refreshes, it writes the new tokens back while the file
// still holds the token it spent, so Codex's next refresh works too.
type Refresher struct {
	Client  *Client
	Secrets secrets.Store
	// Dir holds the per-account lock files (ROTOR_HOME).
	Dir string
	// Flag marks an account whose refresh token is dead (may be nil).
	Flag func(id, reason string) error
	// Clock tells the time: rotor's one clock, so a test that moves it
	// moves token expiry with everything else.
	Clock clock.Clock
	// EnvProxy is the environment's proxy rule (netproxy.FromEnv; nil:
	// none). An account's own proxy wins over it, so the refresh goes out
	// the same way as the account's requests.
	EnvProxy netproxy.Func
	// LinkError is told when a linked Codex auth.json could not be read
	// or written back (may be nil). The refresh itself still counts.
	LinkError func(a accounts.Account, err error)
}

// Refresh returns fresh tokens for a, whose request just failed (or was
// about to) with the tokens in stale.
func (r *Refresher) Refresh(ctx context.Context, a accounts.Account, stale secrets.Secret) (secrets.Secret, error) {
	lock, err := home.LockFile(filepath.Join(r.Dir, home.RefreshLock(a.ID)), false, time.Minute)
	if err != nil {
		return secrets.Secret{}, rerr.AuthRefreshFailed(true, err)
	}
	defer lock.Unlock()
	cur, err := r.Secrets.Get(a.ID)
	if err != nil {
		return secrets.Secret{}, rerr.AuthRefreshFailed(true, err)
	}
	now := r.Clock.Now()
	if adopted, ok := r.adoptCodex(a, cur); ok {
		cur = adopted
	}
	if cur.AccessToken != "" && cur.AccessToken != stale.AccessToken && !Expiring(cur, now) {
		return cur, nil // another process, or Codex, refreshed while we waited for the lock
	}
	if cur.RefreshToken == "" {
		return secrets.Secret{}, rerr.AuthRefreshFailed(false, fmt.Errorf("account %s has no refresh token", a.Label))
	}
	own, err := netproxy.Join(a.ProxyURL, cur.ProxyPassword)
	if err != nil {
		return secrets.Secret{}, rerr.AuthRefreshFailed(true, err)
	}
	t, err := r.Client.Through(netproxy.Choose(own, r.EnvProxy)).Refresh(ctx, cur.RefreshToken)
	if err != nil {
		if !rerr.IsRetryable(err) && r.Flag != nil {
			r.Flag(a.ID, accounts.FlagTokenInvalid)
		}
		return secrets.Secret{}, err
	}
	next := SecretFrom(t, now)
	if next.IDToken == "" {
		next.IDToken = cur.IDToken
	}
	next.ProxyPassword = cur.ProxyPassword // the account's proxy is not the token endpoint's to change
	if err := r.Secrets.Set(a.ID, next); err != nil {
		// The old refresh token is spent: losing the new one would lock
		// the account out, so this is not retryable silently.
		return secrets.Secret{}, rerr.AuthRefreshFailed(false, err)
	}
	if a.CodexAuthFile != "" {
		_, err := accounts.WriteCodexTokens(a.CodexAuthFile, cur.RefreshToken, accounts.CodexTokens{
			IDToken: t.IDToken, AccessToken: next.AccessToken, RefreshToken: next.RefreshToken,
		}, now)
		r.linkError(a, err)
	}
	return next, nil
}

// Adopt takes over the tokens Codex wrote to a's linked auth.json when
// they are newer than the store's, as a refresh would first, without ever
// refreshing itself: Codex signed in as itself sends rotor its own token
// (docs/codex.md), and one it refreshed is then known at once. It gives up at
// once, adopting nothing, when a refresh of a holds the account's lock.
func (r *Refresher) Adopt(a accounts.Account) (secrets.Secret, bool) {
	if a.CodexAuthFile == "" {
		return secrets.Secret{}, false
	}
	lock, err := home.LockFile(filepath.Join(r.Dir, home.RefreshLock(a.ID)), false, 0)
	if err != nil {
		return secrets.Secret{}, false
	}
	defer lock.Unlock()
	cur, err := r.Secrets.Get(a.ID)
	if err != nil {
		return secrets.Secret{}, false
	}
	return r.adoptCodex(a, cur)
}

// adoptCodex reads a's linked Codex auth.json and, when it holds another
// token pair of the same login than cur that is not older (its access
// token does not expire sooner: Codex refreshed), stores and returns it.
func (r *Refresher) adoptCodex(a accounts.Account, cur secrets.Secret) (secrets.Secret, bool) {
	if a.CodexAuthFile == "" {
		return secrets.Secret{}, false
	}
	ct, err := accounts.ReadCodexAuth(a.CodexAuthFile)
	if err != nil {
		r.linkError(a, err)
		return secrets.Secret{}, false
	}
	id := ct.Identity()
	switch {
	case ct.RefreshToken == cur.RefreshToken: // nothing new
	case !a.SameLogin(id): // the file now holds another login: doctor says so
	case !cur.ExpiresAt.IsZero() && id.ExpiresAt.Before(cur.ExpiresAt): // older than ours
	default:
		s := secrets.Secret{AccessToken: ct.AccessToken, RefreshToken: ct.RefreshToken, IDToken: ct.IDToken, ExpiresAt: id.ExpiresAt,
			ProxyPassword: cur.ProxyPassword}
		if err := r.Secrets.Set(a.ID, s); err != nil {
			r.linkError(a, err)
			return secrets.Secret{}, false
		}
		return s, true
	}
	return secrets.Secret{}, false
}

func (r *Refresher) linkError(a accounts.Account, err error) {
	if err != nil && r.LinkError != nil {
		r.LinkError(a, err)
	}
}

// Expiring reports whether s's access token expires within RefreshLead.
func Expiring(s secrets.Secret, now time.Time) bool {
	return !s.ExpiresAt.IsZero() && s.ExpiresAt.Sub(now) < RefreshLead
}

// SecretFrom turns token-endpoint tokens into a stored secret; the expiry
// comes from the access token's exp claim, else from expires_in.
func SecretFrom(t Tokens, now time.Time) secrets.Secret {
	s := secrets.Secret{AccessToken: t.AccessToken, RefreshToken: t.RefreshToken, IDToken: t.IDToken}
	if id, err := accounts.ParseJWT(t.AccessToken); err == nil && !id.ExpiresAt.IsZero() {
		s.ExpiresAt = id.ExpiresAt
	} else if t.ExpiresIn > 0 {
		s.ExpiresAt = now.Add(t.ExpiresIn).UTC()
	}
	return s
}

// Identity reads the account identity out of freshly issued tokens.
func (t Tokens) Identity() accounts.Identity {
	idt, _ := accounts.ParseJWT(t.IDToken)
	at, _ := accounts.ParseJWT(t.AccessToken)
	return idt.Merge(at)
}
