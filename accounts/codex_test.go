package accounts

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rerr "github.com/rotorproxy/rotor/errors"
)

const jwtDir = "../testdata/jwt"

// makeJWT builds an unsigned JWT (header.payload.signature) with claims.
func makeJWT(t *testing.T, claims map[string]any) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]string{"alg": "RS256", "typ": "JWT"}) + "." + enc(claims) + "." +
		base64.RawURLEncoding.EncodeToString([]byte("test-signature"))
}

func fixture(t *testing.T, name string) string {
	t.Helper()
	return strings.TrimSpace(string(readFile(t, filepath.Join(jwtDir, name))))
}

func TestParseJWTFixtures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file string
		want Identity
	}{
		{"id_token.jwt", Identity{Email: "ada@example.com", ChatGPTAccountID: "7f3c2a10-5b6e-4d8f-9a01-fixture00001",
			PlanType: "plus", ExpiresAt: time.Unix(1767229200, 0).UTC()}},
		// The access token has the email only under the profile claim.
		{"access_token.jwt", Identity{Email: "ada@example.com", ChatGPTAccountID: "7f3c2a10-5b6e-4d8f-9a01-fixture00001",
			PlanType: "plus", ExpiresAt: time.Unix(4102444800, 0).UTC()}},
	} {
		got, err := ParseJWT(fixture(t, tc.file))
		if err != nil {
			t.Errorf("%s: %v", tc.file, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s: ParseJWT = %+v, want %+v", tc.file, got, tc.want)
		}
	}
}

func TestParseJWT(t *testing.T) {
	t.Parallel()
	tok := makeJWT(t, map[string]any{
		"email": "bob@example.com",
		"https://api.openai.com/auth": map[string]any{
			"chatgpt_account_id": "acc-bob", "chatgpt_plan_type": "pro",
		},
		"exp": 2000000000,
	})
	got, err := ParseJWT(tok)
	if err != nil {
		t.Fatal(err)
	}
	want := Identity{Email: "bob@example.com", ChatGPTAccountID: "acc-bob", PlanType: "pro", ExpiresAt: time.Unix(2000000000, 0).UTC()}
	if got != want {
		t.Errorf("ParseJWT = %+v, want %+v", got, want)
	}
	// Padded base64url is accepted too.
	parts := strings.Split(tok, ".")
	padded := parts[1] + strings.Repeat("=", (4-len(parts[1])%4)%4)
	if got, err := ParseJWT(parts[0] + "." + padded + "." + parts[2]); err != nil || got != want {
		t.Errorf("padded payload: %+v, %v", got, err)
	}

	for _, bad := range []string{"", "abc", "a.b", "a.b.c.d", "x.%%%.y", "x." + base64.RawURLEncoding.EncodeToString([]byte("not json")) + ".y"} {
		if _, err := ParseJWT(bad); err == nil {
			t.Errorf("ParseJWT(%q) succeeded", bad)
		}
	}
}

func writeAuth(t *testing.T, dir string, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadCodexAuth(t *testing.T) {
	t.Parallel()
	idt, at := fixture(t, "id_token.jwt"), fixture(t, "access_token.jwt")
	ct, err := ReadCodexAuth(filepath.Join(jwtDir, "codex_auth.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := CodexTokens{IDToken: idt, AccessToken: at, RefreshToken: "rt_fixture_refresh_token_ada_3c1f9e7b",
		AccountID: "7f3c2a10-5b6e-4d8f-9a01-fixture00001"}
	if ct != want {
		t.Errorf("ReadCodexAuth = %+v, want %+v", ct, want)
	}
	id := ct.Identity()
	wantID := Identity{Email: "ada@example.com", ChatGPTAccountID: "7f3c2a10-5b6e-4d8f-9a01-fixture00001",
		PlanType: "plus", ExpiresAt: time.Unix(4102444800, 0).UTC()} // the access token's expiry
	if id != wantID {
		t.Errorf("Identity = %+v, want %+v", id, wantID)
	}

	// Older Codex versions kept the id_token as an object with raw_jwt.
	dir := t.TempDir()
	path := writeAuth(t, dir, map[string]any{"tokens": map[string]any{
		"id_token": map[string]any{"raw_jwt": idt, "email": "ignored"}, "access_token": at, "refresh_token": "rt",
	}})
	ct, err = ReadCodexAuth(path)
	if err != nil {
		t.Fatal(err)
	}
	if ct.IDToken != idt || ct.AccountID != "" {
		t.Errorf("raw_jwt form: %+v", ct)
	}
	// Without tokens.account_id, the account id comes from the claims.
	if got := ct.Identity().ChatGPTAccountID; got != "7f3c2a10-5b6e-4d8f-9a01-fixture00001" {
		t.Errorf("account id from claims = %q", got)
	}
	// An explicit account_id wins over the claims.
	path = writeAuth(t, dir, map[string]any{"tokens": map[string]any{
		"id_token": idt, "access_token": at, "refresh_token": "rt", "account_id": "explicit",
	}})
	if ct, err = ReadCodexAuth(path); err != nil || ct.Identity().ChatGPTAccountID != "explicit" {
		t.Errorf("explicit account_id: %+v, %v", ct.Identity(), err)
	}
}

func TestReadCodexAuthErrors(t *testing.T) {
	t.Parallel()
	const secret = "sk-secret-value-never-printed"
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		content string
	}{
		{"not json", "{" + secret},
		{"no tokens", `{"OPENAI_API_KEY":"` + secret + `"}`},
		{"no refresh token", `{"tokens":{"access_token":"` + secret + `"}}`},
		{"no access token", `{"tokens":{"refresh_token":"` + secret + `"}}`},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".json")
		if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := ReadCodexAuth(path)
		if rerr.CodeOf(err) != rerr.CodeValidation {
			t.Errorf("%s: error %v, want VALIDATION", tc.name, err)
			continue
		}
		if !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), secret) {
			t.Errorf("%s: error %q must name the file and never its content", tc.name, err)
		}
	}
	missing := filepath.Join(dir, "missing.json")
	if _, err := ReadCodexAuth(missing); rerr.CodeOf(err) != rerr.CodeValidation || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: %v", err)
	}
}

func TestCodexAuthPath(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if got := CodexAuthPath(env(map[string]string{"CODEX_HOME": "/c"})); got != "/c/auth.json" {
		t.Errorf("with CODEX_HOME: %q", got)
	}
	// The run's HOME, not this process's: commands run in-process with
	// their own environment.
	if got := CodexAuthPath(env(map[string]string{"HOME": "/home/u"})); got != "/home/u/.codex/auth.json" {
		t.Errorf("default: %q", got)
	}
}

func TestUpsertChatGPT(t *testing.T) {
	t.Parallel()
	p := &Pool{Version: 1, Accounts: []Account{}}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p.AddAPIKey("key", "", now)
	ada := Identity{Email: "ada@example.com", ChatGPTAccountID: "acc-1", PlanType: "plus"}

	i, created := p.UpsertChatGPT(ada, "", now)
	if i != 2 || !created {
		t.Fatalf("first upsert = %d, %v; want 2, true", i, created)
	}
	a := *p.At(2)
	if a.Label != "ada@example.com" || a.Email != "ada@example.com" || a.ChatGPTAccountID != "acc-1" ||
		a.PlanType != "plus" || a.Kind != KindChatGPT || !a.Enabled || !a.AddedAt.Equal(now) || a.ID == "" {
		t.Errorf("new account = %+v", a)
	}

	// The same login again (email in another case, new plan): updated, not duplicated.
	p.At(2).SetFlag(FlagTokenInvalid)
	i, created = p.UpsertChatGPT(Identity{Email: "ADA@example.com", ChatGPTAccountID: "acc-1", PlanType: "pro"}, "", now.Add(time.Hour))
	if i != 2 || created || len(p.Accounts) != 2 {
		t.Fatalf("second upsert = %d, %v with %d accounts; want 2, false, 2", i, created, len(p.Accounts))
	}
	b := p.At(2)
	if b.ID != a.ID || b.PlanType != "pro" || b.Label != a.Label || !b.AddedAt.Equal(now) {
		t.Errorf("updated account = %+v", b)
	}
	if _, flagged := b.Flagged(); flagged {
		t.Error("a fresh login kept the token-invalid flag")
	}
	// Another flag is not the login's to clear; a label given replaces the old one.
	b.SetFlag(FlagDeactivated)
	p.UpsertChatGPT(ada, "work", now)
	if r, _ := b.Flagged(); r != FlagDeactivated || b.Label != "work" {
		t.Errorf("after relogin with a label: %+v", b)
	}

	// Another workspace of the same person is another account.
	if i, created = p.UpsertChatGPT(Identity{Email: "ada@example.com", ChatGPTAccountID: "acc-2"}, "", now); i != 3 || !created {
		t.Errorf("other workspace = %d, %v; want 3, true", i, created)
	}
	// Without an email the label falls back to the account id.
	if i, _ = p.UpsertChatGPT(Identity{ChatGPTAccountID: "0123456789abcdef"}, "", now); p.At(i).Label != "chatgpt-01234567" {
		t.Errorf("label without email = %q", p.At(i).Label)
	}
}

func TestAddAPIKey(t *testing.T) {
	t.Parallel()
	p := &Pool{Version: 1}
	now := time.Now()
	i := p.AddAPIKey("work", "http://127.0.0.1:1/v1", now)
	j := p.AddAPIKey("", "", now)
	if i != 1 || j != 2 {
		t.Fatalf("indexes %d, %d", i, j)
	}
	a, b := p.At(1), p.At(2)
	if a.Kind != KindAPIKey || a.Label != "work" || a.BaseURL != "http://127.0.0.1:1/v1" || !a.Enabled {
		t.Errorf("account 1 = %+v", a)
	}
	if !strings.HasPrefix(b.Label, "api-key-") || a.ID == b.ID || !strings.HasPrefix(a.ID, "acct_") {
		t.Errorf("account 2 = %+v (account 1 id %s)", b, a.ID)
	}
}
