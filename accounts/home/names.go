package home

import "strings"

// The files and locks of ROTOR_HOME (docs/files.md), named in one place. A lock
// file is never removed while rotor runs: two processes could then hold
// "the" lock on two different files.
const (
	AccountsFile = "accounts.json" // the pool (accounts.Store)
	AccountsLock = ".lock"

	SecretsFile = "secrets.json" // the file secrets backend
	SecretsLock = ".secrets.lock"

	StateFile = "state.json" // runtime state shared by every rotor process
	StateLock = ".state.lock"

	// UsageReadLock gives the serves on a home turns at reading the
	// accounts' usage from their backends (docs/selection.md).
	UsageReadLock = ".usage-read.lock"

	UsageFile    = "usage.jsonl" // one line per finished request
	UsageOldFile = UsageFile + ".1"
	UsageLock    = ".usage.lock" // rotations of usage.jsonl, never appends

	DashboardOpenPage = "dashboard-open.html" // rotor dashboard --open's redirect

	// AliasesFile holds the model aliases (rotor alias). It is written
	// under the home lock: aliases change seldom, and by hand.
	AliasesFile = "aliases.json"
	AliasesLock = AccountsLock

	// PricesFile overrides the model prices shipped in the binary (docs/cost.md). The user writes it; rotor only reads it, and never rewrites
	// it, not even a damaged one.
	PricesFile = "prices.json"

	// ClientKeyFile holds the stable client key with the file secrets
	// backend; with the keyring, ClientKeyMark (no secret in it) changes
	// whenever the key in the keyring does, so serves notice with a stat.
	ClientKeyFile = "client-key"
	ClientKeyMark = "client-key.changed"

	// IdentityKeyFile holds the secret each account's client identity is
	// derived from (docs/codex.md), made once under the home lock.
	IdentityKeyFile = "identity-key"
	IdentityKeyLock = AccountsLock
)

// refreshLockPrefix and refreshLockSuffix frame a refresh lock's account id.
const (
	refreshLockPrefix = ".refresh-"
	refreshLockSuffix = ".lock"
)

// RefreshLock is the lock that serializes token refreshes of one account
// across processes.
func RefreshLock(id string) string { return refreshLockPrefix + id + refreshLockSuffix }

// RefreshLockAccount is the account id a refresh lock file is named for,
// and whether name is one.
func RefreshLockAccount(name string) (id string, ok bool) {
	rest, ok := strings.CutPrefix(name, refreshLockPrefix)
	if !ok || name == AccountsLock {
		return "", false
	}
	return strings.CutSuffix(rest, refreshLockSuffix)
}

// CoreLocks are the lock files every rotor command uses.
var CoreLocks = []string{AccountsLock, SecretsLock, StateLock, UsageLock, serveLock}
