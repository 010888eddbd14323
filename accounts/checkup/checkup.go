// Package checkup explains and repairs a rotor home (docs/commands.md diagnostics):
// Doctor checks it and says what is wrong, Fix repairs what can be
// repaired without a person, VerifyFlagged re-checks flagged accounts and
// restores those that work, and Store summarizes the account store for
// `rotor report`.
//
// A Checkup reads the files of ROTOR_HOME itself and opens the account store
// only to write: opening one tightens the directory's mode, which Doctor must
// report and a dry run must not do. Nothing here ever formats a secret into a
// check, an action or a report.
package checkup

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
)

// Default time limits.
const (
	// DefaultProxyTimeout bounds the whole reachability check of a running
	// proxy (docs/commands.md doctor: 2 s), so doctor never hangs on a stuck one.
	DefaultProxyTimeout = 2 * time.Second
	// DefaultProbeTimeout bounds one upstream probe of verify-flagged.
	DefaultProbeTimeout = 15 * time.Second
	// DefaultRefreshTimeout bounds one token refresh.
	DefaultRefreshTimeout = 30 * time.Second
	// TempFileAge is how old a leftover temp file must be before Fix
	// removes it: an atomic write holds its temp file for milliseconds, so
	// an older one belongs to a writer that died.
	TempFileAge = time.Minute
)

// TokenRefresher renews a ChatGPT account's tokens; *oauth.Refresher is
// the one rotor uses (one refresh per account at a time across processes).
type TokenRefresher interface {
	Refresh(ctx context.Context, a accounts.Account, stale secrets.Secret) (secrets.Secret, error)
}

// Deps are a Checkup's explicit dependencies.
type Deps struct {
	// Dir is ROTOR_HOME.
	Dir string
	// Secrets is the secrets backend; nil when it could not be opened, and
	// then SecretsErr says why. SecretsMode is ROTOR_SECRETS as given
	// ("" means auto), to tell a chosen file backend from a fallback.
	Secrets     secrets.Store
	SecretsErr  error
	SecretsMode string
	// Runtime is the shared runtime state; refreshed tokens are recorded
	// in it so that running proxies read the secret again. May be nil.
	Runtime State
	// Refresher renews ChatGPT tokens (Fix, VerifyFlagged). May be nil:
	// tokens are then not refreshed. The checkup disables and flags an
	// account whose refresh hard-fails itself, so it can list that change.
	Refresher TokenRefresher
	// HTTP sends the probes and the proxy check (default: a plain client;
	// every call is bounded by a context deadline anyway).
	HTTP *http.Client
	// Adapters gives the Adapter of each account kind (proxy.Adapters.For in
	// rotor, so a probe is what the proxy would send). It must answer
	// every kind accounts.Parse accepts, and may be nil only when no
	// account is looked at: Store, or a home without accounts.
	Adapters func(accounts.Kind) Adapter
	// Clock tells the time: rotor's one clock (default: the system's).
	Clock clock.Clock
	// Alive reports whether process pid runs (default: signal 0).
	Alive func(pid int) bool
	// Time limits; zero takes the Default* values.
	ProxyTimeout, ProbeTimeout, RefreshTimeout time.Duration
}

// State is the runtime state every rotor process shares
// (*rotation.Runtime): what a checkup changes about an account reaches the
// running proxies through it.
type State interface {
	// TokensChanged tells proxies to read the account's secret again.
	TokensChanged(id string)
	// Clear ends the account's cooldowns and limits.
	Clear(id string)
	// Sync exchanges the state with state.json.
	Sync(keep func(id string) bool) error
	// Prune takes out of state.json the accounts keep rejects and the
	// deadlines passed at now, and says what it took (see
	// rotation.Runtime.Prune); damaged: state.json does not parse.
	Prune(now time.Time, keep func(id string) bool, dry bool) (dropped []string, cleared map[string][]string, damaged bool, err error)
	// Reset starts a damaged state.json afresh, keeping it aside.
	Reset(now time.Time) (keptAs string, err error)
}

// An Adapter is what a checkup needs to know about one account kind: how
// to probe it upstream and how its credential behaves. rotor wires proxy's
// adapters here (proxy.Adapters.For); tests may pass their own.
type Adapter interface {
	// ProbeRequest is a's cheapest authenticated upstream request (its
	// models list) carrying sec only in its headers; with sec nil, the
	// request without credentials, for saying what would be sent.
	ProbeRequest(ctx context.Context, a *accounts.Account, sec *secrets.Secret) (*http.Request, error)
	// Refreshes reports whether the kind's credential is an expiring
	// token that rotor renews (true) or a long-lived key (false).
	Refreshes() bool
	// AddCommand names the command(s) that add an account of this kind,
	// as a user types them, quoted: `"rotor add-key"`, or
	// `"rotor login" or "rotor import codex"`.
	AddCommand() string
}

// Checkup diagnoses and repairs one rotor home.
type Checkup struct {
	d Deps
}

// New returns a checkup over d, filling in defaults.
func New(d Deps) *Checkup {
	if d.HTTP == nil {
		d.HTTP = &http.Client{}
	}
	if d.Clock == nil {
		d.Clock = clock.System{}
	}
	if d.Alive == nil {
		d.Alive = home.ProcessAlive
	}
	if d.ProxyTimeout <= 0 {
		d.ProxyTimeout = DefaultProxyTimeout
	}
	if d.ProbeTimeout <= 0 {
		d.ProbeTimeout = DefaultProbeTimeout
	}
	if d.RefreshTimeout <= 0 {
		d.RefreshTimeout = DefaultRefreshTimeout
	}
	return &Checkup{d: d}
}

// adapter is the Adapter of a's kind.
func (c *Checkup) adapter(a *accounts.Account) Adapter { return c.d.Adapters(a.Kind) }

// storePath is accounts.json in the home.
func (c *Checkup) storePath() string { return filepath.Join(c.d.Dir, home.AccountsFile) }

// poolRead is what reading accounts.json found.
type poolRead struct {
	pool   *accounts.Pool // nil when unreadable
	exists bool
	err    error // the STORAGE_UNREADABLE error, when unreadable
}

// readPool reads accounts.json without opening the store (see the package
// comment). A missing file is an empty pool that does not exist.
func (c *Checkup) readPool() poolRead {
	path := c.storePath()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return poolRead{pool: &accounts.Pool{Version: 1, Accounts: []accounts.Account{}}}
	}
	if err != nil {
		return poolRead{exists: true, err: rerr.StorageUnreadable(path, err)}
	}
	p, err := accounts.Parse(path, data)
	if err != nil {
		return poolRead{exists: true, err: err}
	}
	return poolRead{pool: p, exists: true}
}

// backup is a readable backup of accounts.json.
type backup struct {
	name string // file name inside the home
	data []byte
	pool *accounts.Pool
}

// goodBackups lists the backups of accounts.json that parse, newest first.
func (c *Checkup) goodBackups() []backup {
	var out []backup
	for i := range accounts.Backups {
		path := home.BackupName(c.storePath(), i)
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		p, err := accounts.Parse(path, data)
		if err != nil {
			continue
		}
		out = append(out, backup{name: filepath.Base(path), data: data, pool: p})
	}
	return out
}

// duplicates returns the groups of accounts that are in the pool twice, as
// 1-based indexes, first (the one kept) first: the same key (same kind and
// keyed fingerprint), or the same ChatGPT login (same kind,
// chatgpt_account_id and email, the email case-insensitively). Accounts
// with neither a fingerprint nor a chatgpt_account_id are never
// duplicates. The fields say enough without asking the kind's adapter:
// only key accounts get a fingerprint, only ChatGPT logins an account id.
func duplicates(p *accounts.Pool) [][]int {
	type key struct{ kind, cg, email, fp string }
	groups := map[key][]int{}
	var order []key
	for i := range p.Accounts {
		a := &p.Accounts[i]
		var k key
		switch {
		case a.KeyFingerprint != "":
			k = key{kind: string(a.Kind), fp: a.KeyFingerprint}
		case a.ChatGPTAccountID != "":
			k = key{kind: string(a.Kind), cg: a.ChatGPTAccountID, email: strings.ToLower(a.Email)}
		default:
			continue
		}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i+1)
	}
	var out [][]int
	for _, k := range order {
		if len(groups[k]) > 1 {
			out = append(out, groups[k])
		}
	}
	return out
}

// sameWhat says what a duplicate group shares, for doctor and fix.
func (c *Checkup) sameWhat(a *accounts.Account) string {
	if !c.adapter(a).Refreshes() {
		return "the same API key"
	}
	return fmt.Sprintf("the same login (%s)", a.Email)
}

// unfingerprinted lists the API-key accounts (those whose kind holds a
// long-lived key) with a stored key (their id is in withSecret) but no
// stored fingerprint: added before rotor kept them, their duplicates
// cannot be seen until Fix fingerprints them.
func (c *Checkup) unfingerprinted(p *accounts.Pool, withSecret []string) []int {
	var out []int
	for i := range p.Accounts {
		if a := &p.Accounts[i]; a.KeyFingerprint == "" && slices.Contains(withSecret, a.ID) && !c.adapter(a).Refreshes() {
			out = append(out, i+1)
		}
	}
	return out
}

// secretIDs lists the ids that have secrets, or nil with the backend's error.
func (c *Checkup) secretIDs() ([]string, error) {
	if c.d.Secrets == nil {
		return nil, c.secretsUnavailable()
	}
	return c.d.Secrets.IDs()
}

func (c *Checkup) secretsUnavailable() error {
	if c.d.SecretsErr != nil {
		return c.d.SecretsErr
	}
	return errors.New("no secrets backend")
}

// orphans lists the secret ids that belong to no account of p.
func orphans(p *accounts.Pool, ids []string) []string {
	var out []string
	for _, id := range ids {
		if p.IndexOf(id) == 0 {
			out = append(out, id)
		}
	}
	return out
}

// accountName is how checks and actions name an account to a person.
func accountName(i int, a *accounts.Account) string {
	if a.Label == "" {
		return fmt.Sprintf("account %d", i)
	}
	return fmt.Sprintf("account %d (%s)", i, a.Label)
}

// errText is an error for a check or an action: the message and, for
// typed errors whose message is generic, the cause. Causes here come from
// rotor's own code, which never puts a secret in an error.
func errText(err error) string {
	var e *rerr.Error
	if errors.As(err, &e) && e.Err != nil && !strings.Contains(e.Error(), e.Err.Error()) {
		return e.Error() + " (" + e.Err.Error() + ")"
	}
	return err.Error()
}
