package oauth_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock/clocktest"
	"github.com/rotorproxy/rotor/accounts/oauth"
	"github.com/rotorproxy/rotor/accounts/oauth/oauthtest"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
)

// startAuth runs the fake authorization server for the test's lifetime.
func startAuth(t *testing.T) *oauthtest.Server {
	t.Helper()
	a := oauthtest.New()
	if err := a.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// browser plays the user's browser: it never follows redirects, so the test
// sees where the authorization server sends it.
var browser = &http.Client{
	Timeout:       5 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// consent performs the authorize step of authorizeURL at the fake and
// returns the redirect it answers with (the callback URL with code and state).
func consent(t *testing.T, authorizeURL string) *url.URL {
	t.Helper()
	resp, err := browser.Get(authorizeURL)
	if err != nil {
		t.Fatalf("authorize: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("authorize answered %d: %s", resp.StatusCode, body)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatalf("authorize Location %q: %v", resp.Header.Get("Location"), err)
	}
	return loc
}

// checkAuthorizeURL asserts the authorize URL rotor builds (docs/accounts.md) and
// returns its query.
func checkAuthorizeURL(t *testing.T, base, raw, wantRedirect string) url.Values {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("authorize URL %q: %v", raw, err)
	}
	if got := u.Scheme + "://" + u.Host + u.Path; got != base+"/oauth/authorize" {
		t.Errorf("authorize endpoint %q, want %q", got, base+"/oauth/authorize")
	}
	q := u.Query()
	want := map[string]string{
		"response_type":              "code",
		"client_id":                  "app_EMoamEEZ73f0CkXaXp7hrann",
		"scope":                      "openid profile email offline_access",
		"code_challenge_method":      "S256",
		"id_token_add_organizations": "true",
		"codex_cli_simplified_flow":  "true",
		"prompt":                     "login",
	}
	for k, v := range want {
		if q.Get(k) != v {
			t.Errorf("authorize %s = %q, want %q", k, q.Get(k), v)
		}
	}
	if wantRedirect != "" && q.Get("redirect_uri") != wantRedirect {
		t.Errorf("redirect_uri = %q, want %q", q.Get("redirect_uri"), wantRedirect)
	}
	if len(q.Get("state")) < 32 {
		t.Errorf("state %q: want a random value of at least 32 characters", q.Get("state"))
	}
	if len(q.Get("code_challenge")) != 43 {
		t.Errorf("code_challenge %q: want BASE64URL(SHA256) (43 characters)", q.Get("code_challenge"))
	}
	return q
}

var callbackRE = regexp.MustCompile(`^http://localhost:([0-9]+)/auth/callback$`)

func TestLoginCallbackSignsInWithPKCE(t *testing.T) {
	t.Parallel()
	auth := startAuth(t)
	c := oauth.NewClient(auth.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var opened int
	var callbackStatus int
	var callbackBody string
	open := func(u string) error {
		opened++
		q := checkAuthorizeURL(t, auth.URL(), u, "")
		m := callbackRE.FindStringSubmatch(q.Get("redirect_uri"))
		if m == nil || m[1] == "0" {
			t.Errorf("redirect_uri %q, want http://localhost:<port>/auth/callback", q.Get("redirect_uri"))
			return nil
		}
		loc := consent(t, u)
		if got := loc.Scheme + "://" + loc.Host + loc.Path; got != q.Get("redirect_uri") {
			t.Errorf("the fake redirected to %q, want %q", got, q.Get("redirect_uri"))
		}
		if loc.Query().Get("state") != q.Get("state") || loc.Query().Get("code") == "" {
			t.Errorf("callback query %v", loc.Query())
		}
		resp, err := browser.Get(loc.String())
		if err != nil {
			t.Errorf("callback: %v", err)
			return nil
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		callbackStatus, callbackBody = resp.StatusCode, string(b)
		return nil
	}
	var out bytes.Buffer
	tok, err := c.LoginCallback(ctx, "127.0.0.1:0", open, &out)
	if err != nil {
		t.Fatalf("LoginCallback: %v (callback %d %s)", err, callbackStatus, callbackBody)
	}
	if opened != 1 {
		t.Fatalf("open called %d times", opened)
	}
	if callbackStatus != 200 || !strings.Contains(callbackBody, "Signed in") {
		t.Errorf("browser got %d %q", callbackStatus, callbackBody)
	}
	issued := auth.Issued()
	if len(issued) != 1 || issued[0].Grant != "authorization_code" {
		t.Fatalf("issued %+v", issued)
	}
	if tok.AccessToken != issued[0].AccessToken || tok.RefreshToken != issued[0].RefreshToken || tok.IDToken != issued[0].IDToken {
		t.Error("LoginCallback did not return the tokens the server issued")
	}
	if tok.ExpiresIn != 24*time.Hour {
		t.Errorf("ExpiresIn %s", tok.ExpiresIn)
	}
	id := tok.Identity()
	if id.Email != "ada@example.com" || id.ChatGPTAccountID != oauthtest.DefaultIdentity.AccountID || id.PlanType != "plus" {
		t.Errorf("identity %+v", id)
	}
	// The fake checked BASE64URL(SHA256(code_verifier)) == code_challenge
	// and the redirect_uri; the exchange it accepted carried both.
	reqs := auth.TokenRequests()
	if len(reqs) != 1 {
		t.Fatalf("%d token requests, want 1", len(reqs))
	}
	f := reqs[0].Form
	authz := auth.Authorizations()[0]
	if f.Get("grant_type") != "authorization_code" || f.Get("client_id") != oauth.ClientID ||
		f.Get("redirect_uri") != authz.Get("redirect_uri") || oauthtest.S256(f.Get("code_verifier")) != authz.Get("code_challenge") {
		t.Errorf("exchange form %v (authorize %v)", f, authz)
	}
	if !strings.HasPrefix(reqs[0].ContentType, "application/x-www-form-urlencoded") {
		t.Errorf("exchange content-type %q", reqs[0].ContentType)
	}
	if !strings.Contains(out.String(), "/oauth/authorize?") {
		t.Errorf("the URL was not shown: %q", out.String())
	}
}

// A browser still signed in to one account adds another: rotor asks for a
// fresh login, and the fake, playing a signed-in browser, answers a request
// that does not ask for one with the account it is signed in to.
func TestLoginCallbackAddsAnotherAccountFromASignedInBrowser(t *testing.T) {
	t.Parallel()
	auth := startAuth(t)
	bob := oauthtest.Identity{Email: "bob@example.com", AccountID: "acc-bob", PlanType: "pro"}
	auth.SignInNext(oauthtest.DefaultIdentity, bob)
	c := oauth.NewClient(auth.URL())
	signIn := func(u string) error {
		resp, err := browser.Get(consent(t, u).String())
		if err != nil {
			t.Errorf("callback: %v", err)
			return nil
		}
		resp.Body.Close()
		return nil
	}
	for _, want := range []oauthtest.Identity{oauthtest.DefaultIdentity, bob} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		tok, err := c.LoginCallback(ctx, "127.0.0.1:0", signIn, io.Discard)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if id := tok.Identity(); id.Email != want.Email || id.ChatGPTAccountID != want.AccountID {
			t.Fatalf("signed in as %+v, want %+v", id, want)
		}
	}

	// Without prompt=login the browser's session (now bob) answers, and
	// the account queued next is not signed in.
	auth.SignInNext(oauthtest.DefaultIdentity)
	p := oauth.NewPKCE()
	u, _ := url.Parse(c.AuthorizeURL(p, oauth.NewState(), "http://localhost:1/auth/callback"))
	q := u.Query()
	q.Del("prompt")
	u.RawQuery = q.Encode()
	code := consent(t, u.String()).Query().Get("code")
	tok, err := c.Exchange(context.Background(), code, p.Verifier, "http://localhost:1/auth/callback")
	if err != nil {
		t.Fatal(err)
	}
	if id := tok.Identity(); id.ChatGPTAccountID != bob.AccountID {
		t.Errorf("an authorize request without prompt=login signed in %+v, want the session's bob", id)
	}
}

func TestLoginCallbackPrintsURLWhenNoBrowser(t *testing.T) {
	t.Parallel()
	auth := startAuth(t)
	c := oauth.NewClient(auth.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	_, err := c.LoginCallback(ctx, "127.0.0.1:0", func(string) error { return errors.New("no display") }, &out)
	if !errors.Is(err, oauth.ErrTimeout) {
		t.Fatalf("err %v, want ErrTimeout", err)
	}
	if !strings.Contains(out.String(), "Open this URL in a browser") || !strings.Contains(out.String(), auth.URL()+"/oauth/authorize?") {
		t.Errorf("output %q", out.String())
	}
}

func TestLoginCallbackRejectsWrongState(t *testing.T) {
	t.Parallel()
	auth := startAuth(t)
	c := oauth.NewClient(auth.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var status int
	var body string
	open := func(u string) error {
		loc := consent(t, u)
		q := loc.Query()
		q.Set("state", "forged-"+q.Get("state"))
		loc.RawQuery = q.Encode()
		resp, err := browser.Get(loc.String())
		if err != nil {
			t.Errorf("callback: %v", err)
			return nil
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		status, body = resp.StatusCode, string(b)
		return nil
	}
	start := time.Now()
	_, err := c.LoginCallback(ctx, "127.0.0.1:0", open, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "state") {
		t.Fatalf("err %v, want a state mismatch", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("the rejection took %s", time.Since(start))
	}
	if status != http.StatusBadRequest || !strings.Contains(body, "state") {
		t.Errorf("browser got %d %q, want 400 naming the state", status, body)
	}
	if n := auth.TokenCalls(""); n != 0 {
		t.Errorf("%d token calls after a forged callback, want 0", n)
	}
}

func TestLoginCallbackRefusedByUser(t *testing.T) {
	t.Parallel()
	auth := startAuth(t)
	c := oauth.NewClient(auth.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := func(u string) error {
		q, _ := url.Parse(u)
		cb := q.Query().Get("redirect_uri") + "?error=access_denied&error_description=denied&state=" + url.QueryEscape(q.Query().Get("state"))
		resp, err := browser.Get(cb)
		if err != nil {
			t.Errorf("callback: %v", err)
			return nil
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("browser got %d", resp.StatusCode)
		}
		return nil
	}
	if _, err := c.LoginCallback(ctx, "127.0.0.1:0", open, io.Discard); err == nil || !strings.Contains(err.Error(), "access_denied") {
		t.Fatalf("err %v, want the refusal", err)
	}
	if n := auth.TokenCalls(""); n != 0 {
		t.Errorf("%d token calls", n)
	}
}

func TestLoginCallbackTimesOutAndFreesThePort(t *testing.T) {
	t.Parallel()
	auth := startAuth(t)
	c := oauth.NewClient(auth.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var redirect string
	open := func(u string) error {
		pu, _ := url.Parse(u)
		redirect = pu.Query().Get("redirect_uri")
		return nil // the user never comes back
	}
	start := time.Now()
	_, err := c.LoginCallback(ctx, "127.0.0.1:0", open, io.Discard)
	if !errors.Is(err, oauth.ErrTimeout) {
		t.Fatalf("err %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("timed out after %s, want about 200ms", d)
	}
	m := callbackRE.FindStringSubmatch(redirect)
	if m == nil {
		t.Fatalf("redirect_uri %q", redirect)
	}
	if conn, err := net.DialTimeout("tcp", "127.0.0.1:"+m[1], time.Second); err == nil {
		conn.Close()
		t.Errorf("the callback port %s still accepts connections after the login ended", m[1])
	}
}

func TestLoginCallbackPortInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := oauth.NewClient("http://127.0.0.1:9")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.LoginCallback(ctx, ln.Addr().String(), nil, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--no-browser") {
		t.Fatalf("err %v, want a hint to use --no-browser or --device", err)
	}
}

// syncBuffer is an io.Writer the test can read while a login writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor polls out until re matches, for at most 5 s.
func waitFor(t *testing.T, out *syncBuffer, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s in %q", re, out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var authorizeLineRE = regexp.MustCompile(`(http://\S+/oauth/authorize\?\S+)`)

type loginResult struct {
	tok oauth.Tokens
	err error
}

// paste runs LoginPaste, answers its prompt with edit(redirect) and returns
// what it returned.
func paste(t *testing.T, auth *oauthtest.Server, edit func(u *url.URL) string) loginResult {
	t.Helper()
	c := oauth.NewClient(auth.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pr, pw := io.Pipe()
	defer pw.Close()
	out := &syncBuffer{}
	done := make(chan loginResult, 1)
	go func() {
		tok, err := c.LoginPaste(ctx, pr, out)
		done <- loginResult{tok, err}
	}()
	u := waitFor(t, out, authorizeLineRE)[1]
	checkAuthorizeURL(t, auth.URL(), u, "http://localhost:1455/auth/callback")
	loc := consent(t, u)
	go fmt.Fprintln(pw, edit(loc))
	select {
	case r := <-done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("LoginPaste did not return")
	}
	return loginResult{}
}

func TestLoginPaste(t *testing.T) {
	t.Parallel()
	auth := startAuth(t)
	r := paste(t, auth, func(u *url.URL) string { return u.String() })
	if r.err != nil {
		t.Fatalf("LoginPaste: %v", r.err)
	}
	issued := auth.Issued()
	if len(issued) != 1 || r.tok.AccessToken != issued[0].AccessToken {
		t.Fatalf("tokens do not match the issued ones (%d issued)", len(issued))
	}
	f := auth.TokenRequests()[0].Form
	if f.Get("redirect_uri") != "http://localhost:1455/auth/callback" {
		t.Errorf("exchange redirect_uri %q", f.Get("redirect_uri"))
	}
}

func TestLoginPasteRejectsWrongState(t *testing.T) {
	t.Parallel()
	auth := startAuth(t)
	r := paste(t, auth, func(u *url.URL) string {
		q := u.Query()
		q.Set("state", "not-the-state")
		u.RawQuery = q.Encode()
		return u.String()
	})
	if r.err == nil || !strings.Contains(r.err.Error(), "state") {
		t.Fatalf("err %v, want a state mismatch", r.err)
	}
	if n := auth.TokenCalls(""); n != 0 {
		t.Errorf("%d token calls, want 0", n)
	}
}

func TestLoginPasteRejectsGarbage(t *testing.T) {
	t.Parallel()
	auth := startAuth(t)
	r := paste(t, auth, func(*url.URL) string { return "" })
	if rerr.CodeOf(r.err) != rerr.CodeValidation {
		t.Fatalf("err %v, want VALIDATION", r.err)
	}
}

func TestLoginPasteTimesOut(t *testing.T) {
	t.Parallel()
	auth := startAuth(t)
	c := oauth.NewClient(auth.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	pr, pw := io.Pipe()
	defer pw.Close()
	start := time.Now()
	if _, err := c.LoginPaste(ctx, pr, io.Discard); !errors.Is(err, oauth.ErrTimeout) {
		t.Fatalf("err %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %s", d)
	}
}

var userCodeRE = regexp.MustCompile(`enter the code:\s+(\S+)`)

func TestLoginDevice(t *testing.T) {
	t.Parallel()
	auth := startAuth(t)
	auth.SetDeviceInterval("0.1")
	c := oauth.NewClient(auth.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := &syncBuffer{}
	done := make(chan loginResult, 1)
	start := time.Now()
	go func() {
		tok, err := c.LoginDevice(ctx, out)
		done <- loginResult{tok, err}
	}()
	code := waitFor(t, out, userCodeRE)[1]
	if !strings.Contains(out.String(), auth.URL()+"/codex/device") {
		t.Errorf("verification page not shown: %q", out.String())
	}
	// Let it poll while the code is not entered yet: 403s must not end it.
	deadline := time.Now().Add(3 * time.Second)
	for auth.DevicePolls() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("LoginDevice does not poll")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !auth.ApproveDevice(code) {
		t.Fatalf("no pending device code %q", code)
	}
	var r loginResult
	select {
	case r = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("LoginDevice did not return after approval")
	}
	if r.err != nil {
		t.Fatalf("LoginDevice: %v", r.err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("device login took %s", d)
	}
	issued := auth.Issued()
	if len(issued) != 1 || r.tok.AccessToken != issued[0].AccessToken {
		t.Fatalf("tokens do not match the issued ones (%d issued)", len(issued))
	}
	reqs := auth.TokenRequests()
	if len(reqs) != 1 {
		t.Fatalf("%d token requests", len(reqs))
	}
	if got := reqs[0].Form.Get("redirect_uri"); got != auth.URL()+"/deviceauth/callback" {
		t.Errorf("exchange redirect_uri %q, want %q", got, auth.URL()+"/deviceauth/callback")
	}
}

func TestLoginDeviceTimesOut(t *testing.T) {
	t.Parallel()
	auth := startAuth(t)
	auth.SetDeviceInterval("0.05")
	c := oauth.NewClient(auth.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.LoginDevice(ctx, io.Discard); !errors.Is(err, oauth.ErrTimeout) {
		t.Fatalf("err %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %s", d)
	}
	if auth.TokenCalls("") != 0 {
		t.Error("a token call without approval")
	}
}

func TestExchangeRejectsWrongVerifier(t *testing.T) {
	t.Parallel()
	// The fake's PKCE check is what the login tests rely on: prove it bites.
	auth := startAuth(t)
	c := oauth.NewClient(auth.URL())
	p := oauth.NewPKCE()
	if oauthtest.S256(p.Verifier) != p.Challenge || len(p.Verifier) < 43 {
		t.Fatalf("NewPKCE: challenge is not S256 of the verifier")
	}
	loc := consent(t, c.AuthorizeURL(p, oauth.NewState(), oauth.RedirectURI))
	code := loc.Query().Get("code")
	other := oauth.NewPKCE()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Exchange(ctx, code, other.Verifier, oauth.RedirectURI); err == nil {
		t.Fatal("exchange with another verifier succeeded")
	}
	// The code is spent by the failed attempt, as OAuth requires.
	if _, err := c.Exchange(ctx, code, p.Verifier, oauth.RedirectURI); err == nil {
		t.Fatal("a spent code was accepted")
	}
}

// checkRefreshErr asserts a failed refresh's typed error.
func checkRefreshErr(t *testing.T, err error, retryable bool, secret string) {
	t.Helper()
	if rerr.CodeOf(err) != rerr.CodeAuthRefreshFailed {
		t.Fatalf("err %v, want AUTH_REFRESH_FAILED", err)
	}
	if rerr.IsRetryable(err) != retryable {
		t.Errorf("retryable %v, want %v (%v)", rerr.IsRetryable(err), retryable, err)
	}
	if err.Error() != "Failed to refresh token, authentication required" {
		t.Errorf("message %q", err.Error())
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if s := fmt.Sprintf("%v %+v", e, e); strings.Contains(s, secret) {
			t.Errorf("the error chain quotes the refresh token: %s", s)
		}
	}
}

func TestRefresh(t *testing.T) {
	t.Parallel()
	auth := startAuth(t)
	c := oauth.NewClient(auth.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const rt = "rt_test_refresh_token_8f2c"
	auth.AddRefreshToken(rt)

	tok, err := c.Refresh(ctx, rt)
	if err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	issued := auth.Issued()
	if len(issued) != 1 || tok.AccessToken != issued[0].AccessToken || tok.RefreshToken != issued[0].RefreshToken || tok.IDToken != issued[0].IDToken {
		t.Fatal("Refresh did not return the issued tokens")
	}
	if tok.RefreshToken == rt {
		t.Error("the refresh token was not rotated")
	}
	req := auth.TokenRequests()[0]
	want := url.Values{"grant_type": {"refresh_token"}, "client_id": {oauth.ClientID}, "refresh_token": {rt}, "scope": {"openid profile email"}}
	if fmt.Sprint(req.Form) != fmt.Sprint(want) {
		t.Errorf("refresh form %v, want %v", req.Form, want)
	}
	if !strings.HasPrefix(req.ContentType, "application/x-www-form-urlencoded") {
		t.Errorf("content-type %q", req.ContentType)
	}

	t.Run("reused", func(t *testing.T) {
		_, err := c.Refresh(ctx, rt)
		checkRefreshErr(t, err, false, rt)
	})
	t.Run("unknown is invalid_grant", func(t *testing.T) {
		_, err := c.Refresh(ctx, "rt_never_issued_5d1e")
		checkRefreshErr(t, err, false, "rt_never_issued_5d1e")
	})
	t.Run("expired", func(t *testing.T) {
		auth.FailRefresh(401, `{"error":{"message":"Your refresh token has expired.","type":"invalid_request_error","code":"refresh_token_expired"}}`)
		defer auth.FailRefresh(0, "")
		_, err := c.Refresh(ctx, tok.RefreshToken)
		checkRefreshErr(t, err, false, tok.RefreshToken)
	})
	t.Run("invalid_grant object form", func(t *testing.T) {
		auth.FailRefresh(400, `{"error":{"code":"invalid_grant","message":"bad"}}`)
		defer auth.FailRefresh(0, "")
		_, err := c.Refresh(ctx, tok.RefreshToken)
		checkRefreshErr(t, err, false, tok.RefreshToken)
	})
	t.Run("server error is retryable", func(t *testing.T) {
		auth.FailRefresh(500, `{"error":"server_error"}`)
		defer auth.FailRefresh(0, "")
		_, err := c.Refresh(ctx, tok.RefreshToken)
		checkRefreshErr(t, err, true, tok.RefreshToken)
	})
	t.Run("network error is retryable", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, err = oauth.NewClient("http://"+addr).Refresh(ctx, tok.RefreshToken)
		checkRefreshErr(t, err, true, tok.RefreshToken)
	})
	t.Run("still valid after the failures", func(t *testing.T) {
		// Failed answers never spent the token.
		if _, err := c.Refresh(ctx, tok.RefreshToken); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
	})
}

func TestRefreshKeepsRefreshTokenWhenNotRotated(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"access_token":"at-new","expires_in":3600}`)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tok, err := oauth.NewClient(srv.URL).Refresh(ctx, "rt-keep")
	if err != nil {
		t.Fatal(err)
	}
	if tok.AccessToken != "at-new" || tok.RefreshToken != "rt-keep" || tok.ExpiresIn != time.Hour {
		t.Errorf("tokens %+v", tok)
	}
	s := oauth.SecretFrom(tok, time.Unix(1_800_000_000, 0))
	if !s.ExpiresAt.Equal(time.Unix(1_800_003_600, 0)) {
		t.Errorf("expiry from expires_in: %s", s.ExpiresAt)
	}
}

// refreshEnv is a ROTOR_HOME with one ChatGPT account whose secret is in
// the file store.
type refreshEnv struct {
	dir  string
	acct accounts.Account
	auth *oauthtest.Server
}

func newRefreshEnv(t *testing.T, sec secrets.Secret) *refreshEnv {
	t.Helper()
	e := &refreshEnv{
		dir:  t.TempDir(),
		acct: accounts.Account{ID: "acct_refresh_1", Label: "ada", Kind: accounts.KindChatGPT, Enabled: true},
		auth: startAuth(t),
	}
	st, err := secrets.Open(e.dir, "file", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Set(e.acct.ID, sec); err != nil {
		t.Fatal(err)
	}
	return e
}

// refresher returns a Refresher with its own secrets handle, as another
// rotor process on the same ROTOR_HOME would have.
func (e *refreshEnv) refresher(t *testing.T, flag func(id, reason string) error) *oauth.Refresher {
	t.Helper()
	st, err := secrets.Open(e.dir, "file", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return &oauth.Refresher{Client: oauth.NewClient(e.auth.URL()), Secrets: st, Dir: e.dir, Flag: flag, Clock: clocktest.Real()}
}

func (e *refreshEnv) stored(t *testing.T) secrets.Secret {
	t.Helper()
	st, _ := secrets.Open(e.dir, "file", io.Discard)
	s, err := st.Get(e.acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRefresherSerializesConcurrentRefreshes(t *testing.T) {
	t.Parallel()
	stale := secrets.Secret{AccessToken: "at-stale", RefreshToken: "rt-single-use-1", ExpiresAt: time.Now().Add(time.Hour)}
	e := newRefreshEnv(t, stale)
	e.auth.AddRefreshToken(stale.RefreshToken)
	e.auth.SetTokenDelay(150 * time.Millisecond) // the second one arrives while the first is in flight

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 2
	got := make([]secrets.Secret, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	startGate := make(chan struct{})
	for i := range n {
		r := e.refresher(t, func(id, reason string) error {
			t.Errorf("Flag(%s, %s) on a healthy account", id, reason)
			return nil
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startGate
			got[i], errs[i] = r.Refresh(ctx, e.acct, stale)
		}()
	}
	close(startGate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("refresh %d: %v", i, err)
		}
	}
	if n := e.auth.TokenCalls("refresh_token"); n != 1 {
		t.Fatalf("%d refresh calls reached the token endpoint, want exactly 1", n)
	}
	issued := e.auth.Issued()[0]
	for i, s := range got {
		if s.AccessToken != issued.AccessToken || s.RefreshToken != issued.RefreshToken {
			t.Errorf("refresh %d returned other tokens than the one refresh issued", i)
		}
	}
	s := e.stored(t)
	if s.AccessToken != issued.AccessToken || s.RefreshToken != issued.RefreshToken || s.IDToken != issued.IDToken {
		t.Error("secrets.json does not hold the new tokens")
	}
	if d := time.Until(s.ExpiresAt); d < 23*time.Hour || d > 25*time.Hour {
		t.Errorf("stored expiry %s, want the access token's exp (24h)", s.ExpiresAt)
	}
}

func TestRefresherRefreshesExpiringTokenOfAnotherProcess(t *testing.T) {
	t.Parallel()
	// Another process refreshed, but what it stored is about to expire too:
	// refresh again rather than hand out a dying token.
	cur := secrets.Secret{AccessToken: "at-other", RefreshToken: "rt-other", IDToken: "idt-keep", ExpiresAt: time.Now().Add(time.Minute)}
	e := newRefreshEnv(t, cur)
	e.auth.AddRefreshToken(cur.RefreshToken)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := e.refresher(t, nil).Refresh(ctx, e.acct, secrets.Secret{AccessToken: "at-old"})
	if err != nil {
		t.Fatal(err)
	}
	if e.auth.TokenCalls("refresh_token") != 1 || got.AccessToken != e.auth.Issued()[0].AccessToken {
		t.Errorf("refresh calls %d", e.auth.TokenCalls("refresh_token"))
	}
	if !oauth.Expiring(cur, time.Now()) || oauth.Expiring(got, time.Now()) {
		t.Error("Expiring disagrees")
	}
}

func TestRefresherFlagsDeadRefreshToken(t *testing.T) {
	t.Parallel()
	stale := secrets.Secret{AccessToken: "at-stale", RefreshToken: "rt-dead-7a1b"}
	e := newRefreshEnv(t, stale) // the fake never issued rt-dead: invalid_grant
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var flags []string
	r := e.refresher(t, func(id, reason string) error {
		flags = append(flags, id+" "+reason)
		return nil
	})
	_, err := r.Refresh(ctx, e.acct, stale)
	checkRefreshErr(t, err, false, stale.RefreshToken)
	if len(flags) != 1 || flags[0] != e.acct.ID+" "+accounts.FlagTokenInvalid {
		t.Errorf("flags %v, want [%s %s]", flags, e.acct.ID, accounts.FlagTokenInvalid)
	}
	if s := e.stored(t); s.AccessToken != stale.AccessToken || s.RefreshToken != stale.RefreshToken {
		t.Error("a failed refresh changed the stored secret")
	}
}

func TestRefresherDoesNotFlagOnServerError(t *testing.T) {
	t.Parallel()
	stale := secrets.Secret{AccessToken: "at-stale", RefreshToken: "rt-ok-3c"}
	e := newRefreshEnv(t, stale)
	e.auth.AddRefreshToken(stale.RefreshToken)
	e.auth.FailRefresh(503, `{"error":"temporarily_unavailable"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := e.refresher(t, func(id, reason string) error {
		t.Errorf("Flag(%s, %s) after a 503", id, reason)
		return nil
	})
	_, err := r.Refresh(ctx, e.acct, stale)
	checkRefreshErr(t, err, true, stale.RefreshToken)
}

func TestRefresherWithoutRefreshToken(t *testing.T) {
	t.Parallel()
	stale := secrets.Secret{AccessToken: "at-only"}
	e := newRefreshEnv(t, stale)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := e.refresher(t, nil).Refresh(ctx, e.acct, stale)
	if rerr.CodeOf(err) != rerr.CodeAuthRefreshFailed || rerr.IsRetryable(err) {
		t.Fatalf("err %v, want a non-retryable AUTH_REFRESH_FAILED", err)
	}
	if e.auth.TokenCalls("") != 0 {
		t.Error("a token call without a refresh token")
	}
}
