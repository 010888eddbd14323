package accounts

import (
	"encoding/base64"
	"errors"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// Identity is what a ChatGPT token says about its account (docs/accounts.md).
type Identity struct {
	Email            string
	ChatGPTAccountID string
	PlanType         string
	ExpiresAt        time.Time
}

// authClaim is the namespaced claim OpenAI puts ChatGPT details in.
const authClaim = `https:\/\/api\.openai\.com\/auth`

// ParseJWT reads the identity claims of a JWT without verifying its
// signature: rotor only labels accounts with it, and the upstream is what
// checks the token.
func ParseJWT(token string) (Identity, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return Identity{}, errors.New("not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil || !gjson.ValidBytes(payload) {
		return Identity{}, errors.New("JWT payload is not base64url JSON")
	}
	c := gjson.ParseBytes(payload)
	id := Identity{
		Email:            c.Get("email").String(),
		ChatGPTAccountID: c.Get(authClaim + ".chatgpt_account_id").String(),
		PlanType:         c.Get(authClaim + ".chatgpt_plan_type").String(),
	}
	if id.Email == "" {
		id.Email = c.Get(`https:\/\/api\.openai\.com\/profile.email`).String()
	}
	if exp := c.Get("exp").Int(); exp > 0 {
		id.ExpiresAt = time.Unix(exp, 0).UTC()
	}
	return id, nil
}

// Merge fills the empty fields of id from other (the id_token usually has
// the email, the access token the expiry).
func (id Identity) Merge(other Identity) Identity {
	if id.Email == "" {
		id.Email = other.Email
	}
	if id.ChatGPTAccountID == "" {
		id.ChatGPTAccountID = other.ChatGPTAccountID
	}
	if id.PlanType == "" {
		id.PlanType = other.PlanType
	}
	if id.ExpiresAt.IsZero() {
		id.ExpiresAt = other.ExpiresAt
	}
	return id
}
