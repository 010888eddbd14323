// Package oauthtest is a fake of auth.openai.com for rotor's tests and
// `make demo`: the authorization-code flow with PKCE, the device-code flow
// and the token endpoint, with recorded requests and injectable failures.
// It is never part of the rotor binary.
package oauthtest

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ClientID is the OAuth client id the fake authorization server accepts:
// the one Codex CLI registered and rotor signs in as (docs/accounts.md).
const ClientID = "app_EMoamEEZ73f0CkXaXp7hrann"

// DefaultIdentity is the account the fake's browser is signed in to unless
// SetIdentity says otherwise: the account of the testdata/jwt fixtures.
var DefaultIdentity = Identity{
	Email:     "ada@example.com",
	AccountID: "7f3c2a10-5b6e-4d8f-9a01-fixture00001",
	PlanType:  "plus",
}

// Identity is the ChatGPT account the fake's tokens describe.
type Identity struct {
	Email     string
	AccountID string // claim https://api.openai.com/auth chatgpt_account_id
	PlanType  string // claim https://api.openai.com/auth chatgpt_plan_type
}

// IssuedTokens is one answer of the fake's token endpoint.
type IssuedTokens struct {
	Grant        string // "authorization_code" or "refresh_token"
	IDToken      string
	AccessToken  string
	RefreshToken string
}

// TokenRequest is one POST /oauth/token the fake received.
type TokenRequest struct {
	ContentType string
	Form        url.Values
}

// Server is a fake OpenAI authorization server (auth.openai.com) for
// rotor's tests and `make demo`, the counterpart of Server for
// ROTOR_AUTH_BASE_URL. It implements, strictly, what rotor uses:
//
//   - GET /oauth/authorize: checks the request (client id, response_type
//     code, redirect_uri, an S256 code_challenge) and, playing a user who
//     consents at once, answers 302 to redirect_uri?code=…&state=…. It
//     plays the user's browser too, which is signed in to one account (the
//     browser's current session, SetIdentity): a request without
//     prompt=login is answered at once with that account, as a real
//     signed-in browser answers it, so a client that does not ask for a
//     fresh login can never add a second account. With prompt=login the
//     user signs in with the account the test chose next (SignInNext; the
//     session's own when none is queued), which becomes the session.
//   - POST /oauth/token (form-encoded only): grant_type=authorization_code
//     checks the code, its redirect_uri and that BASE64URL(SHA256(
//     code_verifier)) is the code_challenge of the authorize step; each code
//     works once. grant_type=refresh_token accepts each refresh token once
//     (single-use, like the real server): a spent one answers 400
//     {"error":"refresh_token_reused"}, an unknown one 400
//     {"error":"invalid_grant"}. Every success issues a new id token,
//     access token (unsigned JWTs with the https://api.openai.com/auth claim,
//     see FakeJWT) and refresh token.
//   - POST /api/accounts/deviceauth/usercode and /deviceauth/token: the
//     device-code flow. Polls answer 403 until the code is approved
//     (ApproveDevice, or SetDeviceApproveAfter), then once with an
//     authorization code and its code_verifier, to be exchanged with
//     redirect_uri <URL>/deviceauth/callback. The code is entered on a page
//     of the browser's session, so it signs in that account.
//
// Tokens describe the account they were issued for: a refresh keeps the
// account of the refresh token it spends (a token given by AddRefreshToken
// belongs to the session's account at the time it is refreshed).
//
// Create it with NewAuth, configure it (at any time), Start it, Close it. All
// methods are safe for concurrent use.
type Server struct {
	mu           sync.Mutex
	ident        Identity   // the browser's current session
	next         []Identity // who the user signs in with when asked to (prompt=login), in turn
	accessTTL    time.Duration
	interval     string
	approveAfter int
	delay        time.Duration
	fail         failure            // every refresh grant's answer, when status is set
	failToken    map[string]failure // refresh token -> its own error answer
	names        func(spent string) (access, refresh string)
	hold         chan struct{} // non-nil: refresh answers wait until it is closed

	seq        int
	codes      map[string]*authCode
	refresh    map[string]bool     // refresh token -> spent
	owner      map[string]Identity // refresh token the fake issued -> its account
	devices    map[string]*deviceAuth
	authorizes []url.Values
	tokenReqs  []TokenRequest
	grants     map[string]int
	issued     []IssuedTokens
	polls      int

	srv       *http.Server
	ln        net.Listener
	serveDone chan struct{}
	closed    bool
	done      chan struct{}
}

type failure struct {
	status int
	body   string
}

type authCode struct {
	challenge string
	redirect  string
	ident     Identity // the account signed in
	used      bool
}

type deviceAuth struct {
	id, userCode string
	approved     bool
	polls        int
	done         bool
}

// NewAuth returns a fake authorization server signing in
// DefaultIdentity, with access tokens valid for 24 h and a device-flow
// poll interval of 5 s.
func New() *Server {
	return &Server{
		ident:     DefaultIdentity,
		accessTTL: 24 * time.Hour,
		interval:  "5",
		codes:     make(map[string]*authCode),
		refresh:   make(map[string]bool),
		owner:     make(map[string]Identity),
		devices:   make(map[string]*deviceAuth),
		grants:    make(map[string]int),
		failToken: make(map[string]failure),
		done:      make(chan struct{}),
	}
}

// Start listens on addr ("" means 127.0.0.1:0) and serves until Close.
func (a *Server) Start(addr string) error {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return errors.New("oauthtest: server is closed")
	}
	if a.srv != nil {
		return errors.New("oauthtest: server already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /oauth/authorize", a.handleAuthorize)
	mux.HandleFunc("POST /oauth/token", a.handleToken)
	mux.HandleFunc("POST /api/accounts/deviceauth/usercode", a.handleUserCode)
	mux.HandleFunc("POST /api/accounts/deviceauth/token", a.handleDeviceToken)
	a.ln = ln
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	a.serveDone = make(chan struct{})
	srv, done := a.srv, a.serveDone
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return nil
}

// URL is the server's base URL (the value for ROTOR_AUTH_BASE_URL), "" before Start.
func (a *Server) URL() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ln == nil {
		return ""
	}
	return "http://" + a.ln.Addr().String()
}

// Close stops the server and ends in-flight requests (a delayed token
// answer included). It is safe to call more than once and before Start.
func (a *Server) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	close(a.done)
	srv, serveDone := a.srv, a.serveDone
	a.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Close()
	<-serveDone
	return err
}

// SetIdentity signs the browser in to id: the browser's current session,
// which later authorize requests without prompt=login, device codes and
// refreshes of tokens given by AddRefreshToken sign in.
func (a *Server) SetIdentity(id Identity) {
	a.mu.Lock()
	a.ident = id
	a.mu.Unlock()
}

// SignInNext queues the accounts the user signs in with, one per
// authorize request with prompt=login, in order; each becomes the browser's
// session. With none queued, the user signs in with the session's account.
func (a *Server) SignInNext(ids ...Identity) {
	a.mu.Lock()
	a.next = append(a.next, ids...)
	a.mu.Unlock()
}

// SetAccessTTL sets the lifetime (exp claim and expires_in) of later access tokens.
func (a *Server) SetAccessTTL(d time.Duration) {
	a.mu.Lock()
	a.accessTTL = d
	a.mu.Unlock()
}

// SetDeviceInterval sets the "interval" the usercode answer carries. The
// real server sends seconds as a string (e.g. "5"); tests use "0.1".
func (a *Server) SetDeviceInterval(v string) {
	a.mu.Lock()
	a.interval = v
	a.mu.Unlock()
}

// SetDeviceApproveAfter approves every device code by itself on its n-th
// poll (0: only ApproveDevice approves).
func (a *Server) SetDeviceApproveAfter(n int) {
	a.mu.Lock()
	a.approveAfter = n
	a.mu.Unlock()
}

// SetTokenDelay delays every refresh_token answer by d (after the request
// was recorded), to widen the window in which concurrent refreshes overlap.
func (a *Server) SetTokenDelay(d time.Duration) {
	a.mu.Lock()
	a.delay = d
	a.mu.Unlock()
}

// HoldRefreshes makes refresh_token grants wait, after being recorded (so
// TokenCalls counts them), until release is called (or Close). Tests use it
// to let every concurrent request reach the refresh path before the first
// refresh completes. release may be called more than once.
func (a *Server) HoldRefreshes() (release func()) {
	ch := make(chan struct{})
	a.mu.Lock()
	a.hold = ch
	a.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			if a.hold == ch {
				a.hold = nil
			}
			a.mu.Unlock()
			close(ch)
		})
	}
}

// FailRefresh makes refresh_token grants answer status with body (JSON)
// without spending the refresh token; status 0 restores normal answers.
func (a *Server) FailRefresh(status int, body string) {
	a.mu.Lock()
	a.fail = failure{status, body}
	a.mu.Unlock()
}

// FailRefreshToken makes grants of refresh token rt alone answer status
// with body (JSON), without spending it: one account's token endpoint
// trouble among others that refresh fine.
func (a *Server) FailRefreshToken(rt string, status int, body string) {
	a.mu.Lock()
	a.failToken[rt] = failure{status, body}
	a.mu.Unlock()
}

// SetTokenNames makes a refresh grant that spends refresh token spent issue
// the access and refresh tokens names returns, instead of minted ones, so
// a test can know an account's next tokens before rotor asks for them
// (e.g. to make the upstream refuse the new access token). nil restores
// minted tokens.
func (a *Server) SetTokenNames(names func(spent string) (access, refresh string)) {
	a.mu.Lock()
	a.names = names
	a.mu.Unlock()
}

// AddRefreshToken makes rt a valid, unspent refresh token (e.g. the one of
// testdata/jwt/codex_auth.json).
func (a *Server) AddRefreshToken(rt string) {
	a.mu.Lock()
	a.refresh[rt] = false
	a.mu.Unlock()
}

// ApproveDevice approves the pending device code userCode, as the user who
// entered it at the verification page; false if there is no such code.
func (a *Server) ApproveDevice(userCode string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, d := range a.devices {
		if d.userCode == userCode && !d.done {
			d.approved = true
			return true
		}
	}
	return false
}

// TokenCalls counts the POST /oauth/token requests with grant_type grant
// ("" counts them all), successful or not.
func (a *Server) TokenCalls(grant string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if grant == "" {
		return len(a.tokenReqs)
	}
	return a.grants[grant]
}

// TokenRequests returns copies of every POST /oauth/token received, oldest first.
func (a *Server) TokenRequests() []TokenRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]TokenRequest, len(a.tokenReqs))
	for i, r := range a.tokenReqs {
		out[i] = TokenRequest{ContentType: r.ContentType, Form: cloneValues(r.Form)}
	}
	return out
}

// RefreshCalls counts the refresh_token grants that presented rt,
// answered or not.
func (a *Server) RefreshCalls(rt string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, r := range a.tokenReqs {
		if r.Form.Get("grant_type") == "refresh_token" && r.Form.Get("refresh_token") == rt {
			n++
		}
	}
	return n
}

// Authorizations returns copies of the queries of every GET
// /oauth/authorize received, oldest first.
func (a *Server) Authorizations() []url.Values {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]url.Values, len(a.authorizes))
	for i, q := range a.authorizes {
		out[i] = cloneValues(q)
	}
	return out
}

// Issued returns the tokens issued so far, oldest first.
func (a *Server) Issued() []IssuedTokens {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]IssuedTokens(nil), a.issued...)
}

// DevicePolls counts the polls of /api/accounts/deviceauth/token.
func (a *Server) DevicePolls() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.polls
}

func cloneValues(v url.Values) url.Values {
	out := make(url.Values, len(v))
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// FakeJWT returns an unsigned JWT (header.payload.signature, base64url
// without padding; the signature segment is not a signature) carrying
// claims. rotor reads JWT claims without verifying signatures.
func FakeJWT(claims map[string]any) string {
	head := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT","kid":"fakeupstream"}`))
	payload, _ := json.Marshal(claims)
	return head + "." + base64.RawURLEncoding.EncodeToString(payload) + "." +
		base64.RawURLEncoding.EncodeToString([]byte("fakeupstream-unsigned"))
}

// S256 is BASE64URL(SHA256(verifier)), the PKCE code challenge of verifier.
func S256(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// oauthError writes an OAuth error answer ({"error":code,"error_description":desc}).
func oauthError(w http.ResponseWriter, status int, code, desc string) {
	body, _ := json.Marshal(map[string]string{"error": code, "error_description": desc})
	writeJSON(w, status, body)
}

func (a *Server) handleAuthorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	a.mu.Lock()
	a.authorizes = append(a.authorizes, cloneValues(q))
	a.mu.Unlock()
	redirect := q.Get("redirect_uri")
	switch {
	case q.Get("client_id") != ClientID:
		oauthError(w, http.StatusBadRequest, "invalid_client", "unknown client_id")
		return
	case q.Get("response_type") != "code":
		oauthError(w, http.StatusBadRequest, "unsupported_response_type", "response_type must be code")
		return
	case redirect == "":
		oauthError(w, http.StatusBadRequest, "invalid_request", "redirect_uri is required")
		return
	case q.Get("code_challenge") == "" || q.Get("code_challenge_method") != "S256":
		oauthError(w, http.StatusBadRequest, "invalid_request", "an S256 code_challenge is required")
		return
	}
	ru, err := url.Parse(redirect)
	if err != nil || ru.Scheme == "" || ru.Host == "" {
		oauthError(w, http.StatusBadRequest, "invalid_request", "redirect_uri is not an absolute URL")
		return
	}
	code := "ac_" + randomHex(16)
	a.mu.Lock()
	// A signed-in browser asked for no fresh login answers with its
	// session at once; asked for one, the user signs in.
	if q.Get("prompt") == "login" && len(a.next) > 0 {
		a.ident, a.next = a.next[0], a.next[1:]
	}
	a.codes[code] = &authCode{challenge: q.Get("code_challenge"), redirect: redirect, ident: a.ident}
	a.mu.Unlock()
	rq := ru.Query()
	rq.Set("code", code)
	if st := q.Get("state"); st != "" {
		rq.Set("state", st)
	}
	ru.RawQuery = rq.Encode()
	w.Header().Set("Location", ru.String())
	w.WriteHeader(http.StatusFound)
}

func (a *Server) handleToken(w http.ResponseWriter, r *http.Request) {
	ct := r.Header.Get("Content-Type")
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	mt, _, _ := mime.ParseMediaType(ct)
	form, perr := url.ParseQuery(string(body))
	grant := form.Get("grant_type")
	a.mu.Lock()
	a.tokenReqs = append(a.tokenReqs, TokenRequest{ContentType: ct, Form: cloneValues(form)})
	a.grants[grant]++
	a.mu.Unlock()
	switch {
	case mt != "application/x-www-form-urlencoded" || perr != nil:
		oauthError(w, http.StatusBadRequest, "invalid_request", "the token endpoint takes a form-encoded body")
		return
	case form.Get("client_id") != ClientID:
		oauthError(w, http.StatusUnauthorized, "invalid_client", "unknown client_id")
		return
	}
	switch grant {
	case "authorization_code":
		a.grantCode(w, form)
	case "refresh_token":
		a.grantRefresh(w, r, form)
	default:
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "unsupported grant_type "+strconv.Quote(grant))
	}
}

func (a *Server) grantCode(w http.ResponseWriter, form url.Values) {
	a.mu.Lock()
	c, ok := a.codes[form.Get("code")]
	var problem string
	switch {
	case !ok:
		problem = "unknown authorization code"
	case c.used:
		problem = "authorization code already used"
	case form.Get("redirect_uri") != c.redirect:
		problem = "redirect_uri does not match the authorization request"
	case form.Get("code_verifier") == "" || S256(form.Get("code_verifier")) != c.challenge:
		problem = "code_verifier does not match the code_challenge"
	}
	if ok {
		c.used = true // a code is spent by any exchange attempt, as OAuth requires
	}
	if problem != "" {
		a.mu.Unlock()
		oauthError(w, http.StatusBadRequest, "invalid_grant", problem)
		return
	}
	t := a.issueLocked("authorization_code", "", c.ident)
	a.mu.Unlock()
	a.writeTokens(w, t)
}

func (a *Server) grantRefresh(w http.ResponseWriter, r *http.Request, form url.Values) {
	a.mu.Lock()
	delay, fail, hold := a.delay, a.fail, a.hold
	a.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		case <-a.done:
			return
		}
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-a.done:
			return
		}
	}
	if fail.status != 0 {
		writeJSON(w, fail.status, []byte(fail.body))
		return
	}
	rt := form.Get("refresh_token")
	a.mu.Lock()
	spent, known := a.refresh[rt]
	f, fails := a.failToken[rt]
	switch {
	case fails:
		a.mu.Unlock()
		writeJSON(w, f.status, []byte(f.body))
		return
	case !known:
		a.mu.Unlock()
		oauthError(w, http.StatusBadRequest, "invalid_grant", "unknown refresh token")
		return
	case spent:
		a.mu.Unlock()
		oauthError(w, http.StatusBadRequest, "refresh_token_reused", "this refresh token was already used; sign in again")
		return
	}
	a.refresh[rt] = true
	id, issued := a.owner[rt]
	if !issued {
		id = a.ident
	}
	t := a.issueLocked("refresh_token", rt, id)
	a.mu.Unlock()
	a.writeTokens(w, t)
}

// issueLocked mints a new token set of account id for grant and makes its
// refresh token valid; a refresh grant that spent refresh token spent
// takes its tokens' names from SetTokenNames when set. The caller holds a.mu.
func (a *Server) issueLocked(grant, spent string, id Identity) IssuedTokens {
	a.seq++
	now := time.Now()
	exp := now.Add(a.accessTTL)
	auth := map[string]any{
		"chatgpt_account_id": id.AccountID,
		"chatgpt_plan_type":  id.PlanType,
		"chatgpt_user_id":    "user-fakeupstream",
	}
	t := IssuedTokens{
		Grant: grant,
		IDToken: FakeJWT(map[string]any{
			"iss": a.urlLocked(), "aud": []string{ClientID}, "sub": "auth0|fakeupstream",
			"email": id.Email, "email_verified": true,
			"https://api.openai.com/auth": auth,
			"iat":                         now.Unix(), "exp": now.Add(time.Hour).Unix(),
		}),
		AccessToken: FakeJWT(map[string]any{
			"iss": a.urlLocked(), "aud": []string{"https://api.openai.com/v1"}, "sub": "auth0|fakeupstream",
			"https://api.openai.com/auth":    auth,
			"https://api.openai.com/profile": map[string]any{"email": id.Email, "email_verified": true},
			"scp":                            []string{"openid", "profile", "email", "offline_access"},
			"jti":                            fmt.Sprintf("at-%d-%s", a.seq, randomHex(4)),
			"iat":                            now.Unix(), "exp": exp.Unix(),
		}),
		RefreshToken: fmt.Sprintf("rt_fake_%d_%s", a.seq, randomHex(12)),
	}
	if spent != "" && a.names != nil {
		t.AccessToken, t.RefreshToken = a.names(spent)
	}
	a.refresh[t.RefreshToken] = false
	a.owner[t.RefreshToken] = id
	a.issued = append(a.issued, t)
	return t
}

// urlLocked is URL for callers holding a.mu.
func (a *Server) urlLocked() string {
	if a.ln == nil {
		return ""
	}
	return "http://" + a.ln.Addr().String()
}

func (a *Server) writeTokens(w http.ResponseWriter, t IssuedTokens) {
	a.mu.Lock()
	ttl := int64(a.accessTTL / time.Second)
	a.mu.Unlock()
	body, _ := json.Marshal(map[string]any{
		"id_token": t.IDToken, "access_token": t.AccessToken, "refresh_token": t.RefreshToken,
		"token_type": "Bearer", "expires_in": ttl, "scope": "openid profile email offline_access",
	})
	writeJSON(w, http.StatusOK, body)
}

func (a *Server) handleUserCode(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ClientID string `json:"client_id"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "the body must be JSON")
		return
	}
	if req.ClientID != ClientID {
		oauthError(w, http.StatusBadRequest, "invalid_client", "unknown client_id")
		return
	}
	d := &deviceAuth{id: "deviceauth_" + randomHex(12), userCode: userCode()}
	a.mu.Lock()
	a.devices[d.id] = d
	interval := a.interval
	a.mu.Unlock()
	body, _ := json.Marshal(map[string]string{"device_auth_id": d.id, "user_code": d.userCode, "interval": interval})
	writeJSON(w, http.StatusOK, body)
}

// userCode returns a code like "K7QF-3MZD" (no 0/O/1/I to misread).
func userCode() string {
	const alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	var sb strings.Builder
	for i, c := range b {
		if i == 4 {
			sb.WriteByte('-')
		}
		sb.WriteByte(alphabet[int(c)%len(alphabet)])
	}
	return sb.String()
}

func (a *Server) handleDeviceToken(w http.ResponseWriter, r *http.Request) {
	var req struct {
		DeviceAuthID string `json:"device_auth_id"`
		UserCode     string `json:"user_code"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "the body must be JSON")
		return
	}
	a.mu.Lock()
	a.polls++
	d, ok := a.devices[req.DeviceAuthID]
	if !ok || d.done || d.userCode != req.UserCode {
		a.mu.Unlock()
		oauthError(w, http.StatusBadRequest, "invalid_request", "unknown or finished device authorization")
		return
	}
	d.polls++
	if a.approveAfter > 0 && d.polls >= a.approveAfter {
		d.approved = true
	}
	if !d.approved {
		a.mu.Unlock()
		body := `{"error":{"message":"Device authorization is pending. Enter the code at the verification page.","type":"invalid_request_error","code":"deviceauth_authorization_pending"}}`
		writeJSON(w, http.StatusForbidden, []byte(body))
		return
	}
	d.done = true
	verifier := randomHex(32)
	code := "ac_" + randomHex(16)
	a.codes[code] = &authCode{challenge: S256(verifier), redirect: a.urlLocked() + "/deviceauth/callback", ident: a.ident}
	a.mu.Unlock()
	body, _ := json.Marshal(map[string]string{
		"authorization_code": code, "code_challenge": S256(verifier), "code_verifier": verifier,
	})
	writeJSON(w, http.StatusOK, body)
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}
