package backend

import (
	"errors"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/secrets"
)

// The pass-through's target, as the backend would read it: what goes
// after the account's base, and the targets that could leave it.
func TestTargetKeepsTheBackendsBase(t *testing.T) {
	for raw, want := range map[string]string{
		"/backend-api/a%3Fb":                        "a%3Fb",
		"/backend-api/plugins/list?scope=user&v=2&": "plugins/list?scope=user&v=2&",
		"/backend-api/files/x%252e%252ey/..z":       "files/x%252e%252ey/..z",
		"/backend-api/tasks//list":                  "tasks//list",
	} {
		if rest, ok := Target([]byte(raw)); !ok || rest != want {
			t.Errorf("%s: %q %v, want %q", raw, rest, ok, want)
		}
	}
	for _, raw := range []string{
		"/backend-api/%252e%252e/%252e%252e/v1/models",
		"/backend-api/%25252e%25252E/v1/models",
		"/backend-api/x/%2e%2e/y",
		"/backend-api/%2e/plugins",
		"/backend-api/./plugins",
		"/backend-api/a%5c..%5cb",
		"/backend-api/..%252f..%252fv1/models",
		"/backend-api/x;..;/y/..;x",
		"/backend-api/a#b",
		"/x/../backend-api/plugins",
	} {
		if rest, ok := Target([]byte(raw)); ok {
			t.Errorf("%s passes as %q", raw, rest)
		}
	}
}

// signers is a pool whose accounts sign in when they are named in
// signIn, with their current tokens.
type signers struct {
	now    time.Time
	pool   accounts.Pool
	signIn map[string]bool
	tokens map[string]string
}

func (p *signers) Now() time.Time                   { return p.now }
func (p *signers) Pool() *accounts.Pool             { return &p.pool }
func (p *signers) SignsIn(a *accounts.Account) bool { return p.signIn[a.ID] }
func (p *signers) Adopt(*accounts.Account) bool     { return false }

func (p *signers) Secret(a *accounts.Account) (secrets.Secret, error) {
	if tok, ok := p.tokens[a.ID]; ok {
		return secrets.Secret{AccessToken: tok}, nil
	}
	return secrets.Secret{}, errors.New("no secret")
}

func TestTokensTakeTheCurrentAndForAWhileThePreviousToken(t *testing.T) {
	p := &signers{now: time.Unix(1_700_000_000, 0),
		pool:   accounts.Pool{Accounts: []accounts.Account{{ID: "c"}, {ID: "k"}}},
		signIn: map[string]bool{"c": true}, tokens: map[string]string{"c": "tok-1", "k": "sk-key"}}
	var tk Tokens
	if id := tk.Account([]byte("tok-1"), p); id != "c" {
		t.Fatalf("the current token is %q's", id)
	}
	if id := tk.Account([]byte("sk-key"), p); id != "" {
		t.Errorf("an API key is taken as a sign-in of %q", id)
	}
	p.tokens["c"] = "tok-2"
	if tk.Account([]byte("tok-2"), p) != "c" || tk.Account([]byte("tok-1"), p) != "c" {
		t.Error("the new token, or the old one within its grace, is not taken")
	}
	p.now = p.now.Add(TokenGrace + time.Second)
	if id := tk.Account([]byte("tok-1"), p); id != "" {
		t.Errorf("the old token is still taken after its grace, as %q's", id)
	}
}
