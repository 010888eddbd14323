// Package oauth signs ChatGPT accounts in and keeps their tokens fresh
// (docs/accounts.md): OAuth 2 authorization code with PKCE (S256) through a callback
// on localhost:1455 or a pasted redirect URL, the device-code flow, and
// refresh. Refresh tokens are single-use, so Refresher serializes refreshes
// of one account across every rotor process on a ROTOR_HOME.
package oauth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/accounts/netproxy"
	rerr "github.com/rotorproxy/rotor/errors"
)

// The OAuth client Codex CLI registered; rotor signs in as it.
const (
	ClientID       = "app_EMoamEEZ73f0CkXaXp7hrann"
	RedirectURI    = "http://localhost:1455/auth/callback"
	CallbackPort   = 1455
	LoginScope     = "openid profile email offline_access"
	RefreshScope   = "openid profile email"
	DefaultBase    = "https://auth.openai.com"
	DefaultTimeout = 5 * time.Minute
)

// Tokens is what the token endpoint returns.
type Tokens struct {
	IDToken      string
	AccessToken  string
	RefreshToken string
	// ExpiresIn is the access token's lifetime as the server stated it.
	ExpiresIn time.Duration
}

// Client talks to the authorization server at Base.
type Client struct {
	Base string
	HTTP *http.Client
}

// NewClient returns a client for base (ROTOR_AUTH_BASE_URL, default
// https://auth.openai.com) whose every call is bounded by 30 s.
func NewClient(base string) *Client {
	if base == "" {
		base = DefaultBase
	}
	return &Client{Base: strings.TrimRight(base, "/"), HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// Through returns a copy of c whose requests go through the proxy that
// rule picks for them (nil: straight, whatever the process environment
// says): an account's own proxy, or the environment's rule read through
// rotor's getenv (docs/service.md). The copy keeps no idle connection, since it
// serves one sign-in or one refresh.
func (c *Client) Through(rule netproxy.Func) *Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = func(r *http.Request) (*url.URL, error) {
		if rule == nil {
			return nil, nil
		}
		return rule(r.URL)
	}
	t.DisableKeepAlives = true
	through := *c
	through.HTTP = &http.Client{Timeout: c.HTTP.Timeout, Transport: t}
	return &through
}

// PKCE is a verifier and its S256 challenge.
type PKCE struct {
	Verifier  string
	Challenge string
}

// NewPKCE returns a fresh verifier (64 random bytes, base64url) and its
// challenge, BASE64URL(SHA256(verifier)).
func NewPKCE() PKCE {
	var b [64]byte
	rand.Read(b[:])
	v := base64.RawURLEncoding.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(v))
	return PKCE{Verifier: v, Challenge: base64.RawURLEncoding.EncodeToString(sum[:])}
}

// NewState returns a random state value to tie a callback to its request.
func NewState() string {
	var b [32]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// AuthorizeURL is the URL the user opens to sign in. It asks for a fresh
// login (prompt=login): a browser already signed in to ChatGPT would
// otherwise answer at once with that account, and a second "rotor login"
// could never add a second account.
func (c *Client) AuthorizeURL(p PKCE, state, redirect string) string {
	q := url.Values{
		"response_type":              {"code"},
		"client_id":                  {ClientID},
		"redirect_uri":               {redirect},
		"scope":                      {LoginScope},
		"code_challenge":             {p.Challenge},
		"code_challenge_method":      {"S256"},
		"id_token_add_organizations": {"true"},
		"codex_cli_simplified_flow":  {"true"},
		"prompt":                     {"login"},
		"state":                      {state},
	}
	return c.Base + "/oauth/authorize?" + q.Encode()
}

// Exchange trades an authorization code for tokens.
func (c *Client) Exchange(ctx context.Context, code, verifier, redirect string) (Tokens, error) {
	t, _, err := c.token(ctx, url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"redirect_uri":  {redirect},
		"client_id":     {ClientID},
		"code_verifier": {verifier},
	})
	if err != nil {
		return Tokens{}, fmt.Errorf("sign-in failed: %w", err)
	}
	if t.AccessToken == "" || t.RefreshToken == "" {
		return Tokens{}, fmt.Errorf("sign-in failed: the token endpoint returned no access or refresh token")
	}
	return t, nil
}

// permanentRefreshErrors are the answers after which a refresh token can
// never work again: the user must sign in anew.
var permanentRefreshErrors = []string{"invalid_grant", "refresh_token_reused", "refresh_token_expired", "refresh_token_invalidated"}

// Refresh trades a refresh token for new tokens. A failure is an
// AUTH_REFRESH_FAILED error, retryable unless the server said the refresh
// token is dead.
func (c *Client) Refresh(ctx context.Context, refreshToken string) (Tokens, error) {
	t, body, err := c.token(ctx, url.Values{
		"grant_type":    {"refresh_token"},
		"client_id":     {ClientID},
		"refresh_token": {refreshToken},
		"scope":         {RefreshScope},
	})
	if err == nil {
		if t.AccessToken == "" {
			return Tokens{}, rerr.AuthRefreshFailed(true, fmt.Errorf("the token endpoint returned no access token"))
		}
		if t.RefreshToken == "" {
			t.RefreshToken = refreshToken // servers that do not rotate keep the old one valid
		}
		return t, nil
	}
	codes := strings.ToLower(gjson.GetBytes(body, "error").String() + " " + gjson.GetBytes(body, "error.code").String() +
		" " + gjson.GetBytes(body, "code").String())
	for _, p := range permanentRefreshErrors {
		if strings.Contains(codes, p) {
			return Tokens{}, rerr.AuthRefreshFailed(false, err)
		}
	}
	return Tokens{}, rerr.AuthRefreshFailed(true, err)
}

// token posts a form to /oauth/token. On a non-2xx answer it returns the
// body (for the caller to classify) and an error that never quotes tokens.
func (c *Client) token(ctx context.Context, form url.Values) (Tokens, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", c.Base+"/oauth/token", strings.NewReader(form.Encode()))
	if err != nil {
		return Tokens{}, nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return Tokens{}, nil, rerr.Network(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Tokens{}, nil, rerr.Network(err)
	}
	if resp.StatusCode/100 != 2 {
		code := gjson.GetBytes(body, "error").String()
		if gjson.GetBytes(body, "error").IsObject() {
			code = gjson.GetBytes(body, "error.code").String()
		}
		return Tokens{}, body, fmt.Errorf("token endpoint answered %d %s", resp.StatusCode, code)
	}
	var tr struct {
		IDToken      string `json:"id_token"`
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
		ExpiresIn    int64  `json:"expires_in"`
	}
	if err := json.Unmarshal(body, &tr); err != nil {
		return Tokens{}, body, fmt.Errorf("token endpoint answered invalid JSON")
	}
	return Tokens{IDToken: tr.IDToken, AccessToken: tr.AccessToken, RefreshToken: tr.RefreshToken,
		ExpiresIn: time.Duration(tr.ExpiresIn) * time.Second}, body, nil
}
