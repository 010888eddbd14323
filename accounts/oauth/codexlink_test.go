package oauth_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/oauth"
	"github.com/rotorproxy/rotor/accounts/oauth/oauthtest"
	rerr "github.com/rotorproxy/rotor/errors"
)

// linkEnv is a ROTOR_HOME with one ChatGPT account imported from a Codex
// CLI auth.json, both holding the same live token pair of the fake
// authorization server, which accepts each refresh token once.
type linkEnv struct {
	refreshEnv
	file  string // the Codex auth.json
	first oauth.Tokens
}

func newLinkEnv(t *testing.T, linked bool) *linkEnv {
	t.Helper()
	auth := startAuth(t)
	auth.AddRefreshToken("rt-seed")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The login both share: the fake's own tokens, so they refresh for real.
	tok, err := oauth.NewClient(auth.URL()).Refresh(ctx, "rt-seed")
	if err != nil {
		t.Fatal(err)
	}
	e := &linkEnv{first: tok}
	e.refreshEnv = *newRefreshEnv(t, oauth.SecretFrom(tok, time.Now()))
	e.auth.Close()
	e.auth = auth
	e.acct.ChatGPTAccountID = oauthtest.DefaultIdentity.AccountID
	e.acct.Email = oauthtest.DefaultIdentity.Email
	e.file = filepath.Join(t.TempDir(), "codex-home", "auth.json")
	if err := os.MkdirAll(filepath.Dir(e.file), 0o700); err != nil {
		t.Fatal(err)
	}
	e.writeCodex(t, tok, "2026-01-02T03:04:05.123456Z")
	if err := os.Chmod(e.file, 0o640); err != nil { // a mode of the user's own: kept
		t.Fatal(err)
	}
	if linked {
		e.acct.CodexAuthFile = e.file
	}
	return e
}

// writeCodex writes the file as Codex CLI does, with a field rotor does not
// know, which must survive every write.
func (e *linkEnv) writeCodex(t *testing.T, tok oauth.Tokens, lastRefresh string) {
	t.Helper()
	doc := map[string]any{
		"OPENAI_API_KEY": nil,
		"tokens": map[string]any{"id_token": tok.IDToken, "access_token": tok.AccessToken,
			"refresh_token": tok.RefreshToken, "account_id": tok.Identity().ChatGPTAccountID},
		"last_refresh": lastRefresh,
		"future_field": map[string]any{"kept": true},
	}
	b, _ := json.MarshalIndent(doc, "", "  ")
	if err := os.WriteFile(e.file, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

type codexFile struct {
	Tokens struct {
		IDToken, AccessToken, RefreshToken, AccountID string
	}
	LastRefresh string         `json:"last_refresh"`
	Future      map[string]any `json:"future_field"`
	APIKey      *string        `json:"OPENAI_API_KEY"`
}

func (e *linkEnv) readCodex(t *testing.T) codexFile {
	t.Helper()
	b, err := os.ReadFile(e.file)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Tokens struct {
			IDToken      string `json:"id_token"`
			AccessToken  string `json:"access_token"`
			RefreshToken string `json:"refresh_token"`
			AccountID    string `json:"account_id"`
		} `json:"tokens"`
		LastRefresh string         `json:"last_refresh"`
		Future      map[string]any `json:"future_field"`
		APIKey      *string        `json:"OPENAI_API_KEY"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("auth.json: %v\n%s", err, b)
	}
	var f codexFile
	f.Tokens.IDToken, f.Tokens.AccessToken, f.Tokens.RefreshToken, f.Tokens.AccountID =
		raw.Tokens.IDToken, raw.Tokens.AccessToken, raw.Tokens.RefreshToken, raw.Tokens.AccountID
	f.LastRefresh, f.Future, f.APIKey = raw.LastRefresh, raw.Future, raw.APIKey
	return f
}

func refreshCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// rotor refreshes: the linked file gets the new pair, keeps its mode and
// every other field, and last_refresh moves as Codex would move it.
func TestRefreshWritesTheLinkedCodexFile(t *testing.T) {
	t.Parallel()
	e := newLinkEnv(t, true)
	calls := e.auth.TokenCalls("refresh_token")
	got, err := e.refresher(t, nil).Refresh(refreshCtx(t), e.acct, oauth.SecretFrom(e.first, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if n := e.auth.TokenCalls("refresh_token") - calls; n != 1 {
		t.Fatalf("%d token calls, want 1", n)
	}
	issued := e.auth.Issued()[len(e.auth.Issued())-1]
	if got.RefreshToken != issued.RefreshToken {
		t.Fatal("the refresh did not return the issued pair")
	}
	f := e.readCodex(t)
	if f.Tokens.AccessToken != issued.AccessToken || f.Tokens.RefreshToken != issued.RefreshToken || f.Tokens.IDToken != issued.IDToken {
		t.Error("auth.json does not hold the new pair")
	}
	if f.Tokens.AccountID != oauthtest.DefaultIdentity.AccountID || f.Future["kept"] != true || f.APIKey != nil {
		t.Errorf("other fields of auth.json changed: %+v", f)
	}
	lr, err := time.Parse(time.RFC3339Nano, f.LastRefresh)
	if err != nil || time.Since(lr) > time.Minute || lr.Location() != time.UTC {
		t.Errorf("last_refresh %q: want now, in UTC RFC 3339 (%v)", f.LastRefresh, err)
	}
	if fi, _ := os.Stat(e.file); fi.Mode().Perm() != 0o640 {
		t.Errorf("auth.json mode %04o, want its own 0640 kept", fi.Mode().Perm())
	}
	// Codex's next refresh, with what is in its file, works.
	if _, err := oauth.NewClient(e.auth.URL()).Refresh(refreshCtx(t), f.Tokens.RefreshToken); err != nil {
		t.Errorf("Codex's refresh with the written-back token failed: %v", err)
	}
}

// Codex refreshed first: its old refresh token (rotor's too) is spent. rotor
// adopts the file's pair without any token call instead of spending a dead
// token and flagging the account.
func TestRefreshAdoptsWhatCodexRefreshed(t *testing.T) {
	t.Parallel()
	e := newLinkEnv(t, true)
	codexTok, err := oauth.NewClient(e.auth.URL()).Refresh(refreshCtx(t), e.first.RefreshToken) // Codex spends it
	if err != nil {
		t.Fatal(err)
	}
	e.writeCodex(t, codexTok, time.Now().UTC().Format(time.RFC3339Nano))
	calls := e.auth.TokenCalls("")
	r := e.refresher(t, func(id, reason string) error {
		t.Errorf("Flag(%s, %s): the account was blamed for Codex's refresh", id, reason)
		return nil
	})
	got, err := r.Refresh(refreshCtx(t), e.acct, oauth.SecretFrom(e.first, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if n := e.auth.TokenCalls("") - calls; n != 0 {
		t.Errorf("%d token calls, want 0: Codex's pair was live", n)
	}
	if got.AccessToken != codexTok.AccessToken || got.RefreshToken != codexTok.RefreshToken {
		t.Error("rotor did not adopt Codex's pair")
	}
	if s := e.stored(t); s.RefreshToken != codexTok.RefreshToken || s.IDToken != codexTok.IDToken {
		t.Error("the adopted pair is not stored")
	}
}

// An account that is not linked never reads or writes the file, even when
// it holds the same login.
func TestUnlinkedAccountNeverTouchesTheCodexFile(t *testing.T) {
	t.Parallel()
	e := newLinkEnv(t, false)
	before, _ := os.ReadFile(e.file)
	fi0, _ := os.Stat(e.file)
	if _, err := e.refresher(t, nil).Refresh(refreshCtx(t), e.acct, oauth.SecretFrom(e.first, time.Now())); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(e.file)
	fi1, _ := os.Stat(e.file)
	if string(after) != string(before) || !fi1.ModTime().Equal(fi0.ModTime()) {
		t.Error("the file of an unlinked account was written")
	}
}

// A linked file that now holds another login, or an older pair than
// rotor's, is neither adopted nor overwritten.
func TestLinkedFileOfAnotherLoginIsLeftAlone(t *testing.T) {
	t.Parallel()
	e := newLinkEnv(t, true)
	// Codex was logged in to another account since.
	e.auth.SetIdentity(oauthtest.Identity{Email: "bob@example.com", AccountID: "another-workspace", PlanType: "pro"})
	e.auth.AddRefreshToken("rt-bob")
	bob, err := oauth.NewClient(e.auth.URL()).Refresh(refreshCtx(t), "rt-bob")
	if err != nil {
		t.Fatal(err)
	}
	e.auth.SetIdentity(oauthtest.DefaultIdentity)
	e.writeCodex(t, bob, "2026-01-02T03:04:05Z")
	before, _ := os.ReadFile(e.file)
	var linkErrs []error
	r := e.refresher(t, nil)
	r.LinkError = func(_ accounts.Account, err error) { linkErrs = append(linkErrs, err) }
	if _, err := r.Refresh(refreshCtx(t), e.acct, oauth.SecretFrom(e.first, time.Now())); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(e.file); string(after) != string(before) {
		t.Error("rotor wrote its tokens into another login's file")
	}
	if len(linkErrs) != 0 {
		t.Errorf("link errors: %v", linkErrs)
	}

	// A missing file is reported, and the refresh still works.
	os.Remove(e.file)
	if _, err := r.Refresh(refreshCtx(t), e.acct, e.stored(t)); err != nil {
		t.Fatal(err)
	}
	if len(linkErrs) != 1 || !strings.Contains(linkErrs[0].Error(), e.file) {
		t.Errorf("a missing linked file was not reported once, naming it: %v", linkErrs)
	}
}

// The fake token endpoint enforces single use as the real one does: a spent
// refresh token gets 400 refresh_token_reused, which rotor takes as final.
func TestSpentRefreshTokenIsReusedError(t *testing.T) {
	t.Parallel()
	e := newLinkEnv(t, false)
	_, err := oauth.NewClient(e.auth.URL()).Refresh(refreshCtx(t), "rt-seed") // spent by newLinkEnv
	if err == nil || !strings.Contains(errors.Unwrap(err).Error(), "400 refresh_token_reused") {
		t.Fatalf("spending a refresh token twice: %v, want 400 refresh_token_reused", err)
	}
	var re *rerr.Error
	if !errors.As(err, &re) || re.Retryable {
		t.Errorf("a reused refresh token must not be retryable: %#v", err)
	}
}

// Codex signed in as itself refreshed: Adopt takes its pair over without
// a token call of its own; with nothing new in the file it changes
// nothing, and it never refreshes.
func TestAdoptTakesWhatCodexRefreshedWithoutRefreshing(t *testing.T) {
	t.Parallel()
	e := newLinkEnv(t, true)
	r := e.refresher(t, nil)
	calls := e.auth.TokenCalls("")
	if _, ok := r.Adopt(e.acct); ok {
		t.Fatal("adopted a file that holds the stored pair")
	}
	codexTok, err := oauth.NewClient(e.auth.URL()).Refresh(refreshCtx(t), e.first.RefreshToken) // Codex spends it
	if err != nil {
		t.Fatal(err)
	}
	e.writeCodex(t, codexTok, time.Now().UTC().Format(time.RFC3339Nano))
	calls++ // Codex's own
	got, ok := r.Adopt(e.acct)
	if !ok || got.AccessToken != codexTok.AccessToken || e.stored(t).RefreshToken != codexTok.RefreshToken {
		t.Fatalf("Codex's pair was not adopted: %v", ok)
	}
	if n := e.auth.TokenCalls(""); n != calls {
		t.Errorf("Adopt made %d token calls", n-calls)
	}
	unlinked := e.acct
	unlinked.CodexAuthFile = ""
	if _, ok := r.Adopt(unlinked); ok {
		t.Error("an unlinked account adopted")
	}
}
