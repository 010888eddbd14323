package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"time"
)

// LoginTTL is how long a login link works (docs/dashboard.md).
const LoginTTL = 5 * time.Minute

// SessionTTL is how long a dashboard cookie works. It also ends when the
// serve that issued it stops, since a new serve has a new client key, and
// when the serve's stable key is rotated (Dashboard.SetClientKey).
const SessionTTL = 12 * time.Hour

// Both tokens are "nonce.expiry.mac": a random nonce, an expiry in Unix
// seconds, and an HMAC-SHA256 of both under the serve's client key. Only
// someone who can read the key (proxy.json is 0600) can make one, and only
// the serve holding that key accepts it, with no shared state between
// `rotor dashboard` and the serve. The purpose string keeps a login token
// from passing as a cookie and the other way round.
const (
	purposeLogin   = "rotor-dashboard-login"
	purposeSession = "rotor-dashboard-session"
)

// LoginToken is a one-time login token for the serve whose client key is
// clientKey, valid for LoginTTL from now.
func LoginToken(clientKey string, now time.Time) string {
	return mint(clientKey, purposeLogin, now.Add(LoginTTL))
}

// LoginURL is the login link of the serve at base (http://127.0.0.1:PORT).
func LoginURL(base, clientKey string, now time.Time) string {
	return strings.TrimSuffix(base, "/") + "/login?token=" + LoginToken(clientKey, now)
}

func mint(key, purpose string, expiry time.Time) string {
	var nonce [16]byte
	rand.Read(nonce[:])
	body := hex.EncodeToString(nonce[:]) + "." + strconv.FormatInt(expiry.Unix(), 10)
	return body + "." + sign(key, purpose, body)
}

func sign(key, purpose, body string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil))
}

// check reports whether tok is a token for purpose under key that has not
// expired at now, and returns its nonce.
func check(key, purpose, tok string, now time.Time) (nonce string, expiry time.Time, ok bool) {
	i := strings.LastIndexByte(tok, '.')
	if i < 0 {
		return "", time.Time{}, false
	}
	body, mac := tok[:i], tok[i+1:]
	if !hmac.Equal([]byte(mac), []byte(sign(key, purpose, body))) {
		return "", time.Time{}, false
	}
	nonce, exp, _ := strings.Cut(body, ".")
	sec, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || !now.Before(time.Unix(sec, 0)) {
		return "", time.Time{}, false
	}
	return nonce, time.Unix(sec, 0), true
}

// maxSpent bounds the memory of used login tokens: each is kept only until
// it would have expired anyway, and a flood of logins beyond this many in
// LoginTTL is refused rather than remembered.
const maxSpent = 1024

// spent remembers the login tokens already traded, so none works twice.
type spent struct {
	mu     sync.Mutex
	nonces map[string]time.Time // nonce -> its expiry
}

// take marks nonce used and reports whether it was unused before.
func (s *spent) take(nonce string, expiry, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nonces == nil {
		s.nonces = map[string]time.Time{}
	}
	if _, used := s.nonces[nonce]; used {
		return false
	}
	for n, exp := range s.nonces {
		if !now.Before(exp) {
			delete(s.nonces, n)
		}
	}
	if len(s.nonces) >= maxSpent {
		return false
	}
	s.nonces[nonce] = expiry
	return true
}
