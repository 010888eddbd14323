package rotation

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/home"
)

// Failover timings of docs/selection.md.
const (
	DefaultRateLimit     = 60 * time.Second
	MaxRateLimit         = 7 * 24 * time.Hour
	AuthFailureCooldown  = 30 * time.Second
	InvalidatedCooldown  = 5 * time.Minute
	ServerErrorCooldown  = 4 * time.Second
	NetworkErrorCooldown = 6 * time.Second
	CircuitWindow        = 60 * time.Second
	CircuitFailures      = 3
	CircuitOpen          = 30 * time.Second
)

type stateFile struct {
	Version  int                      `json:"version"`
	Accounts map[string]*AccountState `json:"accounts"`
	// Endpoints are the upstream endpoints that failed to connect lately
	// (docs/selection.md), by scheme://host:port.
	Endpoints map[string]Endpoint `json:"endpoints,omitempty"`
}

// entry is one account's state in this process: the shared part, plus what
// only this process needs (its token bucket and when it last picked it).
type entry struct {
	st       AccountState
	tokens   float64
	tokensAt int64 // unix ns of the last refill
	picked   int64 // unix ns of this process's last pick

	// Derived from st by derive() whenever st changes, so the selection
	// loop compares integers instead of walking times and windows.
	blocked    int64 // unix ns before which the account cannot serve any request
	limited    int64 // unix ns before which the main family's usage limit holds
	healthBase int   // health at healthAt
	healthAt   int64 // unix ns; 0 = never judged (full health)
	lastUsed   int64 // unix ns
	quotaLeft  float64
	quotaDefer bool
	quotaUntil int64 // unix ns when the quota figures go stale (a window resets); 0 = never
	credits    bool  // the account holds credits (docs/selection.md)
	full       int64 // unix ns until which a main window is full; 0 = none
	// fams is the view of each family other than the main one, nil when
	// the account has none (the common case: no lookup per pick).
	fams []famView
}

// famView is what selection needs of one family other than the main one.
type famView struct {
	id, model string
	limited   int64 // its usage limit, unix ns
	full      int64 // unix ns until which one of its windows is full
	left      float64
	deferred  bool
}

// meter is what meters model on e's account: its usage limit, the share
// left and deferral, and until when a window is full (the main family's
// when no family names model). It returns the family's id.
func (e *entry) meter(model string) (id string, limited, full int64, left float64, deferred bool) {
	if model != "" {
		for i := range e.fams {
			if f := &e.fams[i]; strings.EqualFold(f.model, model) {
				return f.id, f.limited, f.full, f.left, f.deferred
			}
		}
	}
	return MainFamily, e.limited, e.full, e.quotaLeft, e.quotaDefer
}

// derive recomputes the entry's integer view of st at now (the runtime's
// clock, never the wall clock: tests and the selector use the same one).
// Callers hold r.mu.
func (e *entry) derive(now time.Time) {
	e.blocked = max(nanos(e.st.CircuitOpenUntil), nanos(e.st.CooldownUntil))
	e.limited = nanos(e.st.RateLimitedUntil)
	e.healthBase, e.healthAt = e.st.Health, nanos(e.st.HealthAt)
	e.lastUsed = nanos(e.st.LastUsed)
	e.quotaLeft, e.quotaDefer, e.quotaUntil = 1, false, 0
	e.credits, e.full, e.fams = false, 0, nil
	q := e.st.Quota
	if q == nil {
		return
	}
	e.quotaLeft, e.quotaDefer = e.st.headroom(now)
	stale := func(w *Window) {
		if w != nil && w.ResetsAt.After(now) && (e.quotaUntil == 0 || nanos(w.ResetsAt) < e.quotaUntil) {
			e.quotaUntil = nanos(w.ResetsAt)
		}
	}
	stale(q.Primary)
	stale(q.Secondary)
	e.credits = q.Credits.Holds()
	e.full = nanos(q.FullUntil(MainFamily, now))
	if len(q.Families) == 0 {
		return
	}
	e.fams = make([]famView, 0, len(q.Families))
	for i := range q.Families {
		f := &q.Families[i]
		l1, d1 := f.Primary.left(now)
		l2, d2 := f.Secondary.left(now)
		stale(f.Primary)
		stale(f.Secondary)
		e.fams = append(e.fams, famView{id: f.ID, model: f.LimitName, limited: nanos(e.st.FamilyLimits[f.ID]),
			full: nanos(q.FullUntil(f.ID, now)), left: min(l1, l2), deferred: d1 || d2})
	}
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// Runtime is the shared runtime state of every account, kept in memory and
// synchronised with state.json by Sync. All methods are safe for concurrent
// use; none touches the disk except Load and Sync.
type Runtime struct {
	clock clock.Clock
	path  string
	lock  string

	mu    sync.Mutex
	m     map[string]*entry
	eps   map[string]Endpoint
	dirty bool
	stamp home.Stamp

	down atomic.Pointer[map[string]Endpoint] // the records of eps with a non-zero Until; nil when none
}

// NewRuntime returns the runtime state kept in dir/state.json. It reads
// nothing until Sync.
func NewRuntime(dir string, clock clock.Clock) *Runtime {
	return &Runtime{
		clock: clock,
		path:  filepath.Join(dir, home.StateFile),
		lock:  filepath.Join(dir, home.StateLock),
		m:     make(map[string]*entry),
		eps:   make(map[string]Endpoint),
	}
}

// Path is the path of state.json.
func (r *Runtime) Path() string { return r.path }

// get returns the entry for id, creating it. Callers hold r.mu.
func (r *Runtime) get(id string) *entry {
	e := r.m[id]
	if e == nil {
		now := r.clock.Now()
		e = &entry{tokens: bucketSize, tokensAt: now.UnixNano()}
		e.derive(now) // an account nothing is known of has all its quota left, not none
		r.m[id] = e
	}
	return e
}

// Snapshot returns a copy of the state of id.
func (r *Runtime) Snapshot(id string) AccountState {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.m[id]; e != nil {
		return e.st.Clone()
	}
	return AccountState{}
}

// update applies fn to the state of id and marks the state for the next Sync.
func (r *Runtime) update(id string, fn func(s *AccountState, now time.Time)) {
	now := r.clock.Now()
	r.mu.Lock()
	e := r.get(id)
	fn(&e.st, now)
	e.derive(now)
	r.dirty = true
	r.mu.Unlock()
}

// RateLimited marks id rate-limited until until (clamped to 7 days; a zero or
// past until means the 60 s default), for its main family.
func (r *Runtime) RateLimited(id string, until time.Time) { r.Limit(id, Limit{Until: until}) }

// Limit records the usage limit l of id (docs/selection.md): for the family that
// metered the request only, until l.Until (clamped to 7 days; a zero or
// past one means the 60 s default). A workspace limit waits 7 days, or
// until a usage read lifts it (LiftRateLimit).
func (r *Runtime) Limit(id string, l Limit) {
	r.update(id, func(s *AccountState, now time.Time) {
		until := l.Until
		if WorkspaceLimit(l.Reason) {
			until = now.Add(MaxRateLimit)
		}
		if !until.After(now) {
			until = now.Add(DefaultRateLimit)
		}
		if until.Sub(now) > MaxRateLimit {
			until = now.Add(MaxRateLimit)
		}
		s.LastUsed, s.LastStatus = now, 429
		if fam := NormalizeFamily(l.Family); fam != MainFamily {
			s.limitFamily(fam, until)
			return
		}
		if until.After(s.RateLimitedUntil) {
			s.RateLimitedUntil, s.LimitReason = until, l.Reason
		}
	})
}

// Cooldown puts id in a cooldown for d with reason (one of the Cooldown*
// constants) and lowers its health.
func (r *Runtime) Cooldown(id, reason string, d time.Duration) {
	r.update(id, func(s *AccountState, now time.Time) {
		if until := now.Add(d); until.After(s.CooldownUntil) {
			s.CooldownUntil, s.CooldownReason = until, reason
		}
		s.adjustHealth(now, -healthOnFail)
	})
}

// Failure records a server, network or stream failure of id: a cooldown for
// d with reason, and, at the third failure within a minute, an open circuit
// for 30 s.
func (r *Runtime) Failure(id, reason string, d time.Duration) {
	r.update(id, func(s *AccountState, now time.Time) {
		if until := now.Add(d); until.After(s.CooldownUntil) {
			s.CooldownUntil, s.CooldownReason = until, reason
		}
		s.adjustHealth(now, -healthOnFail)
		s.Failures = mergeTimes(s.Failures, []time.Time{now})
		recent := 0
		for _, t := range s.Failures {
			if now.Sub(t) <= CircuitWindow {
				recent++
			}
		}
		if recent >= CircuitFailures {
			s.CircuitOpenUntil = later(s.CircuitOpenUntil, now.Add(CircuitOpen))
			s.Failures = nil // the open circuit is the penalty; start counting afresh
		}
	})
}

// Success records an answer from id with status, raising its health.
func (r *Runtime) Success(id string, status int) {
	r.update(id, func(s *AccountState, now time.Time) {
		s.adjustHealth(now, healthOnOK)
		s.LastUsed, s.LastStatus = now, status
	})
}

// Used records that id answered with status without judging the account
// (a client error, for example).
func (r *Runtime) Used(id string, status int) {
	r.update(id, func(s *AccountState, now time.Time) {
		s.LastUsed, s.LastStatus = now, status
	})
}

// SetQuota records a quota snapshot for id. The reset credits of the
// last snapshot that told them are kept when q does not: an answer's
// headers never tell them. The windows' history is learned here, from
// the snapshot q follows (q's own History is ignored).
func (r *Runtime) SetQuota(id string, q Quota) {
	r.update(id, func(s *AccountState, now time.Time) {
		if q.ObservedAt.IsZero() {
			q.ObservedAt = now
		}
		q.Primary, q.Secondary = keepable(q.Primary, now), keepable(q.Secondary, now)
		q.Families, q.Credits = keepableFamilies(q.Families, now), keepableCredits(q.Credits)
		if q.ResetCredits != nil && (*q.ResetCredits < 0 || *q.ResetCredits > maxResetCredits) {
			n := min(max(*q.ResetCredits, 0), maxResetCredits)
			q.ResetCredits = &n
		}
		if s.Quota == nil || !q.ObservedAt.Before(s.Quota.ObservedAt) {
			q = mergeQuota(s.Quota, q)
			q.Whole = false
			q.History = learnHistory(s.Quota, &q)
			s.Quota = &q
		}
	})
}

// maxQuotaReset is the furthest from now a window's reset is believed,
// far beyond the longest window rotor knows (a week).
const maxQuotaReset = 400 * 24 * time.Hour

// maxResetCredits is the most banked reset credits rotor believes an
// account holds; a backend that says more is read as saying this many.
const maxResetCredits = 1000

// keepable is w as far as it can be kept and weighed: nil when its used
// share is not a number, the share within 0-100 (more is a full window),
// its reset unknown when that is further than
// maxQuotaReset from now, and its length unknown when it is longer.
// Upstreams are trusted, but one malformed x-codex-* header ("NaN", a
// reset thousands of years away) must not stop state.json from being
// written: encoding/json refuses both, so every process on the home
// would miss every account's news for as long as that quota was the
// newest.
func keepable(w *Window, now time.Time) *Window {
	if w == nil || math.IsNaN(w.UsedPercent) || math.IsInf(w.UsedPercent, 0) {
		return nil
	}
	d := w.ResetsAt.Sub(now)
	farReset := !w.ResetsAt.IsZero() && (d > maxQuotaReset || d < -maxQuotaReset)
	badLength := w.WindowMinutes < 0 || w.WindowMinutes > int(maxQuotaReset/time.Minute)
	badShare := w.UsedPercent < 0 || w.UsedPercent > 100
	if !farReset && !badLength && !badShare {
		return w
	}
	c := *w
	c.UsedPercent = min(max(c.UsedPercent, 0), 100)
	if farReset {
		c.ResetsAt = time.Time{}
	}
	if badLength {
		c.WindowMinutes = 0 // a length that long overflows a Duration
	}
	return &c
}

// OnCredits reports whether id spends credits for family at now (the
// caller's reading of the clock, which it records the request's end by):
// a window of it is full and not yet reset, and the account holds
// credits (docs/selection.md). It reads the account's derived view:
// every request's end asks.
func (r *Runtime) OnCredits(id, family string, now time.Time) bool {
	nowNS := now.UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.m[id]
	if e == nil || !e.credits {
		return false
	}
	full := e.full
	if family != "" && family != MainFamily {
		full = 0
		for i := range e.fams {
			if e.fams[i].id == family {
				full = e.fams[i].full
			}
		}
	}
	return full > nowNS
}

// Metered reports whether id's backend told credits or limit families of
// its own (docs/selection.md).
func (r *Runtime) Metered(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.m[id]
	return e != nil && e.st.Quota != nil && (e.st.Quota.Credits != nil || len(e.st.Quota.Families) > 0)
}

// UsageRead records that id's usage was read from its backend at now.
func (r *Runtime) UsageRead(id string) {
	r.update(id, func(s *AccountState, now time.Time) { s.UsageReadAt = now })
}

// LiftRateLimit ends id's usage limit now: its backend says it can serve
// again before the reset rotor was told (docs/selection.md).
func (r *Runtime) LiftRateLimit(id string) { r.lift(id, true, nil) }

// LiftFamilyLimits ends the usage limits of id's families (by id) now:
// its backend says they can serve again (docs/selection.md).
func (r *Runtime) LiftFamilyLimits(id string, families ...string) { r.lift(id, false, families) }

// lift ends id's main usage limit (main) and those of families. Like
// Clear it moves the epoch, so the lift reaches every process; the
// account's other deadlines stay as this process knows them.
func (r *Runtime) lift(id string, main bool, families []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.get(id)
	if main {
		e.st.RateLimitedUntil, e.st.LimitReason = time.Time{}, ""
	}
	if len(families) > 0 {
		e.st.FamilyLimits = maps.Clone(e.st.FamilyLimits)
		for _, f := range families {
			delete(e.st.FamilyLimits, f)
		}
	}
	e.st.Epoch++
	e.derive(r.clock.Now())
	r.dirty = true
}

// TokensChanged records that this process changed the secrets of id.
func (r *Runtime) TokensChanged(id string) {
	r.update(id, func(s *AccountState, now time.Time) { s.TokensAt = now })
}

// TokensAt returns when any process last changed the secrets of id.
func (r *Runtime) TokensAt(id string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.m[id]; e != nil {
		return e.st.TokensAt
	}
	return time.Time{}
}

// Clear forgets the cooldown, rate limit and open circuit of id (used by
// repairs and by a successful re-verification). The clear reaches the other
// processes through Sync: it moves the account's epoch, which outranks the
// deadlines they still hold.
func (r *Runtime) Clear(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.get(id)
	e.st.RateLimitedUntil, e.st.CooldownUntil, e.st.CooldownReason = time.Time{}, time.Time{}, ""
	e.st.CircuitOpenUntil, e.st.Failures = time.Time{}, nil
	e.st.LimitReason, e.st.FamilyLimits = "", nil
	e.st.Epoch++
	e.derive(r.clock.Now())
	r.dirty = true
}

// Sync exchanges news with state.json: when this process has changes it
// merges them with the file under the state lock and writes the result;
// when only the file changed it merges the file in. keep, when not nil,
// names the account ids that still exist; the others are dropped so the
// state never grows without bound.
func (r *Runtime) Sync(keep func(id string) bool) error {
	r.mu.Lock()
	dirty := r.dirty
	r.mu.Unlock()
	stamp := home.StatStamp(r.path)
	if !dirty {
		r.mu.Lock()
		same := stamp == r.stamp
		r.mu.Unlock()
		if same {
			return nil
		}
		disk, err := readState(r.path)
		if errors.Is(err, ErrDamagedState) {
			// Advisory state: read as empty, and said once per change of
			// the file, not at every sync.
			r.mu.Lock()
			r.stamp = stamp
			r.mu.Unlock()
			return err
		}
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.mergeLocked(disk, keep)
		r.stamp = stamp
		r.mu.Unlock()
		return nil
	}
	l, err := home.LockFile(r.lock, false, 5*time.Second)
	if err != nil {
		return err
	}
	defer l.Unlock()
	disk, err := readState(r.path)
	if err != nil {
		// An unreadable state file holds nothing worth more than fresh
		// news: state is a cache of what upstreams said, unlike the store.
		disk = &stateFile{}
	}
	r.mu.Lock()
	r.mergeLocked(disk, keep)
	out := stateFile{Version: 1, Accounts: make(map[string]*AccountState, len(r.m))}
	for id, e := range r.m {
		st := e.st.Clone()
		out.Accounts[id] = &st
	}
	r.pruneEndpointsLocked(r.clock.Now())
	if len(r.eps) > 0 {
		out.Endpoints = maps.Clone(r.eps)
	}
	r.dirty = false
	r.mu.Unlock()
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	if err := home.WriteFile(r.path, append(data, '\n')); err != nil {
		r.mu.Lock()
		r.dirty = true
		r.mu.Unlock()
		return fmt.Errorf("cannot write %s: %w", r.path, err)
	}
	r.mu.Lock()
	r.stamp = home.StatStamp(r.path)
	r.mu.Unlock()
	return nil
}

func (r *Runtime) mergeLocked(disk *stateFile, keep func(string) bool) {
	now := r.clock.Now()
	r.mergeEndpointsLocked(disk.Endpoints)
	for id, st := range disk.Accounts {
		if keep != nil && !keep(id) {
			continue
		}
		e := r.get(id)
		e.st.Merge(st)
		e.derive(now)
	}
	if keep != nil {
		for id := range r.m {
			if !keep(id) {
				delete(r.m, id)
				r.dirty = true
			}
		}
	}
}

func readState(path string) (*stateFile, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &stateFile{}, nil
	}
	if err != nil {
		return nil, err
	}
	var f stateFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s is damaged (%v): %w", path, err, ErrDamagedState)
	}
	return &f, nil
}

// ErrDamagedState is the error of a state.json that does not parse. The
// state is advisory (docs/files.md): callers read it as empty, say so once,
// and the next write replaces it.
var ErrDamagedState = errors.New("runtime state unreadable; read as empty")
