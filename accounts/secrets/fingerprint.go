package secrets

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// saltLen is the size of the per-home fingerprint salt in bytes.
const saltLen = 32

// fingerprintPrefix names the construction, so a later rotor can tell its
// fingerprints from a different scheme's instead of silently mismatching.
const fingerprintPrefix = "hmac-sha256:"

// Fingerprint returns the keyed fingerprint of an API key under salt:
// "hmac-sha256:" and the hex HMAC-SHA256 of key. It is what accounts.json
// keeps so that the same key is never added twice. Without the salt, which
// lives only with the secrets, a fingerprint cannot be used to test guesses
// of the key, and it never reveals the key itself.
func Fingerprint(salt []byte, key string) string {
	m := hmac.New(sha256.New, salt)
	m.Write([]byte(key))
	return fingerprintPrefix + hex.EncodeToString(m.Sum(nil))
}

// newSalt returns a fresh random salt, hex-encoded for storage.
func newSalt() (string, error) {
	b := make([]byte, saltLen)
	if _, err := rand.Read(b); err != nil {
		return "", &Error{Code: CodeStorageWrite, Message: fmt.Sprintf("cannot draw a random fingerprint salt: %v", err), Err: err}
	}
	return hex.EncodeToString(b), nil
}

// decodeSalt checks a stored salt; where names the item or file for the error.
func decodeSalt(v, where string) ([]byte, error) {
	b, err := hex.DecodeString(v)
	if err != nil || len(b) != saltLen {
		return nil, &Error{
			Code:    CodeStorageUnreadable,
			Path:    where,
			Message: fmt.Sprintf("the API-key fingerprint salt in %s is damaged; it was left untouched", where),
			Hint:    "remove the salt entry; rotor draws a new one and \"rotor fix\" fingerprints the keys again",
		}
	}
	return b, nil
}
