package backend

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
	"github.com/rotorproxy/rotor/proxy/headerrules"
)

// Codex signed in as itself (docs/codex.md). Codex keeps its ChatGPT sign-in
// and its built-in provider, and two settings point both its base URLs at
// rotor; it then sends its own access token instead of the client key.
// rotor takes that token as the client's credential when it is an access
// token of a ChatGPT account in the pool, the current one or, for
// tokenGrace after rotor saw it replaced, the previous one. Model requests
// still go through selection and failover like any other; the other calls
// under /backend-api/ (plugins, settings, tasks) go to the account whose
// token it is, unchanged (the request path's pass-through, under Target).

// TokenGrace is how long an access token is still taken after rotor saw
// its account's token replaced: Codex may send the old one until it reads
// the new one from its auth.json.
const TokenGrace = 2 * time.Minute

// adoptEvery bounds how often an unknown bearer makes rotor read the
// linked Codex auth.json files for a token Codex refreshed itself.
const adoptEvery = time.Second

// Signers is the pool as Tokens reads it; the request path, which holds
// the accounts' secrets, answers it.
type Signers interface {
	// Now is the time on the serve's clock.
	Now() time.Time
	// Pool is the pool as it stands.
	Pool() *accounts.Pool
	// SignsIn reports whether a signs in to the ChatGPT backend: only
	// such an account's access token is a credential.
	SignsIn(a *accounts.Account) bool
	// Secret is a's secret as it stands.
	Secret(a *accounts.Account) (secrets.Secret, error)
	// Adopt takes over the tokens Codex wrote to a's linked auth.json
	// when they are newer than the store's; it reports whether it did.
	Adopt(a *accounts.Account) bool
}

// Tokens are the digests of the pool's access tokens rotor has seen,
// by account: the current one, and the one before it while its grace
// lasts. It is safe for concurrent use; the zero value is empty.
type Tokens struct {
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
func (t *Tokens) see(id, token string, now time.Time) *tokenDigests {
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
			d.prev, d.prevUntil = d.cur, now.Add(TokenGrace)
		}
		d.token, d.cur, d.hasCurrent = token, sha256.Sum256([]byte(token)), true
	}
	return d
}

// Account is the id of the account of p that signs in whose access
// token bearer is, "" when there is none. Digests are compared in
// constant time, as the client key is.
func (t *Tokens) Account(bearer []byte, p Signers) string {
	if len(bearer) == 0 {
		return ""
	}
	if id := t.match(bearer, p); id != "" {
		return id
	}
	if t.adoptLinked(p) {
		return t.match(bearer, p)
	}
	return ""
}

func (t *Tokens) match(bearer []byte, p Signers) string {
	want := sha256.Sum256(bearer)
	now := p.Now()
	pool := p.Pool()
	found := ""
	for i := range pool.Accounts {
		a := &pool.Accounts[i]
		if !p.SignsIn(a) {
			continue
		}
		sec, err := p.Secret(a)
		if err != nil || sec.AccessToken == "" {
			continue
		}
		t.mu.Lock()
		d := t.see(a.ID, sec.AccessToken, now)
		match := subtle.ConstantTimeCompare(want[:], d.cur[:]) == 1 ||
			now.Before(d.prevUntil) && subtle.ConstantTimeCompare(want[:], d.prev[:]) == 1
		t.mu.Unlock()
		if match && found == "" {
			found = a.ID
		}
	}
	return found
}

// adoptLinked reads the Codex auth.json of every linked account, at most
// once per adoptEvery, and takes over tokens Codex refreshed itself. It
// reports whether any account's tokens changed.
func (t *Tokens) adoptLinked(p Signers) bool {
	now := p.Now()
	t.mu.Lock()
	if now.Sub(t.adoptedAt) < adoptEvery {
		t.mu.Unlock()
		return false
	}
	t.adoptedAt = now
	t.mu.Unlock()
	changed := false
	pool := p.Pool()
	for i := range pool.Accounts {
		if a := &pool.Accounts[i]; p.SignsIn(a) && a.CodexAuthFile != "" && p.Adopt(a) {
			changed = true
		}
	}
	return changed
}

// PassRequest makes req the backend call in, passed through to the
// ChatGPT base as the account whose access token and ChatGPT account id
// are given: the method, the target after base (rest, from Target), the
// headers rotor forwards and the body as in sent them.
func PassRequest(req *fasthttp.Request, in *fasthttp.Request, base, rest, token, chatgptAccountID string) {
	// The upstream client sends the path as given (DisablePathNormalizing),
	// so the backend reads the target the client wrote.
	req.SetRequestURI(strings.TrimRight(base, "/") + "/" + rest)
	req.Header.SetMethodBytes(in.Header.Method())
	headerrules.CopyRequest(&req.Header, &in.Header)
	if o := in.Header.Peek("originator"); len(o) > 0 {
		req.Header.SetBytesV("originator", o) // Codex's own name, not rotor's
	}
	authorize(&req.Header, token, chatgptAccountID)
}

// authorize makes h a call of the account whose access token and ChatGPT
// account id are given.
func authorize(h *fasthttp.RequestHeader, token, chatgptAccountID string) {
	h.Set("Authorization", "Bearer "+token)
	if chatgptAccountID != "" {
		h.Set("chatgpt-account-id", chatgptAccountID)
	}
}

// Prefix is where Codex's chatgpt_base_url points at rotor.
const Prefix = "/backend-api/"

// Target is a backend call's request target as the client sent it
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
func Target(raw []byte) (rest string, ok bool) {
	after, ok := bytes.CutPrefix(raw, []byte(Prefix))
	if !ok || bytes.IndexByte(raw, '#') >= 0 {
		return "", false
	}
	path := RawPath(string(raw))
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

// RawPath is target without its query.
func RawPath(target string) string {
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
