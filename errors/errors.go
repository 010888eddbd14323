// Package rerr holds rotor's error vocabulary: the typed errors that cross
// package boundaries (docs/errors.md) and the table of stable HTTP error codes the
// proxy answers with (docs/selection.md), together with the one builder that turns a
// code into a payload.
//
// The package lives in the errors/ folder but is named rerr so that it never
// shadows the standard library's errors package.
package rerr

import (
	"errors"
	"fmt"
)

// Codes of typed errors (docs/errors.md). They are stable: scripts and tests match
// on them.
const (
	CodeStorageUnreadable = "STORAGE_UNREADABLE"
	CodeAuthRefreshFailed = "AUTH_REFRESH_FAILED"
	CodeValidation        = "VALIDATION"
	CodeNetwork           = "NETWORK"
	CodeRateLimit         = "RATE_LIMIT"
	CodeNotFound          = "NOT_FOUND"
	CodeSecrets           = "SECRETS"
	CodeInternal          = "INTERNAL"
	// Codes of the secrets backends.
	CodeStorageWrite       = "STORAGE_WRITE_FAILED"
	CodeSecretNotFound     = "SECRET_NOT_FOUND"
	CodeKeyringUnavailable = "KEYRING_UNAVAILABLE"
)

// Error is a typed error with a stable Code. Message is what a person reads;
// Hint, when set, says what to do about it. Err is the cause, kept for
// errors.Is/As but never printed when it might carry a secret.
type Error struct {
	Code      string
	Message   string
	Hint      string
	Field     string // the offending input, for VALIDATION
	Path      string // the file concerned, for STORAGE_UNREADABLE
	Retryable bool
	Err       error
}

// Error returns the message followed by the hint, if any.
func (e *Error) Error() string {
	if e.Hint == "" {
		return e.Message
	}
	return e.Message + " " + e.Hint
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same Code, so that
// errors.Is(err, &rerr.Error{Code: rerr.CodeValidation}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// CodeOf returns the Code of the first *Error in err's chain, or "" if none.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsRetryable reports whether the first *Error in err's chain is retryable.
func IsRetryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Retryable
}

// StorageUnreadable reports a store file that exists but cannot be read or
// parsed. Rotor never overwrites such a file; the hint names the repair.
func StorageUnreadable(path string, cause error) *Error {
	return &Error{
		Code:    CodeStorageUnreadable,
		Message: fmt.Sprintf("Cannot read %s: %v.", path, causeText(cause)),
		Hint:    `It was left untouched. Run "rotor fix" to restore the newest good backup.`,
		Path:    path,
		Err:     cause,
	}
}

// Validation reports bad input in field.
func Validation(field, message string) *Error {
	return &Error{Code: CodeValidation, Field: field, Message: message}
}

// NotFound reports a selector that names no account.
func NotFound(message string) *Error {
	return &Error{Code: CodeNotFound, Message: message}
}

// AuthRefreshFailed reports a token refresh that did not succeed. Retryable is
// false when the server said the refresh token can never work again.
func AuthRefreshFailed(retryable bool, cause error) *Error {
	return &Error{
		Code:      CodeAuthRefreshFailed,
		Message:   "Failed to refresh token, authentication required",
		Retryable: retryable,
		Err:       cause,
	}
}

// Network reports a connection, TLS or timeout failure; always retryable.
func Network(cause error) *Error {
	return &Error{Code: CodeNetwork, Message: "Network error: " + causeText(cause), Retryable: true, Err: cause}
}

// RateLimit reports a usage or rate limit; always retryable.
func RateLimit(message string) *Error {
	return &Error{Code: CodeRateLimit, Message: message, Retryable: true}
}

// Secrets reports a failure of the secrets backend. The message never
// includes a secret.
func Secrets(message string, cause error) *Error {
	return &Error{Code: CodeSecrets, Message: message, Err: cause}
}

func causeText(err error) string {
	if err == nil {
		return "unknown error"
	}
	return err.Error()
}
