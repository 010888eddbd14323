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
	rerr "github.com/rotorproxy/rotor/errors"
)

// Codex signed in as itself (SPEC §14). Codex keeps its ChatGPT sign-in
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

// passThrough sends a call under /backend-api/ that carries the access
// token of account id to that account's ChatGPT base, unchanged (method,
// path, query, body), as that account and through its outbound proxy,
// and relays the answer. Only its path and status are logged.
func (s *Server) passThrough(ctx *fasthttp.RequestCtx, r *request, id string) {
	w := httpResponder{ctx}
	pool := s.deps.Selector.Pool()
	a := pool.At(pool.IndexOf(id))
	if a == nil {
		s.refuse(w, r, rerr.Spec{Code: rerr.ProxyUnauthorized, Message: guardMessages[rerr.ProxyUnauthorized]}, nil)
		return
	}
	body, release, spec := s.readBody(ctx)
	defer release()
	if spec != nil {
		s.refuse(w, r, *spec, nil)
		return
	}
	ad := s.adapters.For(a.Kind)
	base := ad.base(a.BaseURL)
	way := s.endpoints.way(base, a.ProxyURL)
	sec, err := s.secrets.get(a.ID, s.runtime().TokensAt(a.ID))
	var rt *exit
	if err == nil {
		rt, err = s.exits.of(&way, &sec)
	}
	if err != nil {
		s.passFailed(w, r, way.endpoint, err)
		return
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI(upstreamURL(base, "/"+strings.TrimPrefix(string(ctx.Path()), backendPrefix), ctx.URI().QueryString()))
	req.Header.SetMethodBytes(ctx.Method())
	copyRequestHeaders(&req.Header, &ctx.Request.Header)
	if o := ctx.Request.Header.Peek("originator"); len(o) > 0 {
		req.Header.SetBytesV("originator", o) // Codex's own name, not rotor's
	}
	req.Header.Set("Authorization", "Bearer "+sec.AccessToken)
	if a.ChatGPTAccountID != "" {
		req.Header.Set("chatgpt-account-id", a.ChatGPTAccountID)
	}
	req.SetBodyRaw(body)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if err := rt.client.Do(req, resp); err != nil {
		s.passFailed(w, r, way.endpoint, err)
		return
	}
	out := readBodyUpTo(resp, s.cfg.MaxBody)
	ctx.SetStatusCode(resp.StatusCode())
	relayHeaders(&ctx.Response.Header, &resp.Header)
	redactHeaders(&ctx.Response.Header, &sec)
	ctx.Response.Header.Del("Content-Length")
	ctx.SetBody(redact(out, &sec))
	s.deps.Log.Info().Str("request_id", r.id).Str("path", string(ctx.Path())).Int("account", pool.IndexOf(id)).
		Int("status", resp.StatusCode()).Msg("backend call passed through")
}

// passFailed answers a backend call whose account's endpoint could not
// be reached, as a model request that finds no endpoint would be.
func (s *Server) passFailed(w responder, r *request, endpoint string, err error) {
	s.refuse(w, r, rerr.Spec{Code: rerr.PoolExhausted, Status: 503,
		Message: "cannot reach " + endpoint + " for this account's backend call: " + err.Error(),
		Extra:   []rerr.Field{{Key: "reason", Value: "network-error"}}}, nil)
}
