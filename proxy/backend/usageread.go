package backend

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/rotation"
)

// Observed quota (docs/selection.md). rotor learns an account's quota from the
// answers it relays, which says nothing of an idle account, or of one
// whose limit the backend lifted early. So a serve reads every enabled
// ChatGPT account's usage from its backend (GET {base}/wham/usage, which
// costs no quota): at start, then every UsageEvery (jittered per account),
// and right after a reset rotor knew of passes. The serves on one home take
// turns (one pass at a time, under a lock) and share what they read
// through state.json, as they share everything else. A read that fails
// backs off and is logged once; it never marks an account. The same pass
// keeps idle logins alive: tokens last refreshed KeepAliveAge ago or more
// are refreshed.

// Timings of the reader.
const (
	UsageEvery     = 5 * time.Minute  // how often an account's usage is read
	UsageJitter    = time.Minute      // spreading the accounts' reads
	usageTick      = 10 * time.Second // how often a serve looks for due accounts
	usageBackoff   = time.Minute      // after a failed read, doubling
	usageBackoffTo = 30 * time.Minute
	KeepAliveAge   = 7 * 24 * time.Hour // an idle login's age when it is refreshed
	UsageReadWait  = 30 * time.Second   // one read's bound
)

// ReaderDeps are what a Reader reads, and what it asks of the request
// path, which holds the accounts' credentials and their ways out.
type ReaderDeps struct {
	// Lock is the home's lock file the serves take turns on.
	Lock string
	// Selector holds the pool and its runtime state, where what is read
	// is recorded.
	Selector *rotation.Selector
	Clock    clock.Clock
	Log      zerolog.Logger
	// SignsIn reports whether a signs in to the ChatGPT backend: only
	// such an account has a usage to read and a login to keep alive.
	SignsIn func(a *accounts.Account) bool
	// Get asks a's backend for its usage (GET {base}/wham/usage, a 401
	// answered with a refresh): the body and the status.
	Get func(ctx context.Context, a *accounts.Account) (body []byte, status int, err error)
	// Renew refreshes a's tokens, as a request does, when it holds a
	// refresh token; it reports whether it did. tokensAt is the last
	// refresh rotor knows of. Nil when nothing renews tokens.
	Renew func(ctx context.Context, a *accounts.Account, tokensAt time.Time) bool
}

// Reader is the usage reader of one serve: what it reads, and its
// backoff after failed reads.
type Reader struct {
	deps    ReaderDeps
	backoff map[string]time.Time // account id → no read before; bounded by the pool
	wait    map[string]time.Duration
}

// NewReader is a reader of the usage of d's pool.
func NewReader(d ReaderDeps) *Reader {
	return &Reader{deps: d, backoff: map[string]time.Time{}, wait: map[string]time.Duration{}}
}

// Run runs the reader until ctx ends: a pass at once, then one every
// usageTick, each under the home's lock file (no pass while another
// serve holds it). sync exchanges state.json with the other serves, before
// a pass and after it.
func (ur *Reader) Run(ctx context.Context, sync func()) {
	tick, stop := ur.deps.Clock.NewTicker(usageTick)
	defer stop()
	for {
		ur.Pass(ctx, sync)
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
	}
}

// Pass reads every due account once, if this serve gets the lock.
func (ur *Reader) Pass(ctx context.Context, sync func()) {
	l, err := home.LockFile(ur.deps.Lock, false, 0)
	if err != nil {
		return // another serve's turn
	}
	defer l.Unlock()
	if sync != nil {
		sync() // what the other serves read meanwhile
		defer sync()
	}
	now := ur.deps.Clock.Now()
	for _, a := range ur.deps.Selector.Pool().Accounts {
		if ctx.Err() != nil {
			return
		}
		if _, flagged := a.Flagged(); !ur.deps.SignsIn(&a) || !a.Enabled || flagged {
			continue
		}
		ur.passOne(ctx, &a, now)
	}
}

// passOne keeps a's login alive and reads its usage if due. The reader
// runs on a goroutine of its own, outside any request's recover: a bug
// met here (a panic) would end the serve. It is logged once with the
// account, and counts as a failed read, which backs off and marks
// nothing; the other accounts are read all the same.
func (ur *Reader) passOne(ctx context.Context, a *accounts.Account, now time.Time) {
	defer func() {
		if v := recover(); v != nil {
			ur.deps.Log.Error().Str("account_id", a.ID).Str("panic", fmt.Sprint(v)).Bytes("stack", debug.Stack()).
				Msg("usage reader panic")
			ur.failed(a.ID, now)
		}
	}()
	st := ur.deps.Selector.Runtime().Snapshot(a.ID)
	ur.keepAlive(ctx, a, &st, now)
	if usageDue(a.ID, &st, now) && !now.Before(ur.backoff[a.ID]) {
		ur.read(ctx, a, now)
	}
}

// failed backs the reads of account id off after a failure at now,
// doubling the wait each time; it reports whether this is the first
// failure in a row, the one that is logged.
func (ur *Reader) failed(id string, now time.Time) (first bool) {
	first = ur.wait[id] == 0
	wait := min(max(2*ur.wait[id], usageBackoff), usageBackoffTo)
	ur.wait[id], ur.backoff[id] = wait, now.Add(wait)
	return first
}

// usageDue reports whether a's usage is to be read at now: never read,
// read UsageEvery (and a's jitter) ago, or a reset rotor knew of has
// passed since.
func usageDue(id string, st *rotation.AccountState, now time.Time) bool {
	last := st.UsageReadAt
	if last.IsZero() || now.Sub(last) >= UsageEvery+jitter(id) {
		return true
	}
	passed := func(t time.Time) bool { return !t.IsZero() && t.After(last) && !t.After(now) }
	if passed(st.RateLimitedUntil) {
		return true
	}
	for _, until := range st.FamilyLimits {
		if passed(until) {
			return true
		}
	}
	if q := st.Quota; q != nil {
		for _, w := range []*rotation.Window{q.Primary, q.Secondary} {
			if w != nil && passed(w.ResetsAt) {
				return true
			}
		}
		for _, f := range q.Families {
			for _, w := range []*rotation.Window{f.Primary, f.Secondary} {
				if w != nil && passed(w.ResetsAt) {
					return true
				}
			}
		}
	}
	return false
}

// jitter spreads the accounts' reads over UsageJitter, the same for an
// account in every serve.
func jitter(id string) time.Duration {
	h := fnv.New32a()
	h.Write([]byte(id))
	return time.Duration(h.Sum32()%uint32(UsageJitter/time.Second)) * time.Second
}

// read reads a's usage and records it; a 401 refreshes the token and
// reads once more. A failure backs off, is logged once, and marks nothing.
func (ur *Reader) read(ctx context.Context, a *accounts.Account, now time.Time) {
	body, status, err := ur.deps.Get(ctx, a)
	if err != nil || status != fasthttp.StatusOK {
		if ur.failed(a.ID, now) {
			ur.deps.Log.Warn().Str("account_id", a.ID).Int("status", status).AnErr("error", err).
				Msg("cannot read the account's usage; trying again later (the account is not blamed)")
		}
		return
	}
	delete(ur.wait, a.ID)
	delete(ur.backoff, a.ID)
	rt := ur.deps.Selector.Runtime()
	rt.UsageRead(a.ID)
	q, allowed, lifted := usageQuota(body, now)
	if q == nil {
		return
	}
	rt.SetQuota(a.ID, *q)
	st := rt.Snapshot(a.ID)
	if allowed && st.RateLimitedUntil.After(now) {
		rt.LiftRateLimit(a.ID)
		ur.deps.Log.Info().Str("account_id", a.ID).Time("was_until", st.RateLimitedUntil).Str("reason", st.LimitReason).
			Msg("the account's usage limit was lifted early")
	}
	lifted = slices.DeleteFunc(lifted, func(id string) bool { return !st.FamilyLimits[id].After(now) })
	if len(lifted) > 0 {
		rt.LiftFamilyLimits(a.ID, lifted...)
		ur.deps.Log.Info().Str("account_id", a.ID).Strs("limits", lifted).Msg("the account's model limits were lifted early")
	}
}

// UsageRequest makes req the usage read of the account whose access
// token and ChatGPT account id are given, on its ChatGPT base: GET
// {base}/wham/usage, as Codex sends it.
func UsageRequest(req *fasthttp.Request, base, token, chatgptAccountID string) {
	req.SetRequestURI(strings.TrimRight(base, "/") + "/wham/usage")
	req.Header.SetMethod(fasthttp.MethodGet)
	authorize(&req.Header, token, chatgptAccountID)
	req.Header.Set("originator", "codex_cli_rs")
}

// usageQuota reads the backend's usage payload as a quota at now, all of
// it (docs/selection.md): the main windows (none for a workspace, whose
// rate_limit is null), every additional family, credits, reset credits.
// allowed says whether the backend would serve the main family now, and
// lifted names the families it would serve again.
func usageQuota(body []byte, now time.Time) (q *rotation.Quota, allowed bool, lifted []string) {
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return nil, false, nil
	}
	rl := root.Get("rate_limit")
	q = &rotation.Quota{PlanType: root.Get("plan_type").Str, ObservedAt: now, Whole: true,
		Credits: eventCredits(root.Get("credits"))}
	reached := root.Get("rate_limit_reached_type.type").Str
	switch {
	case rl.IsObject():
		q.Primary, q.Secondary = usageWindow(now, rl.Get("primary_window")), usageWindow(now, rl.Get("secondary_window"))
		allowed = rl.Get("allowed").Bool() && !rl.Get("limit_reached").Bool()
	case rl.Exists() && rl.Type == gjson.Null:
		q.Workspace = true // no windows: the workspace budgets instead
		allowed = true
	default:
		return nil, false, nil
	}
	if reached != "" && rotation.WorkspaceLimit(reached) {
		allowed = false
	}
	root.Get("additional_rate_limits").ForEach(func(_, v gjson.Result) bool {
		id := cmp.Or(v.Get("metered_feature").Str, v.Get("limit_name").Str)
		frl := v.Get("rate_limit")
		if id == "" || !frl.IsObject() || len(q.Families) >= maxHeaderFamilies {
			return true
		}
		f := rotation.Family{ID: rotation.NormalizeFamily(id), LimitName: v.Get("limit_name").Str,
			Primary: usageWindow(now, frl.Get("primary_window")), Secondary: usageWindow(now, frl.Get("secondary_window"))}
		q.Families = append(q.Families, f)
		if frl.Get("allowed").Bool() && !frl.Get("limit_reached").Bool() {
			lifted = append(lifted, f.ID)
		}
		return true
	})
	if c := root.Get("rate_limit_reset_credits.available_count"); c.Exists() {
		n := int(min(max(c.Float(), 0), math.MaxInt32)) // clamped again where quota enters
		q.ResetCredits = &n
	}
	return q, allowed, lifted
}

// usageWindow reads one window of a usage read; nil when w is not one.
func usageWindow(now time.Time, w gjson.Result) *rotation.Window {
	if !w.IsObject() {
		return nil
	}
	out := &rotation.Window{UsedPercent: w.Get("used_percent").Float(), WindowMinutes: int(w.Get("limit_window_seconds").Int() / 60)}
	if at := w.Get("reset_at").Int(); at > 0 {
		out.ResetsAt = time.Unix(at, 0)
	} else if after := w.Get("reset_after_seconds").Int(); after > 0 {
		out.ResetsAt = afterUnits(now, float64(after), time.Second)
	}
	return out
}

// keepAlive refreshes a's tokens when rotor last refreshed them, or, if
// it never did, added the account KeepAliveAge ago or more, so a login
// left idle does not lapse (docs/selection.md). The refresh is the one requests use: single-flight across
// processes, written back to a linked Codex auth.json.
func (ur *Reader) keepAlive(ctx context.Context, a *accounts.Account, st *rotation.AccountState, now time.Time) {
	if ur.deps.Renew == nil {
		return
	}
	// The last refresh rotor knows of, else when the account joined.
	if last := later(st.TokensAt, a.AddedAt); last.IsZero() || now.Sub(last) < KeepAliveAge {
		return
	}
	if ur.deps.Renew(ctx, a, st.TokensAt) {
		ur.deps.Log.Info().Str("account_id", a.ID).Msg("refreshed an idle login to keep it alive")
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
