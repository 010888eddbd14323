package rerr

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
)

func TestTypedErrors(t *testing.T) {
	t.Parallel()
	cause := errors.New("cause")
	for _, tc := range []struct {
		name      string
		err       *Error
		code      string
		retryable bool
		message   string
	}{
		{"auth refresh retryable", AuthRefreshFailed(true, cause), CodeAuthRefreshFailed, true, "Failed to refresh token, authentication required"},
		{"auth refresh fatal", AuthRefreshFailed(false, cause), CodeAuthRefreshFailed, false, "Failed to refresh token, authentication required"},
		{"network", Network(cause), CodeNetwork, true, "Network error: cause"},
		{"rate limit", RateLimit("limited"), CodeRateLimit, true, "limited"},
		{"validation", Validation("host", "bad host"), CodeValidation, false, "bad host"},
		{"not found", NotFound("no account"), CodeNotFound, false, "no account"},
		{"secrets", Secrets("no keyring", cause), CodeSecrets, false, "no keyring"},
	} {
		if tc.err.Code != tc.code || tc.err.Retryable != tc.retryable || tc.err.Error() != tc.message {
			t.Errorf("%s: code %s, retryable %v, message %q; want %s, %v, %q",
				tc.name, tc.err.Code, tc.err.Retryable, tc.err.Error(), tc.code, tc.retryable, tc.message)
		}
		// Wrapped once more, as callers do, the code and retryability still show.
		wrapped := fmt.Errorf("while doing something: %w", tc.err)
		if CodeOf(wrapped) != tc.code || IsRetryable(wrapped) != tc.retryable {
			t.Errorf("%s wrapped: CodeOf %q, IsRetryable %v", tc.name, CodeOf(wrapped), IsRetryable(wrapped))
		}
		if !errors.Is(wrapped, &Error{Code: tc.code}) {
			t.Errorf("%s: errors.Is by code failed", tc.name)
		}
		if tc.code != CodeNetwork && errors.Is(wrapped, &Error{Code: CodeNetwork}) {
			t.Errorf("%s: errors.Is matched another code", tc.name)
		}
	}
	if v := Validation("host", "x"); v.Field != "host" {
		t.Errorf("Validation field = %q, want host", v.Field)
	}
	if !errors.Is(Network(cause), cause) || !errors.Is(AuthRefreshFailed(true, cause), cause) {
		t.Error("the cause is not kept for errors.Is")
	}
	if CodeOf(errors.New("plain")) != "" || IsRetryable(errors.New("plain")) || CodeOf(nil) != "" {
		t.Error("a plain error has a code or is retryable")
	}
}

func TestStorageUnreadable(t *testing.T) {
	t.Parallel()
	const path = "/home/u/.config/rotor/accounts.json"
	e := StorageUnreadable(path, fs.ErrPermission)
	if CodeStorageUnreadable != "STORAGE_UNREADABLE" || e.Code != CodeStorageUnreadable || e.Path != path || e.Retryable {
		t.Errorf("StorageUnreadable = %+v", e)
	}
	msg := e.Error()
	for _, want := range []string{path, "permission denied", `"rotor fix"`, "untouched"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not contain %q", msg, want)
		}
	}
	if !errors.Is(e, fs.ErrPermission) {
		t.Error("the cause is lost")
	}
	if e := StorageUnreadable(path, nil); !strings.Contains(e.Error(), path) {
		t.Errorf("without a cause: %q", e.Error())
	}
}
