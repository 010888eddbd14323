package checkup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/aliases"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/accounts/oauth"
	"github.com/rotorproxy/rotor/accounts/prices"
	"github.com/rotorproxy/rotor/accounts/secrets"
)

// Check statuses, from good to bad.
const (
	StatusOK    = "ok"
	StatusWarn  = "warn"
	StatusError = "error"
)

// Check is one line of `rotor doctor`: what was checked, how it went, and a
// detail a person can act on.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// DoctorResult is every check of one doctor run, in order.
type DoctorResult struct {
	Checks []Check
}

// Count returns how many checks ended ok, warn and error.
func (r DoctorResult) Count() (ok, warn, errs int) {
	for _, c := range r.Checks {
		switch c.Status {
		case StatusOK:
			ok++
		case StatusWarn:
			warn++
		default:
			errs++
		}
	}
	return ok, warn, errs
}

// Failed reports whether any check is an error (doctor then exits 1).
func (r DoctorResult) Failed() bool {
	_, _, errs := r.Count()
	return errs > 0
}

// doctorRun is what the checks share: everything read once.
type doctorRun struct {
	c       *Checkup
	ctx     context.Context
	now     time.Time
	pr      poolRead
	ids     []string // ids with secrets; nil when the backend failed
	idsErr  error
	homeErr error // the home directory is missing or not one
}

// doctorChecks are docs/commands.md's doctor checks, in the order shown. Each
// returns zero or more checks (one per account for "account").
var doctorChecks = []struct {
	name string
	run  func(r *doctorRun) []Check
}{
	{"home", checkHome},
	{"files", checkFiles},
	{"temp_files", checkTemps},
	{"store", checkStore},
	{"secrets", checkSecretsBackend},
	{"account", checkAccounts},
	{"codex_link", checkCodexLinks},
	{"orphaned_secrets", checkOrphans},
	{"duplicates", checkDuplicates},
	{"flagged", checkFlagged},
	{"pin", checkPin},
	{"state", checkState},
	{"aliases", checkAliases},
	{"prices", checkPrices},
	{"proxy", checkProxy},
}

// Doctor runs every check. It changes nothing on disk.
func (c *Checkup) Doctor(ctx context.Context) DoctorResult {
	r := &doctorRun{c: c, ctx: ctx, now: c.d.Clock.Now()}
	if fi, err := os.Stat(c.d.Dir); err != nil {
		r.homeErr = err
	} else if !fi.IsDir() {
		r.homeErr = fmt.Errorf("%s is not a directory", c.d.Dir)
	}
	var res DoctorResult
	if r.homeErr != nil {
		// Nothing else can be looked at; a missing home is simply new.
		return DoctorResult{Checks: checkHome(r)}
	}
	r.pr = c.readPool()
	r.ids, r.idsErr = c.secretIDs()
	for _, dc := range doctorChecks {
		res.Checks = append(res.Checks, dc.run(r)...)
	}
	return res
}

func checkHome(r *doctorRun) []Check {
	dir := r.c.d.Dir
	if errors.Is(r.homeErr, os.ErrNotExist) {
		return []Check{{"home", StatusWarn, fmt.Sprintf("%s does not exist yet; rotor creates it (0700) when you add an account", dir)}}
	}
	if r.homeErr != nil {
		return []Check{{"home", StatusError, r.homeErr.Error() + "; set ROTOR_HOME to a directory"}}
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return []Check{{"home", StatusError, err.Error()}}
	}
	return []Check{permCheck("home", dir, fi.Mode().Perm(), home.DirMode, "chmod 700 "+dir)}
}

// permCheck judges one mode: others having any access is an error (the
// home holds secrets), any other difference a warning.
func permCheck(name, path string, got, want os.FileMode, fix string) Check {
	switch {
	case got == want:
		return Check{name, StatusOK, fmt.Sprintf("%s is %04o", path, got)}
	case got&0o077 != 0:
		return Check{name, StatusError, fmt.Sprintf("%s is %04o: other users can read it; run %q (or \"rotor fix\")", path, got, fix)}
	default:
		return Check{name, StatusWarn, fmt.Sprintf("%s is %04o, expected %04o; run %q (or \"rotor fix\")", path, got, want, fix)}
	}
}

// homeFiles lists the regular files directly in the home, sorted.
func homeFiles(dir string) ([]os.DirEntry, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := ents[:0]
	for _, e := range ents {
		if e.Type().IsRegular() {
			out = append(out, e)
		}
	}
	return out, nil
}

func checkFiles(r *doctorRun) []Check {
	ents, err := homeFiles(r.c.d.Dir)
	if err != nil {
		return []Check{{"files", StatusError, err.Error()}}
	}
	var open, odd []string
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		switch perm := fi.Mode().Perm(); {
		case perm == home.FileMode:
		case perm&0o077 != 0:
			open = append(open, fmt.Sprintf("%s (%04o)", e.Name(), perm))
		default:
			odd = append(odd, fmt.Sprintf("%s (%04o)", e.Name(), perm))
		}
	}
	fix := fmt.Sprintf("run \"chmod 600 %s/*\" (or \"rotor fix\")", r.c.d.Dir)
	switch {
	case len(open) > 0:
		return []Check{{"files", StatusError, "readable by other users: " + strings.Join(append(open, odd...), ", ") + "; " + fix}}
	case len(odd) > 0:
		return []Check{{"files", StatusWarn, "not 0600: " + strings.Join(odd, ", ") + "; " + fix}}
	}
	return []Check{{"files", StatusOK, "every file is 0600 (" + plural(len(ents), "file") + ")"}}
}

// checkCodexLinks looks at each account linked to a Codex CLI auth.json
// (docs/codex.md): the file must exist and still hold that account's login, or
// rotor and Codex no longer share refreshes.
func checkCodexLinks(r *doctorRun) []Check {
	if r.pr.pool == nil {
		return nil
	}
	var out []Check
	for i := range r.pr.pool.Accounts {
		a := &r.pr.pool.Accounts[i]
		if a.CodexAuthFile == "" {
			continue
		}
		name := accountName(i+1, a)
		ct, err := accounts.ReadCodexAuth(a.CodexAuthFile)
		switch id := ct.Identity(); {
		case err != nil && !fileExists(a.CodexAuthFile):
			out = append(out, Check{"codex_link", StatusWarn, fmt.Sprintf("%s is linked to %s, which is gone; \"rotor unlink %d\" or import it again", name, a.CodexAuthFile, i+1)})
		case err != nil:
			out = append(out, Check{"codex_link", StatusWarn, fmt.Sprintf("%s is linked to %s, which rotor cannot read: %v", name, a.CodexAuthFile, causeOf(err))})
		case !a.SameLogin(id):
			out = append(out, Check{"codex_link", StatusWarn, fmt.Sprintf("%s is linked to %s, which now holds another login (%s); rotor leaves it alone: \"rotor unlink %d\"", name, a.CodexAuthFile, orNone(id.Email), i+1)})
		default:
			out = append(out, Check{"codex_link", StatusOK, fmt.Sprintf("%s shares its refreshes with %s", name, a.CodexAuthFile)})
		}
	}
	return out
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func orNone(s string) string {
	if s == "" {
		return "no email"
	}
	return s
}

func checkTemps(r *doctorRun) []Check {
	temps := leftoverTemps(r.c.d.Dir, r.now)
	if len(temps) == 0 {
		return nil
	}
	var names []string
	secret := false
	for _, t := range temps {
		names = append(names, t.name)
		secret = secret || t.secret
	}
	detail := "left by interrupted writes: " + strings.Join(names, ", ")
	if secret {
		detail += "; copies of " + home.SecretsFile + " hold keys and tokens"
	}
	return []Check{{"temp_files", StatusWarn, detail + "; \"rotor fix\" removes them"}}
}

func checkStore(r *doctorRun) []Check {
	path := r.c.storePath()
	switch {
	case r.pr.err != nil:
		detail := r.pr.err.Error()
		if b := r.c.goodBackups(); len(b) > 0 {
			detail = fmt.Sprintf("%s is unreadable (%v); \"rotor fix\" restores %s (%s) and keeps the damaged file",
				path, causeOf(r.pr.err), b[0].name, plural(len(b[0].pool.Accounts), "account"))
		} else {
			detail = fmt.Sprintf("%s is unreadable (%v) and no backup is readable; repair the file by hand, or move it away and add the accounts again",
				path, causeOf(r.pr.err))
		}
		return []Check{{"store", StatusError, detail}}
	case !r.pr.exists:
		return []Check{{"store", StatusOK, fmt.Sprintf("%s does not exist yet (no accounts)", path)}}
	}
	p := r.pr.pool
	enabled := 0
	for i := range p.Accounts {
		if p.Accounts[i].Enabled {
			enabled++
		}
	}
	return []Check{{"store", StatusOK, fmt.Sprintf("%s is readable: %s, %d enabled", path, plural(len(p.Accounts), "account"), enabled)}}
}

// causeOf is the cause of a typed error (the parse error), not its hint.
func causeOf(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}

func checkSecretsBackend(r *doctorRun) []Check {
	d := r.c.d
	if d.Secrets == nil {
		return []Check{{"secrets", StatusError, "no secrets backend: " + errText(r.c.secretsUnavailable()) +
			"; set ROTOR_SECRETS=file to keep secrets in secrets.json (0600)"}}
	}
	if r.idsErr != nil {
		return []Check{{"secrets", StatusError, fmt.Sprintf("the %s backend cannot list secrets: %s", d.Secrets.Backend(), errText(r.idsErr))}}
	}
	backend := d.Secrets.Backend()
	if backend == secrets.BackendFile && (d.SecretsMode == "" || d.SecretsMode == secrets.ModeAuto) {
		return []Check{{"secrets", StatusWarn, fmt.Sprintf("no OS keyring answered; the secrets of %s are in %s (0600). Set ROTOR_SECRETS=file to make that the choice",
			plural(len(r.ids), "account"), filepath.Join(d.Dir, home.SecretsFile))}}
	}
	where := "the OS keyring"
	if backend == secrets.BackendFile {
		where = filepath.Join(d.Dir, home.SecretsFile)
	}
	return []Check{{"secrets", StatusOK, fmt.Sprintf("%s backend: secrets of %s in %s", backend, plural(len(r.ids), "account"), where)}}
}

// checkAccounts checks, per account, that its secret is there and, for
// accounts with tokens to renew (ChatGPT's), when its access token expires.
func checkAccounts(r *doctorRun) []Check {
	if r.pr.pool == nil || r.c.d.Secrets == nil || r.idsErr != nil {
		return nil // the store or secrets check already says why
	}
	var out []Check
	for i := range r.pr.pool.Accounts {
		a := &r.pr.pool.Accounts[i]
		name := fmt.Sprintf("account:%d", i+1)
		who := accountName(i+1, a)
		ad := r.c.adapter(a)
		sec, err := r.c.d.Secrets.Get(a.ID)
		if err != nil {
			status, what := StatusError, "has no secret"
			if !errors.Is(err, secrets.ErrNotFound) {
				what = "secret cannot be read: " + errText(err)
			}
			out = append(out, Check{name, status, fmt.Sprintf("%s %s; remove it (\"rotor remove %d\") and add it again with %s", who, what, i+1, ad.AddCommand())})
			continue
		}
		out = append(out, tokenCheck(name, who, i+1, ad, sec, r.now))
	}
	return out
}

// tokenCheck judges the secret an account of ad's kind has.
func tokenCheck(name, who string, index int, ad Adapter, sec secrets.Secret, now time.Time) Check {
	if !ad.Refreshes() {
		if sec.APIKey == "" {
			return Check{name, StatusError, fmt.Sprintf("%s has an empty API key; remove it (\"rotor remove %d\") and add it again with %s", who, index, ad.AddCommand())}
		}
		return Check{name, StatusOK, who + ": API key present"}
	}
	switch left := sec.ExpiresAt.Sub(now); {
	case sec.AccessToken == "" && sec.RefreshToken == "":
		return Check{name, StatusError, fmt.Sprintf("%s has no tokens; sign in again with \"rotor login\"", who)}
	case sec.ExpiresAt.IsZero():
		return Check{name, StatusOK, who + ": tokens present, access-token expiry unknown"}
	case left <= 0 && sec.RefreshToken == "":
		return Check{name, StatusError, fmt.Sprintf("%s: access token expired %s ago and there is no refresh token; sign in again with \"rotor login\"", who, accounts.HumanDuration(left))}
	case left <= 0:
		return Check{name, StatusWarn, fmt.Sprintf("%s: access token expired %s ago; the proxy refreshes it on next use, or run \"rotor fix\"", who, accounts.HumanDuration(left))}
	case left < oauth.RefreshLead:
		return Check{name, StatusOK, fmt.Sprintf("%s: access token expires in %s; refreshed on next use", who, accounts.HumanDuration(left))}
	}
	return Check{name, StatusOK, fmt.Sprintf("%s: tokens present, access token valid for %s", who, accounts.HumanDuration(sec.ExpiresAt.Sub(now)))}
}

func checkOrphans(r *doctorRun) []Check {
	if r.pr.pool == nil || r.idsErr != nil {
		return nil
	}
	o := orphans(r.pr.pool, r.ids)
	if len(o) == 0 {
		return []Check{{"orphaned_secrets", StatusOK, "every secret belongs to an account"}}
	}
	return []Check{{"orphaned_secrets", StatusWarn, fmt.Sprintf("%d secret(s) belong to no account (%s); \"rotor fix\" removes them",
		len(o), strings.Join(o, ", "))}}
}

// checkState reports a state.json that does not parse: advisory, so a
// warning, and "rotor fix" starts it afresh.
func checkState(r *doctorRun) []Check {
	data, err := os.ReadFile(filepath.Join(r.c.d.Dir, home.StateFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return []Check{{"state", StatusWarn, err.Error()}}
	case !json.Valid(data):
		return []Check{{"state", StatusWarn, home.StateFile + " is damaged; commands read it as empty and \"rotor fix\" rewrites it"}}
	}
	return []Check{{"state", StatusOK, home.StateFile + " reads"}}
}

// checkAliases reports an aliases.json that cannot be read: running
// serves keep the aliases they had, a new serve starts with none, and no
// command overwrites it, so the user must mend it. Nothing when there is
// no file.
func checkAliases(r *doctorRun) []Check {
	if _, err := os.Stat(filepath.Join(r.c.d.Dir, home.AliasesFile)); errors.Is(err, os.ErrNotExist) {
		return nil // and Open would make a missing home
	}
	st, err := aliases.Open(r.c.d.Dir)
	if err != nil {
		return []Check{{"aliases", StatusWarn, err.Error()}}
	}
	list, err := st.Load()
	switch {
	case err != nil:
		return []Check{{"aliases", StatusWarn, err.Error() + " Until then running serves keep the aliases they had, and a new one starts with none."}}
	case list == nil:
		return nil
	}
	return []Check{{"aliases", StatusOK, fmt.Sprintf("%d model alias(es)", len(list))}}
}

// checkPrices reports a prices.json that cannot be read, naming it and
// what is wrong: until it is mended, usage is priced with the shipped
// prices, and no command overwrites it. Nothing when there is no file.
func checkPrices(r *doctorRun) []Check {
	tab, err := prices.Load(r.c.d.Dir)
	switch {
	case err != nil:
		return []Check{{"prices", StatusWarn, err.Error() + " Until then rotor report, the dashboard and /metrics use the shipped prices."}}
	case tab.About().File == "":
		return nil
	}
	a := tab.About()
	return []Check{{"prices", StatusOK, fmt.Sprintf("%s prices %d model(s), of %s, over the shipped prices of %s", home.PricesFile, len(a.FileModels), a.FileDate, a.Date)}}
}

func checkDuplicates(r *doctorRun) []Check {
	if r.pr.pool == nil {
		return nil
	}
	groups := duplicates(r.pr.pool)
	var parts []string
	for _, g := range groups {
		parts = append(parts, fmt.Sprintf("accounts %s hold %s", joinInts(g), r.c.sameWhat(r.pr.pool.At(g[0]))))
	}
	if un := r.c.unfingerprinted(r.pr.pool, r.ids); len(un) > 0 {
		what := "API-key account " + joinInts(un) + " has no key fingerprint yet, so a second copy of its key"
		if len(un) > 1 {
			what = "API-key accounts " + joinInts(un) + " have no key fingerprint yet, so a second copy of their keys"
		}
		parts = append(parts, what+" cannot be seen")
	}
	if len(parts) == 0 {
		return []Check{{"duplicates", StatusOK, "no account is in the pool twice"}}
	}
	return []Check{{"duplicates", StatusWarn, strings.Join(parts, "; ") + "; \"rotor fix\" fingerprints keys and merges duplicates into the first"}}
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	switch len(s) {
	case 1:
		return s[0]
	case 2:
		return s[0] + " and " + s[1]
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

func checkFlagged(r *doctorRun) []Check {
	if r.pr.pool == nil {
		return nil
	}
	var flagged []string
	for i := range r.pr.pool.Accounts {
		a := &r.pr.pool.Accounts[i]
		if why, ok := a.Flagged(); ok {
			flagged = append(flagged, fmt.Sprintf("%s: %s", accountName(i+1, a), why))
		}
	}
	if len(flagged) == 0 {
		return []Check{{"flagged", StatusOK, "no account is flagged"}}
	}
	return []Check{{"flagged", StatusWarn, strings.Join(flagged, "; ") + "; \"rotor verify-flagged\" re-checks them, or sign in again"}}
}

func checkPin(r *doctorRun) []Check {
	p := r.pr.pool
	if p == nil {
		return nil
	}
	if p.PinnedAccountID == nil {
		return []Check{{"pin", StatusOK, "not pinned: rotor rotates between accounts"}}
	}
	i := p.IndexOf(*p.PinnedAccountID)
	if i == 0 {
		return []Check{{"pin", StatusError, fmt.Sprintf("the pin names account id %s, which is no longer in the pool; every request fails until you run \"rotor unpin\" or \"rotor switch <index>\"",
			*p.PinnedAccountID)}}
	}
	a := p.At(i)
	if !a.Enabled {
		return []Check{{"pin", StatusError, fmt.Sprintf("pinned to %s, which is disabled: every request fails with 503; run \"rotor enable %d\" or \"rotor unpin\"", accountName(i, a), i)}}
	}
	if why, ok := a.Flagged(); ok {
		return []Check{{"pin", StatusError, fmt.Sprintf("pinned to %s, which is flagged %s: every request fails with 503; run \"rotor verify-flagged\" or \"rotor unpin\"", accountName(i, a), why)}}
	}
	return []Check{{"pin", StatusOK, fmt.Sprintf("pinned to %s; \"rotor unpin\" rotates again", accountName(i, a))}}
}

// checkProxy checks every serve on the home (each keeps its own record):
// one check, as bad as the worst serve, naming them all.
func checkProxy(r *doctorRun) []Check {
	ins, bad, err := home.Infos(r.c.d.Dir)
	if err != nil {
		return []Check{{"proxy", StatusWarn, err.Error()}}
	}
	if len(ins) == 0 && len(bad) == 0 {
		return []Check{{"proxy", StatusOK, "no proxy running (no serve record); start one with \"rotor serve\""}}
	}
	status := StatusOK
	var parts []string
	worse := func(s string) {
		if rank[s] > rank[status] {
			status = s
		}
	}
	for _, name := range bad {
		worse(StatusWarn)
		parts = append(parts, name+" is not valid JSON; \"rotor fix\" removes it")
	}
	for _, in := range ins {
		s, detail := r.checkServe(in)
		worse(s)
		parts = append(parts, detail)
	}
	return []Check{{"proxy", status, strings.Join(parts, "; ")}}
}

var rank = map[string]int{StatusOK: 0, StatusWarn: 1, StatusError: 2}

// checkServe checks one serve record.
func (r *doctorRun) checkServe(in home.Info) (string, string) {
	if !r.c.d.Alive(in.PID) {
		return StatusWarn, fmt.Sprintf("the record of pid %d is stale: it is not running; \"rotor fix\" removes it", in.PID)
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.c.d.ProxyTimeout)
	defer cancel()
	status, err := r.c.reachProxy(ctx, in)
	switch {
	case err != nil:
		return StatusError, fmt.Sprintf("pid %d runs but %s does not answer (%v); restart \"rotor serve\"", in.PID, in.URL, err)
	case status == http.StatusUnauthorized:
		return StatusError, fmt.Sprintf("%s refused the client key of pid %d's record (401): another program may hold the port; restart \"rotor serve\"", in.URL, in.PID)
	case status == http.StatusNotFound:
		// A serve from before /healthz: it took the key, so it answers.
		return StatusOK, fmt.Sprintf("pid %d answers at %s (an older rotor serve: restart it for GET /healthz)", in.PID, in.URL)
	case status/100 != 2:
		return StatusWarn, fmt.Sprintf("pid %d answers at %s, but GET /v1/healthz said %d", in.PID, in.URL, status)
	}
	return StatusOK, fmt.Sprintf("pid %d answers at %s", in.PID, in.URL)
}

// reachProxy asks a running proxy's own health endpoint, with its client
// key: it answers without going upstream, so the check spends no account
// and leaves no trace in "rotor report".
// When the URL cannot even be parsed into a request, a TCP connect to its
// host tells at least whether something listens there.
func (c *Checkup) reachProxy(ctx context.Context, in home.Info) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(in.URL, "/")+"/healthz", nil)
	if err != nil {
		u, perr := url.Parse(in.URL)
		if perr != nil || u.Host == "" {
			return 0, fmt.Errorf("proxy.json has no usable url")
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", u.Host)
		if err != nil {
			return 0, err
		}
		conn.Close()
		return http.StatusOK, nil
	}
	req.Header.Set("Authorization", "Bearer "+in.ClientKey)
	resp, err := c.d.HTTP.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is already in the detail
		}
		return 0, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode, nil
}
