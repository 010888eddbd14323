package proxy

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/headerrules"
	"github.com/rotorproxy/rotor/proxy/upstream"
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

// passThrough sends a call under /backend-api/ that carries the access
// token of account id to that account's ChatGPT base, unchanged (method,
// the request target as the client sent it, body), as that account and
// through its outbound proxy, and relays the answer. A target
// backendTarget refuses gets 400 and goes nowhere. Only its path and
// status are logged.
func (s *Server) passThrough(ctx *fasthttp.RequestCtx, r *request, id string) {
	w := httpResponder{ctx}
	pool := s.deps.Selector.Pool()
	a := pool.At(pool.IndexOf(id))
	if a == nil {
		s.refuse(w, r, rerr.Spec{Code: rerr.ProxyUnauthorized, Message: guardMessages[rerr.ProxyUnauthorized]}, nil)
		return
	}
	rest, ok := backendTarget(ctx.Request.Header.RequestURI())
	if !ok {
		s.refuse(w, r, rerr.Spec{Code: rerr.ProxyBadRequest,
			Message: "rotor does not pass this target through: under " + backendPrefix + " a path must name no . or .. segment, in any encoding"}, nil)
		closeAfterAnswer(ctx) // its body is not read
		return
	}
	body, release, spec := s.readBody(ctx)
	defer release()
	if spec != nil {
		s.refuse(w, r, *spec, nil)
		closeAfterAnswer(ctx) // as on every route: what is left of it is not read
		return
	}
	ad := s.adapters.For(a.Kind)
	base := ad.base(a.BaseURL)
	way := s.endpoints.Way(base, a.ProxyURL)
	sec, err := s.secrets.get(a.ID, s.runtime().TokensAt(a.ID))
	var rt *upstream.Exit
	if err == nil {
		rt, err = s.exits.Of(&way, sec.ProxyPassword)
	}
	if err != nil {
		s.passFailed(w, r, way.Endpoint, err)
		return
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	// The upstream client sends the path as given (DisablePathNormalizing),
	// so the backend reads the target the client wrote.
	req.SetRequestURI(strings.TrimRight(base, "/") + "/" + rest)
	req.Header.SetMethodBytes(ctx.Method())
	headerrules.CopyRequest(&req.Header, &ctx.Request.Header)
	if o := ctx.Request.Header.Peek("originator"); len(o) > 0 {
		req.Header.SetBytesV("originator", o) // Codex's own name, not rotor's
	}
	req.Header.Set("Authorization", "Bearer "+sec.AccessToken)
	if a.ChatGPTAccountID != "" {
		req.Header.Set("chatgpt-account-id", a.ChatGPTAccountID)
	}
	req.SetBodyRaw(body)
	resp := fasthttp.AcquireResponse()
	if err := rt.Client.Do(req, resp); err != nil {
		fasthttp.ReleaseResponse(resp)
		s.passFailed(w, r, way.Endpoint, err)
		return
	}
	ctx.SetStatusCode(resp.StatusCode())
	headerrules.RelayResponse(&ctx.Response.Header, &resp.Header)
	headerrules.RedactHeaders(&ctx.Response.Header, &sec)
	// Redacting may change the body's length: it goes chunked, whose end
	// the client sees, so an answer cut upstream is cut for it too.
	ctx.Response.Header.Del("Content-Length")
	pb := &passBody{resp: resp, s: s, id: r.id, path: backendPrefix + rawPath(rest), account: pool.IndexOf(id)}
	src := resp.BodyStream()
	pb.Reset(src, sec)
	if pb.streamed = src != nil; !pb.streamed {
		ctx.SetBody(headerrules.Redact(resp.Body(), &sec)) // no body, or a HEAD's
		pb.CloseWithError(nil)
		return
	}
	ctx.SetBodyStream(pb, -1)
}

// passBody is a passed-through answer's body, read by fasthttp's server
// after the handler returned: the upstream's bytes, redacted, as they
// arrive, so an answer of any size streams in bounded memory. fasthttp
// closes it once the answer is written or the client has gone; it then
// lets go of the upstream answer and logs the call.
type passBody struct {
	headerrules.RedactingReader
	streamed bool // the upstream's answer has a body stream
	resp     *fasthttp.Response
	s        *Server
	id       string // the request's: the request itself is released by then
	path     string
	account  int
}

// Read runs outside the handler's recover: a bug met here is logged and
// cuts the answer (errPanicked), rather than end the process.
func (b *passBody) Read(p []byte) (n int, err error) {
	defer func() {
		if v := recover(); v != nil {
			b.s.panicLog(b.id, v).Msg("pass-through panic")
			b.Fail(errPanicked)
			n, err = 0, errPanicked
		}
	}()
	return b.RedactingReader.Read(p)
}

// CloseWithError releases the upstream answer, closing its connection
// unless it was read to its end, and logs the call's path and status.
func (b *passBody) CloseWithError(error) error {
	complete := !b.streamed || errors.Is(b.Err(), io.EOF)
	switch {
	case complete:
		b.resp.CloseBodyStream()
	case b.Err() != nil: // the upstream's failure, or errPanicked
		upstream.CloseStream(b.resp, b.Err())
	default:
		upstream.CloseStream(b.resp, errClientGone)
	}
	status := b.resp.StatusCode()
	fasthttp.ReleaseResponse(b.resp)
	b.resp = nil
	b.s.deps.Log.Info().Str("request_id", b.id).Str("path", b.path).Int("account", b.account).
		Int("status", status).Bool("complete", complete).Msg("backend call passed through")
	return nil
}

// passFailed answers a backend call whose account's endpoint could not
// be reached, as a model request that finds no endpoint would be.
func (s *Server) passFailed(w responder, r *request, endpoint string, err error) {
	s.refuse(w, r, rerr.Spec{Code: rerr.PoolExhausted, Status: 503,
		Message: "cannot reach " + endpoint + " for this account's backend call: " + err.Error(),
		Extra:   []rerr.Field{{Key: "reason", Value: "network-error"}}}, nil)
}

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
