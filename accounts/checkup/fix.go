package checkup

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
)

// Action kinds, one per repair Fix knows.
const (
	ActionChmod           = "chmod"
	ActionRestoreStore    = "restore-store"
	ActionMergeDuplicate  = "merge-duplicate"
	ActionFingerprintKey  = "fingerprint-key"
	ActionRemoveOrphan    = "remove-orphaned-secret"
	ActionRefreshToken    = "refresh-token"
	ActionDisableAccount  = "disable-account"
	ActionClearState      = "clear-state"
	ActionDropState       = "drop-state"
	ActionResetState      = "reset-state"
	ActionRemoveLock      = "remove-stale-lock"
	ActionRemoveTemp      = "remove-temp-file"
	ActionRemoveProxyInfo = "remove-stale-proxy-info"
)

// Action outcomes.
const (
	ActionDone    = "done"
	ActionPlanned = "planned" // a dry run: what would be done
	ActionFailed  = "failed"
)

// Action is one repair Fix made, would make (dry run), or tried.
type Action struct {
	Action string `json:"action"`
	// Target is what was repaired: a file name, "account 2 (label)", or a
	// secret's account id.
	Target string `json:"target"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	Error  string `json:"error,omitempty"`
}

// FixResult is every action of one Fix run, in order.
type FixResult struct {
	DryRun  bool
	Actions []Action
}

// Changed reports whether anything on disk (or upstream: a spent refresh
// token) was changed.
func (r FixResult) Changed() bool {
	return slices.ContainsFunc(r.Actions, func(a Action) bool { return a.Status == ActionDone })
}

// Failed reports whether a repair failed (fix then exits 1).
func (r FixResult) Failed() bool {
	return slices.ContainsFunc(r.Actions, func(a Action) bool { return a.Status == ActionFailed })
}

// FixOptions says how far Fix may go.
type FixOptions struct {
	// DryRun changes nothing, refreshes nothing (refresh tokens are
	// single-use) and lists what Fix would do.
	DryRun bool
	// PruneSecrets deletes orphaned secrets: those that no account in the
	// store or in any backup names. Without it they are only listed: no
	// repair deletes a secret on its own (docs/files.md).
	PruneSecrets bool
}

// fixRun is one Fix in progress.
type fixRun struct {
	c     *Checkup
	ctx   context.Context
	dry   bool
	prune bool
	now   time.Time
	// pool is the pool as it is (or, in a dry run, would be) after the
	// steps so far; nil when the store is unreadable and was not restored,
	// and then every step that needs the account list is skipped, so a
	// broken store never makes secrets look orphaned. exists is false
	// when there is no accounts.json at all: a deleted store does not make
	// every secret an orphan either.
	pool   *accounts.Pool
	exists bool
	store  *accounts.Store // opened on first write
	out    []Action
}

func (f *fixRun) add(a Action) {
	if f.dry && a.Status == "" {
		a.Status = ActionPlanned
	}
	if a.Status == "" {
		a.Status = ActionDone
	}
	f.out = append(f.out, a)
}

func (f *fixRun) fail(a Action, err error) {
	a.Status, a.Error = ActionFailed, errText(err)
	f.out = append(f.out, a)
}

// openStore opens the account store for writing; only real runs write.
func (f *fixRun) openStore() (*accounts.Store, error) {
	if f.store == nil {
		st, err := accounts.Open(f.c.d.Dir)
		if err != nil {
			return nil, err
		}
		f.store = st
	}
	return f.store, nil
}

// fixSteps are Fix's repairs in the order they run: permissions before
// anything opens the store; the store before whatever needs its account
// list; tokens (which write state.json through the Runtime) before the
// state cleanup, so a Runtime sync cannot bring cleared deadlines back.
var fixSteps = []struct {
	name string
	run  func(f *fixRun)
}{
	{"permissions", fixPermissions},
	{"store", fixStore},
	{"fingerprints", fixFingerprints},
	{"duplicates", fixDuplicates},
	{"orphaned secrets", fixOrphans},
	{"tokens", fixTokens},
	{"state", fixState},
	{"locks", fixLocks},
	{"temp files", fixTemps},
	{"proxy.json", fixProxyInfo},
}

// Fix repairs what it can and lists every change, as o allows.
func (c *Checkup) Fix(ctx context.Context, o FixOptions) FixResult {
	f := &fixRun{c: c, ctx: ctx, dry: o.DryRun, prune: o.PruneSecrets, now: c.d.Clock.Now()}
	if fi, err := os.Stat(c.d.Dir); err != nil || !fi.IsDir() {
		return FixResult{DryRun: o.DryRun} // no home: nothing to repair
	}
	for _, s := range fixSteps {
		s.run(f)
	}
	return FixResult{DryRun: o.DryRun, Actions: f.out}
}

// fixPermissions makes the home 0700 and its files 0600.
func fixPermissions(f *fixRun) {
	dir := f.c.d.Dir
	if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm() != home.DirMode {
		f.chmod(dir, fi.Mode().Perm(), home.DirMode)
	}
	ents, err := homeFiles(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().Perm() != home.FileMode {
			f.chmod(filepath.Join(dir, e.Name()), fi.Mode().Perm(), home.FileMode)
		}
	}
}

func (f *fixRun) chmod(path string, from, to os.FileMode) {
	a := Action{Action: ActionChmod, Target: path, Detail: fmt.Sprintf("%04o -> %04o", from, to)}
	if !f.dry {
		if err := os.Chmod(path, to); err != nil {
			f.fail(a, err)
			return
		}
	}
	f.add(a)
}

// fixStore restores the newest good backup of an unreadable accounts.json
// (which, since every write backs up its result, holds the last good
// state), and salvages into it the accounts that were still in the pool:
// complete account objects the damaged file still holds, and accounts of
// older backups whose secret is still stored (removing an account deletes
// its secret, so such an account was never removed). The damaged file is
// kept as accounts.json.corrupt-<time>: hard-linked there before the
// backup is renamed over it, so readers never see the store missing, and
// its bytes are never lost.
func fixStore(f *fixRun) {
	pr := f.c.readPool()
	f.pool, f.exists = pr.pool, pr.exists
	if pr.err == nil {
		return
	}
	path := f.c.storePath()
	a := Action{Action: ActionRestoreStore, Target: home.AccountsFile}
	backups := f.c.goodBackups()
	if len(backups) == 0 {
		f.fail(a, fmt.Errorf("%s is unreadable (%v) and no backup is readable; it was left untouched: repair it by hand, or move it away and add the accounts again",
			home.AccountsFile, causeOf(pr.err)))
		return
	}
	b := backups[0]
	damaged, _ := os.ReadFile(path)
	pool, data, saved := f.salvage(b, backups[1:], damaged)
	aside := path + ".corrupt-" + f.now.UTC().Format("20060102T150405Z")
	what := fmt.Sprintf("%s (%s)", b.name, plural(len(b.pool.Accounts), "account"))
	if len(saved) > 0 {
		what += fmt.Sprintf(" and salvage %s (%s)", plural(len(saved), "account"), strings.Join(saved, ", "))
	}
	a.Detail = fmt.Sprintf("restore %s; keep the unreadable file as %s", what, filepath.Base(aside))
	if f.dry {
		f.add(a)
		f.pool = pool
		return
	}
	lock, err := home.LockFile(filepath.Join(f.c.d.Dir, home.AccountsLock), false, 15*time.Second)
	if err != nil {
		f.fail(a, err)
		return
	}
	defer lock.Unlock()
	// Under the lock, look again: another rotor may have repaired it.
	if pr := f.c.readPool(); pr.err == nil {
		f.pool, f.exists = pr.pool, pr.exists
		return
	}
	kept, err := home.KeepAside(path, aside)
	if err != nil {
		f.fail(a, fmt.Errorf("cannot keep the unreadable file as %s: %w; nothing was changed", filepath.Base(aside), err))
		return
	}
	a.Detail = fmt.Sprintf("restored %s; the unreadable file is kept as %s", strings.Replace(what, " and salvage ", " and salvaged ", 1), filepath.Base(kept))
	if err := home.WriteFile(path, data); err != nil {
		f.fail(a, fmt.Errorf("writing the backup failed: %w", err))
		return
	}
	f.add(a)
	f.pool = pool
}

// salvage adds to backup b's pool the accounts it lacks that were still in
// the pool when it was damaged, and returns the pool, its bytes, and the
// salvaged accounts' names.
func (f *fixRun) salvage(b backup, older []backup, damaged []byte) (*accounts.Pool, []byte, []string) {
	var candidates []accounts.Account
	candidates = append(candidates, completeAccounts(damaged)...)
	if f.c.d.Secrets != nil {
		if ids, err := f.c.d.Secrets.IDs(); err == nil {
			for _, o := range older {
				for _, acc := range o.pool.Accounts {
					if slices.Contains(ids, acc.ID) {
						candidates = append(candidates, acc)
					}
				}
			}
		}
	}
	var p *accounts.Pool
	var saved []string
	for _, acc := range candidates {
		if acc.ID == "" || acc.Kind == "" {
			continue
		}
		if p == nil {
			p, _ = accounts.Parse(b.name, b.data) // a copy to add to
		}
		if p.IndexOf(acc.ID) > 0 {
			continue
		}
		p.Accounts = append(p.Accounts, acc)
		saved = append(saved, cmp.Or(acc.Label, acc.Email, acc.ID))
	}
	if len(saved) == 0 {
		return b.pool, b.data, nil
	}
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return b.pool, b.data, nil
	}
	return p, append(data, '\n'), saved
}

// completeAccounts returns the account objects a damaged accounts.json
// still holds whole, reading its "accounts" array until the damage.
func completeAccounts(data []byte) []accounts.Account {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil
		}
		if key != "accounts" {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return nil
			}
			continue
		}
		if t, err := dec.Token(); err != nil || t != json.Delim('[') {
			return nil
		}
		var out []accounts.Account
		for dec.More() {
			var a accounts.Account
			if dec.Decode(&a) != nil {
				break
			}
			out = append(out, a)
		}
		return out
	}
	return nil
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// fixFingerprints stores the key fingerprint of API-key accounts added
// before rotor kept them, so fixDuplicates (and add-key) can see a key
// that is in the pool twice. A dry run only names them: computing needs
// the home's salt, which a first use would draw and store.
func fixFingerprints(f *fixRun) {
	if f.pool == nil || f.c.d.Secrets == nil {
		return
	}
	ids, err := f.c.d.Secrets.IDs()
	if err != nil {
		return // the secrets step reports the backend
	}
	un := f.c.unfingerprinted(f.pool, ids)
	if len(un) == 0 {
		return
	}
	if f.dry {
		for _, i := range un {
			f.add(Action{Action: ActionFingerprintKey, Target: accountName(i, f.pool.At(i)), Detail: "would store its key's fingerprint"})
		}
		return
	}
	fail := func(err error) { f.fail(Action{Action: ActionFingerprintKey, Target: home.AccountsFile}, err) }
	salt, err := f.c.d.Secrets.Salt()
	if err != nil {
		fail(err)
		return
	}
	st, err := f.openStore()
	if err != nil {
		fail(err)
		return
	}
	var filled []int
	p, err := st.Update(func(p *accounts.Pool) error {
		if filled = accounts.FillFingerprints(p, f.c.d.Secrets, salt); len(filled) == 0 {
			return errNoWrite
		}
		return nil
	})
	if errors.Is(err, errNoWrite) {
		return
	}
	if err != nil {
		fail(err)
		return
	}
	f.pool = p
	for _, i := range filled {
		f.add(Action{Action: ActionFingerprintKey, Target: accountName(i, p.At(i)), Detail: "stored its key's fingerprint, so a second copy of the key is seen"})
	}
}

// fixDuplicates merges accounts that are the same login into the first:
// the pin moves to it, and the newest secret is kept.
func fixDuplicates(f *fixRun) {
	if f.pool == nil {
		return
	}
	groups := duplicates(f.pool)
	if len(groups) == 0 {
		return
	}
	if f.dry {
		for _, g := range groups {
			keep := f.pool.At(g[0])
			for _, i := range g[1:] {
				f.add(Action{Action: ActionMergeDuplicate, Target: accountName(i, f.pool.At(i)),
					Detail: f.c.mergeDetail(f.pool, keep, g[0], i)})
			}
		}
		return
	}
	st, err := f.openStore()
	if err != nil {
		f.fail(Action{Action: ActionMergeDuplicate, Target: home.AccountsFile}, err)
		return
	}
	var done []Action
	p, err := st.Update(func(p *accounts.Pool) error {
		done = nil
		var removed []string
		for _, g := range duplicates(p) { // again, under the lock
			keep := p.At(g[0])
			for _, i := range g[1:] {
				dup := p.At(i)
				done = append(done, Action{Action: ActionMergeDuplicate, Target: accountName(i, dup), Detail: f.c.mergeDetail(p, keep, g[0], i)})
				if err := f.keepNewestSecret(keep.ID, dup.ID); err != nil {
					return err
				}
				if p.PinnedAccountID != nil && *p.PinnedAccountID == dup.ID {
					id := keep.ID
					p.PinnedAccountID = &id
					p.AffinityGeneration++
				}
				removed = append(removed, dup.ID)
			}
		}
		for _, id := range removed {
			p.Remove(p.IndexOf(id))
		}
		return nil
	})
	if err != nil {
		f.fail(Action{Action: ActionMergeDuplicate, Target: home.AccountsFile}, err)
		return
	}
	f.pool = p
	for _, a := range done {
		f.add(a)
	}
	// The merged duplicates' secrets stay: no repair deletes a secret,
	// and the kept account already has the newest of them.
}

func (c *Checkup) mergeDetail(p *accounts.Pool, keep *accounts.Account, keepIndex, dupIndex int) string {
	s := fmt.Sprintf("%s as account %d; removed, account %d kept", c.sameWhat(keep), keepIndex, keepIndex)
	if p.PinnedAccountID != nil && *p.PinnedAccountID == p.At(dupIndex).ID {
		s += fmt.Sprintf("; the pin moves to account %d", keepIndex)
	}
	return s + " (indexes as before the fix)"
}

// keepNewestSecret gives the kept account the duplicate's secret when the
// kept one has none, or the duplicate's access token outlives it: the
// newest login is the one most likely to still refresh.
func (f *fixRun) keepNewestSecret(keepID, dupID string) error {
	s := f.c.d.Secrets
	if s == nil {
		return nil
	}
	dup, err := s.Get(dupID)
	if err != nil {
		return nil // nothing to carry over
	}
	kept, err := s.Get(keepID)
	switch {
	case errors.Is(err, secrets.ErrNotFound):
	case err != nil:
		return err
	case !dup.ExpiresAt.After(kept.ExpiresAt):
		return nil
	}
	return s.Set(keepID, dup)
}

// errNoWrite ends a Store.Update that only needed the store lock.
var errNoWrite = errors.New("checkup: nothing to write")

// fixOrphans lists the secrets that no account in the store or in any
// backup names, and deletes them only with --prune-secrets. In a real run
// it decides under the store lock, because adding an account stores its
// secret before the account appears (under that lock).
func fixOrphans(f *fixRun) {
	if f.pool == nil || !f.exists || f.c.d.Secrets == nil {
		return
	}
	list := func(p *accounts.Pool) ([]string, error) {
		ids, err := f.c.d.Secrets.IDs()
		if err != nil {
			return nil, err
		}
		out := orphans(p, ids)
		for _, b := range f.c.goodBackups() {
			out = slices.DeleteFunc(out, func(id string) bool { return b.pool.IndexOf(id) > 0 })
		}
		return out, nil
	}
	const detail = "the secret belongs to no account in the store or its backups"
	if f.dry || !f.prune {
		ids, err := list(f.pool)
		if err != nil {
			f.fail(Action{Action: ActionRemoveOrphan, Target: f.c.d.Secrets.Backend()}, err)
			return
		}
		for _, id := range ids {
			a := Action{Action: ActionRemoveOrphan, Target: id, Status: ActionPlanned, Detail: detail}
			if !f.prune {
				a.Detail += "; kept: \"rotor fix --prune-secrets\" deletes it"
			}
			f.add(a)
		}
		return
	}
	st, err := f.openStore()
	if err != nil {
		f.fail(Action{Action: ActionRemoveOrphan, Target: home.AccountsFile}, err)
		return
	}
	_, err = st.Update(func(p *accounts.Pool) error {
		ids, err := list(p)
		if err != nil {
			return err
		}
		for _, id := range ids {
			a := Action{Action: ActionRemoveOrphan, Target: id, Detail: detail}
			if err := f.c.d.Secrets.Delete(id); err != nil {
				f.fail(a, err)
				continue
			}
			f.add(a)
		}
		return errNoWrite
	})
	if err != nil && !errors.Is(err, errNoWrite) {
		f.fail(Action{Action: ActionRemoveOrphan, Target: f.c.d.Secrets.Backend()}, err)
	}
}

// fixTokens refreshes the expired access tokens of the accounts whose kind
// has tokens to renew (ChatGPT's), and disables (and flags token-invalid)
// the accounts whose refresh the server refuses for good. Flagged accounts
// are left to verify-flagged.
func fixTokens(f *fixRun) {
	if f.pool == nil || f.c.d.Secrets == nil {
		return
	}
	refreshed := false
	accts := slices.Clone(f.pool.Accounts) // disable replaces f.pool
	for i, a := range accts {
		if !f.c.adapter(&a).Refreshes() {
			continue
		}
		if _, flagged := a.Flagged(); flagged {
			continue
		}
		sec, err := f.c.d.Secrets.Get(a.ID)
		if err != nil || sec.ExpiresAt.IsZero() || sec.ExpiresAt.After(f.now) {
			continue // a missing secret is doctor's to report; fix cannot make one
		}
		act := Action{Action: ActionRefreshToken, Target: accountName(i+1, &a),
			Detail: fmt.Sprintf("access token expired %s ago", accounts.HumanDuration(f.now.Sub(sec.ExpiresAt)))}
		if f.dry {
			f.add(act)
			continue
		}
		if f.c.d.Refresher == nil {
			f.fail(act, errors.New("no token refresher configured"))
			continue
		}
		ctx, cancel := context.WithTimeout(f.ctx, f.c.d.RefreshTimeout)
		fresh, err := f.c.d.Refresher.Refresh(ctx, a, sec)
		cancel()
		if err != nil {
			f.fail(act, err)
			if rerr.CodeOf(err) == rerr.CodeAuthRefreshFailed && !rerr.IsRetryable(err) {
				f.disable(i+1, a)
			}
			continue
		}
		act.Detail += "; refreshed"
		if !fresh.ExpiresAt.IsZero() {
			act.Detail += ", valid until " + fresh.ExpiresAt.UTC().Format(time.RFC3339)
		}
		f.add(act)
		if f.c.d.Runtime != nil {
			f.c.d.Runtime.TokensChanged(a.ID)
			refreshed = true
		}
	}
	if refreshed {
		// Running proxies see tokens_at move and read the secret again.
		if err := f.c.d.Runtime.Sync(nil); err != nil {
			f.fail(Action{Action: ActionRefreshToken, Target: home.StateFile, Detail: "telling running proxies about the new tokens"}, err)
		}
	}
}

// disable disables the account at index and flags it token-invalid.
func (f *fixRun) disable(index int, a accounts.Account) {
	act := Action{Action: ActionDisableAccount, Target: accountName(index, &a),
		Detail: "the auth server refused its refresh token for good; disabled and flagged " + accounts.FlagTokenInvalid +
			": sign in again with \"rotor login\", then \"rotor enable " + fmt.Sprint(index) + "\""}
	st, err := f.openStore()
	if err == nil {
		var p *accounts.Pool
		p, err = st.Flag(a.ID, accounts.FlagTokenInvalid, true)
		if err == nil {
			f.pool = p
		}
	}
	if err != nil {
		f.fail(act, err)
		return
	}
	f.add(act)
}

// fixState clears deadlines that have passed from state.json and drops the
// state of accounts no longer in the pool, through the runtime (which keeps
// fields it does not know). Running proxies are unaffected: a passed
// deadline means nothing to them, and they drop removed accounts by
// themselves. A state.json that does not parse is started afresh.
func fixState(f *fixRun) {
	if f.pool == nil || f.c.d.Runtime == nil {
		return
	}
	if _, err := os.Stat(filepath.Join(f.c.d.Dir, home.StateFile)); err != nil {
		return
	}
	inPool := func(id string) bool { return f.pool.IndexOf(id) > 0 }
	dropped, cleared, damaged, err := f.c.d.Runtime.Prune(f.now, inPool, f.dry)
	switch {
	case err != nil:
		f.fail(Action{Action: ActionClearState, Target: home.StateFile}, err)
		return
	case damaged && f.dry:
		f.add(Action{Action: ActionResetState, Target: home.StateFile, Detail: "unreadable; keep it aside and start empty"})
		return
	case damaged:
		a := Action{Action: ActionResetState, Target: home.StateFile}
		kept, err := f.c.d.Runtime.Reset(f.now)
		if err != nil {
			f.fail(a, err)
			return
		}
		a.Detail = "unreadable; started empty, the damaged file is kept as " + kept
		f.add(a)
		return
	}
	slices.Sort(dropped)
	for _, id := range dropped {
		f.add(Action{Action: ActionDropState, Target: id, Detail: "runtime state of an account no longer in the pool"})
	}
	ids := make([]string, 0, len(cleared))
	for id := range cleared {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int { return f.pool.IndexOf(a) - f.pool.IndexOf(b) })
	for _, id := range ids {
		i := f.pool.IndexOf(id)
		f.add(Action{Action: ActionClearState, Target: accountName(i, f.pool.At(i)), Detail: "expired " + strings.Join(cleared[id], ", ")})
	}
}

// fixLocks removes the per-account refresh locks of accounts no longer in
// the pool, when nobody holds them (a non-blocking flock succeeds).
func fixLocks(f *fixRun) {
	if f.pool == nil {
		return
	}
	matches, _ := filepath.Glob(filepath.Join(f.c.d.Dir, home.RefreshLock("*")))
	for _, m := range matches {
		name := filepath.Base(m)
		// The core locks (home.CoreLocks) are never stale in a harmful
		// way (a lock dies with its process), and removing one while
		// another process opens it could let two processes hold "the"
		// lock on two different files: only refresh locks are removed.
		id, ok := home.RefreshLockAccount(name)
		if !ok || slices.Contains(home.CoreLocks, name) {
			continue
		}
		if f.pool.IndexOf(id) > 0 {
			continue
		}
		l, free, err := home.TryLock(m)
		if err != nil || !free {
			continue // held: a refresh is running; not stale
		}
		a := Action{Action: ActionRemoveLock, Target: name, Detail: "refresh lock of an account no longer in the pool; nobody holds it"}
		if !f.dry {
			// Removed while held, so nobody can take it between the
			// check and the removal.
			if err := os.Remove(m); err != nil {
				l.Unlock()
				f.fail(a, err)
				continue
			}
		}
		l.Unlock()
		f.add(a)
	}
}

// fixTemps removes the temp files of atomic writes whose writer died
// (older than TempFileAge). Those of secrets.json hold secrets.
func fixTemps(f *fixRun) {
	for _, t := range leftoverTemps(f.c.d.Dir, f.now) {
		a := Action{Action: ActionRemoveTemp, Target: t.name,
			Detail: fmt.Sprintf("left by an interrupted write %s ago", accounts.HumanDuration(t.age))}
		if t.secret {
			a.Detail += "; it holds secrets"
		}
		if !f.dry {
			if err := os.Remove(filepath.Join(f.c.d.Dir, t.name)); err != nil {
				f.fail(a, err)
				continue
			}
		}
		f.add(a)
	}
}

// leftoverTemp is a temp file of an atomic write that its writer left.
type leftoverTemp struct {
	name   string
	age    time.Duration
	secret bool // a copy of secrets.json: it holds keys and tokens
}

// leftoverTemps lists the home's temp files older than TempFileAge; a
// younger one may belong to a write in progress.
func leftoverTemps(dir string, now time.Time) []leftoverTemp {
	matches, _ := filepath.Glob(filepath.Join(dir, home.TempPattern("*")))
	var out []leftoverTemp
	for _, m := range matches {
		fi, err := os.Lstat(m)
		if err != nil || !fi.Mode().IsRegular() || now.Sub(fi.ModTime()) < TempFileAge {
			continue
		}
		secret, _ := filepath.Match(home.TempPattern(home.SecretsFile), filepath.Base(m))
		out = append(out, leftoverTemp{name: filepath.Base(m), age: now.Sub(fi.ModTime()), secret: secret})
	}
	return out
}

// fixProxyInfo removes the serve records whose process is gone, or which
// are not JSON at all: no client can use them. A proxy.json naming a dead
// serve names a live one instead, when one runs.
func fixProxyInfo(f *fixRun) {
	dir := f.c.d.Dir
	ins, bad, err := home.Infos(dir)
	if err != nil {
		return
	}
	for _, name := range bad {
		a := Action{Action: ActionRemoveProxyInfo, Target: name, Detail: "not valid JSON"}
		if !f.dry {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				f.fail(a, err)
				continue
			}
		}
		f.add(a)
	}
	for _, in := range ins {
		if f.c.d.Alive(in.PID) {
			continue
		}
		a := Action{Action: ActionRemoveProxyInfo, Target: home.RecordName(in.PID), Detail: fmt.Sprintf("pid %d is not running", in.PID)}
		if !f.dry {
			if err := home.RemoveInfo(dir, in.PID); err != nil {
				f.fail(a, err)
				continue
			}
		}
		f.add(a)
	}
}
