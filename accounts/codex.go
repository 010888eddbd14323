package accounts

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/rotorproxy/rotor/accounts/home"

	rerr "github.com/rotorproxy/rotor/errors"
)

// CodexTokens is the ChatGPT login a Codex CLI auth.json holds.
type CodexTokens struct {
	IDToken      string
	AccessToken  string
	RefreshToken string
	AccountID    string
}

// CodexAuthPath is where Codex CLI keeps its login: $CODEX_HOME/auth.json,
// else ~/.codex/auth.json.
func CodexAuthPath(getenv func(string) string) string {
	if d := getenv("CODEX_HOME"); d != "" {
		return filepath.Join(d, "auth.json")
	}
	return filepath.Join(UserHome(getenv), ".codex", "auth.json")
}

// ReadCodexAuth reads the tokens of a Codex CLI auth.json. Errors name the
// file and the missing field, never a token.
func ReadCodexAuth(path string) (CodexTokens, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return CodexTokens{}, rerr.Validation("file", "Cannot read Codex login "+path+": "+err.Error())
	}
	if !gjson.ValidBytes(data) {
		return CodexTokens{}, rerr.Validation("file", path+" is not valid JSON")
	}
	t := gjson.GetBytes(data, "tokens")
	// Older Codex versions stored the id_token as an object with a raw_jwt.
	idTok := t.Get("id_token")
	if idTok.IsObject() {
		idTok = idTok.Get("raw_jwt")
	}
	ct := CodexTokens{
		IDToken:      idTok.String(),
		AccessToken:  t.Get("access_token").String(),
		RefreshToken: t.Get("refresh_token").String(),
		AccountID:    t.Get("account_id").String(),
	}
	if ct.AccessToken == "" || ct.RefreshToken == "" {
		return CodexTokens{}, rerr.Validation("tokens", path+" has no ChatGPT login (tokens.access_token and tokens.refresh_token are required)")
	}
	return ct, nil
}

// WriteCodexTokens puts t into the Codex CLI auth.json at path, as Codex
// itself writes a refresh (tokens.*, and last_refresh at now), but only
// while the file still holds the refresh token spent: a file Codex has
// refreshed meanwhile, or that now holds another login, is left alone, and
// written reports false. The file keeps its mode and every other field
// byte for byte, and is replaced atomically. A file that is gone holds no
// token either: it is not recreated, and that is not an error.
func WriteCodexTokens(path, spent string, t CodexTokens, now time.Time) (written bool, err error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	if !gjson.ValidBytes(data) || gjson.GetBytes(data, "tokens.refresh_token").String() != spent {
		return false, nil
	}
	set := []struct {
		path, value string
	}{
		{"tokens.access_token", t.AccessToken},
		{"tokens.refresh_token", t.RefreshToken},
		{"tokens.id_token", t.IDToken},
		{"last_refresh", now.UTC().Format(time.RFC3339Nano)},
	}
	for _, s := range set {
		if s.value == "" {
			continue // e.g. no new id token: keep the one there
		}
		if s.path == "tokens.id_token" && gjson.GetBytes(data, s.path).IsObject() {
			s.path += ".raw_jwt" // the layout of older Codex versions
		}
		if data, err = sjson.SetBytes(data, s.path, s.value); err != nil {
			return false, err
		}
	}
	if err := home.WriteFileMode(path, data, fi.Mode().Perm()); err != nil {
		return false, err
	}
	return true, nil
}

// Identity reads the account's identity from the id token and the access
// token; the explicit account_id wins over the claims.
func (ct CodexTokens) Identity() Identity {
	idt, _ := ParseJWT(ct.IDToken)
	at, _ := ParseJWT(ct.AccessToken)
	id := idt.Merge(at)
	if !at.ExpiresAt.IsZero() {
		id.ExpiresAt = at.ExpiresAt // the expiry that matters is the access token's
	}
	if ct.AccountID != "" {
		id.ChatGPTAccountID = ct.AccountID
	}
	return id
}

// SameLogin reports whether id is the login of ChatGPT account a: the same
// chatgpt_account_id (a workspace) and, where both are known, the same
// email, since several people can share one workspace.
func (a *Account) SameLogin(id Identity) bool {
	return a.Kind == KindChatGPT && a.ChatGPTAccountID == id.ChatGPTAccountID &&
		(a.Email == "" || id.Email == "" || strings.EqualFold(a.Email, id.Email))
}

// UpsertChatGPT adds a ChatGPT account for id, or updates the account that
// already has the same chatgpt_account_id and email, so logging in or
// importing twice never duplicates an account. A fresh login clears a
// token-invalid flag. It returns the account's 1-based index.
func (p *Pool) UpsertChatGPT(id Identity, label string, now time.Time) (index int, created bool) {
	for i := range p.Accounts {
		a := &p.Accounts[i]
		if a.Kind == KindChatGPT && a.ChatGPTAccountID == id.ChatGPTAccountID &&
			strings.EqualFold(a.Email, id.Email) {
			if label != "" {
				a.Label = label
			}
			if id.PlanType != "" {
				a.PlanType = id.PlanType
			}
			if r, ok := a.Flagged(); ok && r == FlagTokenInvalid {
				a.SetFlag("")
			}
			return i + 1, false
		}
	}
	if label == "" {
		label = id.Email
	}
	if label == "" {
		label = "chatgpt-" + shortID(id.ChatGPTAccountID)
	}
	p.Accounts = append(p.Accounts, Account{
		ID:               NewID(),
		Label:            label,
		Kind:             KindChatGPT,
		Email:            id.Email,
		ChatGPTAccountID: id.ChatGPTAccountID,
		PlanType:         id.PlanType,
		Enabled:          true,
		AddedAt:          now.UTC(),
	})
	return len(p.Accounts), true
}

func shortID(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}
