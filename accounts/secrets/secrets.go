// Package secrets keeps the secret half of every account (OAuth tokens, API
// keys) out of accounts.json: in the OS keyring when one answers, otherwise in
// ROTOR_HOME/secrets.json (0600). See docs/files.md "Secrets".
//
// Nothing in this package ever formats a secret value into an error or a
// log line; errors name account ids, files and keyring items only.
package secrets

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/rotorproxy/rotor/accounts/home"
	rerr "github.com/rotorproxy/rotor/errors"
)

// Secret is everything rotor keeps secret about one account.
//
// Its String and GoString methods redact the values, so that a Secret passed
// to fmt or a logger by mistake shows which fields are set, never what they
// hold. JSON encoding is not redacted: it is how the backends store it.
type Secret struct {
	APIKey       string    `json:"api_key,omitempty"`
	AccessToken  string    `json:"access_token,omitempty"`
	RefreshToken string    `json:"refresh_token,omitempty"`
	IDToken      string    `json:"id_token,omitempty"`
	ExpiresAt    time.Time `json:"expires_at,omitzero"` // access-token expiry when known
	// ProxyPassword is the password of the account's own proxy (docs/behind-a-proxy.md), whose URL without it is the account's proxy_url.
	ProxyPassword string `json:"proxy_password,omitempty"`
}

// String reports which fields are set, never their values.
func (s Secret) String() string {
	mark := func(v string) string {
		if v == "" {
			return "unset"
		}
		return "set"
	}
	exp := "unknown"
	if !s.ExpiresAt.IsZero() {
		exp = s.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("Secret{api_key:%s access_token:%s refresh_token:%s id_token:%s expires_at:%s proxy_password:%s}",
		mark(s.APIKey), mark(s.AccessToken), mark(s.RefreshToken), mark(s.IDToken), exp, mark(s.ProxyPassword))
}

// GoString is the redacted form for %#v, which would otherwise print every
// field verbatim.
func (s Secret) GoString() string { return "secrets." + s.String() }

// Store is where secrets live. Implementations are safe for concurrent use
// within a process and across rotor processes sharing one ROTOR_HOME.
type Store interface {
	// Get returns the secret of account id, or an error wrapping ErrNotFound
	// when it has none.
	Get(id string) (Secret, error)
	// Set stores s as the whole secret of account id, replacing any previous one.
	Set(id string, s Secret) error
	// Delete removes the secret of account id; deleting an absent id is not an error.
	Delete(id string) error
	// IDs lists, sorted, the account ids that have secrets.
	IDs() ([]string, error)
	// Backend names the backend in use: "keyring" or "file".
	Backend() string
	// Salt returns this home's API-key fingerprint salt (see Fingerprint),
	// drawing and storing a random one on first use. It is kept with the
	// secrets, never in accounts.json, and every process on a home gets the
	// same one.
	Salt() ([]byte, error)
	// ClientKey returns the home's stable client key (docs/service.md), drawing
	// and storing a new one on first use; every process on a home gets
	// the same one.
	ClientKey() (string, error)
	// RotateClientKey replaces the stable client key with a new random
	// one and returns it.
	RotateClientKey() (string, error)
	// ClientKeyStamp identifies the stored client key's version with one
	// stat, never a read or a keyring call, so a serve can poll it.
	ClientKeyStamp() home.Stamp
}

// Keyring is the subset of an OS keyring rotor uses. Get must return an
// error wrapping ErrNotFound (or go-keyring's keyring.ErrNotFound) for an
// absent item. The default implementation wraps go-keyring; tests inject
// their own through WithKeyring.
type Keyring interface {
	Get(service, user string) (string, error)
	Set(service, user, password string) error
	Delete(service, user string) error
}

// ErrNotFound is wrapped by every error meaning "this account has no secret".
var ErrNotFound = errors.New("secret not found")

// ErrTimeout is wrapped by the error of a keyring call that did not answer
// within the Store's timeout.
var ErrTimeout = errors.New("keyring did not answer in time")

// Backend names returned by Store.Backend.
const (
	BackendKeyring = "keyring"
	BackendFile    = "file"
)

// Modes accepted by Open (ROTOR_SECRETS). The empty string means ModeAuto.
const (
	ModeAuto    = "auto"
	ModeKeyring = "keyring"
	ModeFile    = "file"
)

// Service is the keyring service every rotor item is stored under.
const Service = "rotor"

// DefaultTimeout bounds every keyring call unless WithTimeout says otherwise.
const DefaultTimeout = 3 * time.Second

// Stable error codes (docs/errors.md) of the errors this package returns; they
// live in rerr's table with every other code.
const (
	CodeStorageUnreadable  = rerr.CodeStorageUnreadable
	CodeStorageWrite       = rerr.CodeStorageWrite
	CodeSecretNotFound     = rerr.CodeSecretNotFound
	CodeKeyringUnavailable = rerr.CodeKeyringUnavailable
	CodeValidation         = rerr.CodeValidation
)

// Error is the typed error every exported function returns (rerr's). Its
// message names files, keyring items and account ids, never secret values.
type Error = rerr.Error

func notFoundErr(id string) error {
	return &Error{Code: CodeSecretNotFound, Message: fmt.Sprintf("no secret stored for account %q", id), Err: ErrNotFound}
}

// Option adjusts Open; the options exist for tests and embedding.
type Option func(*options)

type options struct {
	keyring Keyring
	timeout time.Duration
}

// WithKeyring makes Open use k instead of the OS keyring (go-keyring).
func WithKeyring(k Keyring) Option { return func(o *options) { o.keyring = k } }

// WithTimeout bounds each keyring call, including the probe, by d instead of
// DefaultTimeout. d <= 0 keeps the default.
func WithTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.timeout = d
		}
	}
}

// Open picks the backend for mode in dir (ROTOR_HOME, which must exist).
//
//   - "auto" or "": probe the keyring (one Get of a probe item under the
//     timeout). If it answers, found or not found, use it; otherwise use
//     dir/secrets.json and write one warning line to warn (nil: no warning).
//   - "keyring": the keyring if the probe answers, else an error.
//   - "file": dir/secrets.json.
//
// Any other mode is a CodeValidation error naming the value and the allowed ones.
func Open(dir, mode string, warn io.Writer, opts ...Option) (Store, error) {
	o := options{timeout: DefaultTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if o.keyring == nil {
		o.keyring = goKeyring{}
	}
	switch mode {
	case ModeFile:
		return newFileStore(dir), nil
	case ModeKeyring:
		ks := newKeyringStore(dir, o.keyring, o.timeout)
		if err := ks.probe(); err != nil {
			return nil, err
		}
		return ks, nil
	case ModeAuto, "":
		// Once secrets live in the file, auto keeps using it: switching to
		// a keyring that answers today would hide every stored secret (and
		// lose single-use refresh tokens written since).
		if fs := newFileStore(dir); fileExists(fs.path) {
			return fs, nil
		}
		ks := newKeyringStore(dir, o.keyring, o.timeout)
		err := ks.probe()
		if err == nil {
			return ks, nil
		}
		fs := newFileStore(dir)
		if warn != nil {
			// One line, whatever the keyring said: D-Bus errors can span lines.
			reason := strings.Join(strings.Fields(err.Error()), " ")
			fmt.Fprintf(warn, "rotor: no OS keyring answered (%s); storing secrets in %s (0600)\n", reason, fs.path)
		}
		return fs, nil
	default:
		return nil, &Error{
			Code:    CodeValidation,
			Message: fmt.Sprintf("invalid ROTOR_SECRETS value %q: allowed values are auto, keyring, file", mode),
		}
	}
}

// checkID rejects ids that would collide with rotor's own keyring items
// ("_index", "_probe") or that no backend can hold faithfully. Both
// backends apply it, so secrets can move between them unchanged.
func checkID(id string) error {
	bad := ""
	switch {
	case id == "":
		bad = "is empty"
	case strings.HasPrefix(id, "_"):
		bad = "starts with '_', which is reserved for rotor's own items"
	case strings.IndexFunc(id, unicode.IsControl) >= 0:
		bad = "contains control characters"
	}
	if bad == "" {
		return nil
	}
	return &Error{Code: CodeValidation, Message: fmt.Sprintf("invalid account id %q: it %s", id, bad)}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
