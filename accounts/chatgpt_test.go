package accounts

import (
	"io"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts/secrets"
)

// SaveChatGPT keeps the newer of the stored and the given tokens: an old
// auth.json imported again must not bring back a spent refresh token.
func TestSaveChatGPTKeepsTheNewerSecret(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.Open(dir, "file", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	id := Identity{Email: "ada@example.com", ChatGPTAccountID: "cg-ada", PlanType: "plus"}
	newer := secrets.Secret{AccessToken: "new", RefreshToken: "r-new", ExpiresAt: now.Add(time.Hour)}
	acct, idx, created, err := SaveChatGPT(st, sec, id, newer, "", now, nil)
	if err != nil || idx != 1 || !created || acct.Label != id.Email {
		t.Fatalf("first save: %+v, %d, %v, %v", acct, idx, created, err)
	}

	older := secrets.Secret{AccessToken: "old", RefreshToken: "r-old", ExpiresAt: now}
	_, idx, created, err = SaveChatGPT(st, sec, id, older, "ada", now, func(a *Account) { a.CodexAuthFile = "/x/auth.json" })
	if err != nil || idx != 1 || created {
		t.Fatalf("second save: %d, %v, %v", idx, created, err)
	}
	if got, _ := sec.Get(acct.ID); got.RefreshToken != "r-new" {
		t.Errorf("stored refresh token %q after an older save, want r-new", got.RefreshToken)
	}
	p, err := st.Load()
	if err != nil {
		t.Fatal(err)
	}
	if a := p.At(1); a.Label != "ada" || a.CodexAuthFile != "/x/auth.json" {
		t.Errorf("account after the second save: label %q, link %q; want the new label and the edit", a.Label, a.CodexAuthFile)
	}
}
