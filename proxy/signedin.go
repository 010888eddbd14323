package proxy

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/secrets"
)

// Codex signed in as itself (docs/codex.md). Codex keeps its ChatGPT sign-in
// and its built-in provider, and two settings point both its base URLs at
// rotor; it then sends its own access token instead of the client key.
// rotor takes that token as the client's credential when it is an access
// token of a ChatGPT account in the pool, the current one or, for
// tokenGrace after rotor saw it replaced, the previous one. Model requests
// still go through selection and failover like any other; the other calls
// under /backend-api/ (plugins, settings, tasks) go to the account whose
// token it is, unchanged (passThrough).

// tokenGrace is how long an access token is still taken after rotor saw
// its account's token replaced: Codex may send the old one until it reads
// the new one from its auth.json.
const tokenGrace = 2 * time.Minute

// adoptEvery bounds how often an unknown bearer makes rotor read the
// linked Codex auth.json files for a token Codex refreshed itself.
const adoptEvery = time.Second

// Adopter takes over the tokens Codex wrote to an account's linked
// auth.json when they are newer than the store's (oauth.Refresher.Adopt),
// without refreshing anything itself.
type Adopter interface {
	Adopt(a accounts.Account) (secrets.Secret, bool)
}

// poolTokens are the digests of the pool's access tokens rotor has seen,
// by account: the current one, and the one before it while its grace
// lasts.
type poolTokens struct {
	mu        sync.Mutex
	byAccount map[string]*tokenDigests
	adoptedAt time.Time // the last look at the linked auth.json files
}

type tokenDigests struct {
	token      string // the current token, to notice it change
	cur, prev  [sha256.Size]byte
	prevUntil  time.Time
	hasCurrent bool
}

// see records the account's current token, starting the grace of the one
// it replaces.
func (t *poolTokens) see(id, token string, now time.Time) *tokenDigests {
	if t.byAccount == nil {
		t.byAccount = make(map[string]*tokenDigests)
	}
	d := t.byAccount[id]
	if d == nil {
		if len(t.byAccount) >= 10_000 {
			clear(t.byAccount) // bounded: forgotten digests are made again
		}
		d = &tokenDigests{}
		t.byAccount[id] = d
	}
	if !d.hasCurrent || d.token != token {
		if d.hasCurrent {
			d.prev, d.prevUntil = d.cur, now.Add(tokenGrace)
		}
		d.token, d.cur, d.hasCurrent = token, sha256.Sum256([]byte(token)), true
	}
	return d
}

// tokenAccount is the id of the ChatGPT account in the pool whose access
// token bearer is, "" when there is none. Digests are compared in
// constant time, as the client key is.
func (s *Server) tokenAccount(bearer []byte) string {
	if len(bearer) == 0 {
		return ""
	}
	if id := s.matchToken(bearer); id != "" {
		return id
	}
	if s.adoptLinked() {
		return s.matchToken(bearer)
	}
	return ""
}

func (s *Server) matchToken(bearer []byte) string {
	want := sha256.Sum256(bearer)
	now := s.deps.Clock.Now()
	pool := s.deps.Selector.Pool()
	found := ""
	for i := range pool.Accounts {
		a := &pool.Accounts[i]
		if a.Kind != accounts.KindChatGPT {
			continue
		}
		sec, err := s.secrets.get(a.ID, s.runtime().TokensAt(a.ID))
		if err != nil || sec.AccessToken == "" {
			continue
		}
		s.tokens.mu.Lock()
		d := s.tokens.see(a.ID, sec.AccessToken, now)
		match := subtle.ConstantTimeCompare(want[:], d.cur[:]) == 1 ||
			now.Before(d.prevUntil) && subtle.ConstantTimeCompare(want[:], d.prev[:]) == 1
		s.tokens.mu.Unlock()
		if match && found == "" {
			found = a.ID
		}
	}
	return found
}

// adoptLinked reads the Codex auth.json of every linked account, at most
// once per adoptEvery, and takes over tokens Codex refreshed itself. It
// reports whether any account's tokens changed.
func (s *Server) adoptLinked() bool {
	if s.deps.Adopter == nil {
		return false
	}
	now := s.deps.Clock.Now()
	s.tokens.mu.Lock()
	if now.Sub(s.tokens.adoptedAt) < adoptEvery {
		s.tokens.mu.Unlock()
		return false
	}
	s.tokens.adoptedAt = now
	s.tokens.mu.Unlock()
	changed := false
	for _, a := range s.deps.Selector.Pool().Accounts {
		if a.Kind != accounts.KindChatGPT || a.CodexAuthFile == "" {
			continue
		}
		if sec, ok := s.deps.Adopter.Adopt(a); ok {
			s.secrets.put(a.ID, sec)
			s.runtime().TokensChanged(a.ID)
			changed = true
		}
	}
	return changed
}

// bearerOf is the token of an Authorization: Bearer header, nil if none.
func bearerOf(h *fasthttp.RequestHeader) []byte {
	auth := h.Peek("Authorization")
	const prefix = "Bearer "
	if len(auth) > len(prefix) && bytes.EqualFold(auth[:len(prefix)], []byte(prefix)) {
		return auth[len(prefix):]
	}
	return nil
}

// backendPrefix is where Codex's chatgpt_base_url points at rotor.
const backendPrefix = "/backend-api/"

// backendTarget is a backend call's request target as the client sent it
// (raw: no byte decoded or cleaned), after /backend-api/: what goes after
// the account's base. rotor decodes nothing on the way, so the backend
// reads the target as it would have come direct; the one difference is
// the base it is resolved under, so a target that could leave it is
// refused (ok false): one not under /backend-api/ as sent (fasthttp's
// routing path is cleaned: /x/../backend-api/y routes here), one with a
// fragment (cut by the client, never meant for the wire), and one whose
// path, percent-decoded until it no longer changes, names a . or ..
// segment. Whoever decodes it how often on the way (a CDN, a gateway, the
// backend) must not find one: %252e%252e is %2e%2e once decoded and .. twice,
// and the backend's base would be left for its neighbours (its OpenAI
// API, its sign-in) with the account's token. A backslash counts as a
// separator, and a segment ends at a ';', as some servers read them.
func backendTarget(raw []byte) (rest string, ok bool) {
	after, ok := bytes.CutPrefix(raw, []byte(backendPrefix))
	if !ok || bytes.IndexByte(raw, '#') >= 0 {
		return "", false
	}
	path := rawPath(string(raw))
	for {
		dec := percentDecode(path)
		if dec == path {
			break
		}
		path = dec
	}
	for seg := range strings.FieldsFuncSeq(path, func(c rune) bool { return c == '/' || c == '\\' }) {
		seg, _, _ = strings.Cut(seg, ";")
		if seg == "." || seg == ".." {
			return "", false
		}
	}
	return string(after), true
}

// rawPath is target without its query.
func rawPath(target string) string {
	p, _, _ := strings.Cut(target, "?")
	return p
}

// percentDecode decodes every valid %XX escape of s once, leaving the
// rest as it is (a stray % stays).
func percentDecode(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	default:
		return c - 'a' + 10
	}
}
