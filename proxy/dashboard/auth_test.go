package dashboard

import (
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
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

// A rotated client key signs every session out: a cookie or login link
// signed with the old key is refused, one signed with the new key works.
func TestSetClientKeyEndsOldSessions(t *testing.T) {
	t.Parallel()
	d := New(Config{ClientKey: key})
	withCookie := func(signKey string) *fasthttp.RequestCtx {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetHost("127.0.0.1:8787")
		ctx.Request.Header.SetCookie("rotor_dashboard_8787", mint(signKey, purposeSession, time.Now().Add(time.Hour)))
		return &ctx
	}
	if !d.Session(withCookie(key)) {
		t.Fatal("a cookie signed with the key is refused")
	}
	next := strings.Repeat("n", 64)
	d.SetClientKey(next)
	if d.Session(withCookie(key)) {
		t.Error("a cookie signed with the old key still works after the rotation")
	}
	if !d.Session(withCookie(next)) {
		t.Error("a cookie signed with the new key is refused")
	}
	var login fasthttp.RequestCtx
	login.Request.SetRequestURI("/login?token=" + LoginToken(key, time.Now()))
	d.login(&login)
	if login.Response.StatusCode() != fasthttp.StatusUnauthorized {
		t.Errorf("a login link of the old key: %d", login.Response.StatusCode())
	}
}
