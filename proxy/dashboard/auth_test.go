package dashboard

import (
	"strings"
	"testing"
	"time"
)

const key = "0123456789abcdef0123456789abcdef"

func TestLoginTokens(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	tok := LoginToken(key, now)
	nonce, exp, ok := check(key, purposeLogin, tok, now.Add(LoginTTL-time.Second))
	if !ok || exp != now.Add(LoginTTL) {
		t.Fatalf("a fresh token is refused (%v, %v)", ok, exp)
	}
	for name, c := range map[string]struct {
		key, purpose, tok string
		at                time.Time
	}{
		"expired":       {key, purposeLogin, tok, now.Add(LoginTTL)},
		"other key":     {strings.Repeat("k", 32), purposeLogin, tok, now},
		"as a cookie":   {key, purposeSession, tok, now},
		"edited expiry": {key, purposeLogin, strings.Replace(tok, ".", ".9", 1), now},
		"empty":         {key, purposeLogin, "", now},
		"no mac":        {key, purposeLogin, strings.SplitN(tok, ".", 2)[0], now},
	} {
		if _, _, ok := check(c.key, c.purpose, c.tok, c.at); ok {
			t.Errorf("%s: accepted", name)
		}
	}

	var sp spent
	if !sp.take(nonce, exp, now) || sp.take(nonce, exp, now) {
		t.Error("a token must be taken exactly once")
	}
	// Spent tokens are forgotten once they would have expired anyway, and
	// a flood beyond maxSpent is refused, not remembered.
	for i := range maxSpent - 1 {
		if !sp.take(string(rune(i+1000)), exp, now) {
			t.Fatalf("take %d refused", i)
		}
	}
	if sp.take("one too many", exp, now) {
		t.Error("more than maxSpent live tokens remembered")
	}
	if !sp.take("later", exp.Add(LoginTTL), exp) || len(sp.nonces) != 1 {
		t.Errorf("expired nonces kept: %d", len(sp.nonces))
	}
}
