package rotation

import (
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
)

// Skip reasons that do not come from runtime state (docs/selection.md).
const (
	SkipDisabled         = "disabled"
	SkipFlagged          = "flagged"
	SkipRateLimited      = "rate-limited"
	SkipCircuitOpen      = "circuit-open"
	SkipMissing          = "missing"
	SkipAlreadyAttempted = "already-attempted"
	// SkipCreditsHeldBack: the account would spend credits, and the
	// policy is never (docs/selection.md).
	SkipCreditsHeldBack = "credits-held-back"
)

// Pin sources.
const (
	PinProcess = "process"
	PinManual  = "manual"
)

// Why an account was picked.
const (
	WhyProcessPin = "process pin"
	WhyManualPin  = "manual pin"
	WhyAffinity   = "session affinity"
	WhyBestScore  = "best score"
	WhyDeferred   = "best score (every other account is deferred by quota)"
	WhyOnCredits  = "best score (no account has included quota left; spending credits)"
)

// Tiers of a usable account, best first: selection takes the best tier
// any account is in, and the best score within it.
const (
	tierRoom     = iota // included quota left
	tierDeferred        // 5% or less left (docs/accounts.md)
	tierCredits         // would spend credits, policy last-resort (docs/selection.md)
)

const (
	bucketSize   = 8.0
	bucketRefill = 0.5 // tokens a second
	idleHorizon  = 60 * time.Second
)

// view is an immutable picture of the pool, rebuilt when accounts.json
// changes, so a request never reads a file.
type view struct {
	pool    *accounts.Pool
	entries []*entry  // parallel to pool.Accounts
	offset  []float64 // this process's small per-account tie-breaker
	index   map[string]int
}

// indexOf returns the 1-based index of the account with id, or 0.
func (v *view) indexOf(id string) int { return v.index[id] }

// Selector picks the account for each request (docs/selection.md Selection). It is
// safe for concurrent use.
type Selector struct {
	rt       *Runtime
	clock    clock.Clock
	affinity *Affinity
	seed     uint64
	cur      atomic.Pointer[view]
	// ProcessPin, when set, is the account id this process is pinned to
	// (`serve --account`): used exclusively, never rotated.
	processPin atomic.Pointer[string]
	// endpointOf names the upstream endpoint an account is served from,
	// so Status can show the accounts behind an unreachable one.
	endpointOf atomic.Pointer[func(*accounts.Account) string]
	// credits is the credits policy (docs/selection.md); nil is the default.
	credits atomic.Pointer[CreditsPolicy]
}

// SetCredits sets when a request may go to an account on credits.
func (s *Selector) SetCredits(p CreditsPolicy) { s.credits.Store(&p) }

// Credits is the credits policy in force.
func (s *Selector) Credits() CreditsPolicy {
	if p := s.credits.Load(); p != nil {
		return *p
	}
	return CreditsLastResort
}

// NewSelector returns a selector over rt. seed spreads parallel proxies:
// each process should pass a different random value.
func NewSelector(rt *Runtime, clock clock.Clock, seed uint64) *Selector {
	s := &Selector{rt: rt, clock: clock, seed: seed, affinity: NewAffinity(clock, AffinityTTL, AffinityMax)}
	s.SetPool(&accounts.Pool{Version: 1})
	return s
}

// SetProcessPin pins this process to the account with id ("" clears).
func (s *Selector) SetProcessPin(id string) {
	if id == "" {
		s.processPin.Store(nil)
		return
	}
	s.processPin.Store(&id)
}

// SetEndpointOf tells the selector which upstream endpoint
// (scheme://host:port) serves an account; the account kinds' default
// bases live with the proxy, not here. Without it, Status shows no
// endpoint as unreachable.
func (s *Selector) SetEndpointOf(f func(*accounts.Account) string) { s.endpointOf.Store(&f) }

// SetPool installs a new version of the pool.
func (s *Selector) SetPool(p *accounts.Pool) {
	v := &view{pool: p, entries: make([]*entry, len(p.Accounts)), offset: make([]float64, len(p.Accounts)),
		index: make(map[string]int, len(p.Accounts))}
	s.rt.mu.Lock()
	for i := range p.Accounts {
		v.entries[i] = s.rt.get(p.Accounts[i].ID)
		v.index[p.Accounts[i].ID] = i + 1
	}
	s.rt.mu.Unlock()
	r := rand.New(rand.NewPCG(s.seed, 0x9e3779b97f4a7c15))
	for i := range v.offset {
		v.offset[i] = r.Float64()
	}
	s.affinity.SetGeneration(p.AffinityGeneration)
	s.cur.Store(v)
}

// Pool returns the pool the selector currently works with.
func (s *Selector) Pool() *accounts.Pool { return s.cur.Load().pool }

// Runtime returns the runtime state the selector reads.
func (s *Selector) Runtime() *Runtime { return s.rt }

// Request is what a pick depends on.
type Request struct {
	AffinityKey string
	// Model is the model the request asks for: a family of its own may
	// meter it (docs/selection.md). "" is metered by the main family.
	Model string
	// Attempted lists the accounts already tried for this request.
	Attempted []string
	// Skip, when set, keeps accounts out of this request: it returns the
	// skip reason to report for a, or "" to keep a. The proxy uses it for
	// accounts behind an unreachable upstream endpoint and for requests
	// that only one account kind can serve. It runs under the selector's
	// lock, once per account and pick, so it must be cheap and must not
	// call back into the selector.
	Skip func(a *accounts.Account) string
}

// skipped is req's own reason to leave a out, "" when it has none.
func (r *Request) skipped(a *accounts.Account) string {
	if r.Skip == nil {
		return ""
	}
	return r.Skip(a)
}

func (r *Request) attempted(id string) bool {
	for _, a := range r.Attempted {
		if a == id {
			return true
		}
	}
	return false
}

// Choice is a picked account.
type Choice struct {
	Index   int // 1-based
	Account accounts.Account
	Why     string
	// PinSource is "process" or "manual" when a pin chose the account.
	PinSource string
	// Moved: the request's affinity key was bound to another account,
	// which could not take it, so the conversation left its account (and
	// the prompt cache there).
	Moved bool
	// Family is the limit family that meters the request on the account.
	Family string
	// OnCredits: the account spends credits for the request (docs/selection.md).
	OnCredits bool
	// At is the selector's clock as Pick read it to choose: what follows
	// the pick at once (the account's secret, its expiry) may go by it
	// rather than read the clock again a few µs later.
	At time.Time
}

// Refusal explains why no account can serve.
type Refusal struct {
	// Pinned is set when a pin forbids rotating; PinSource and PinnedIndex
	// say which, PinReason why the pinned account cannot serve.
	Pinned      bool
	PinSource   string
	PinnedIndex int
	PinReason   string
	// SkipReasons maps each account's 1-based index to why it was skipped.
	SkipReasons map[int]string
	// AllRateLimited is true when every account that could ever serve is
	// waiting for a usage-limit reset.
	AllRateLimited bool
	// RetryAfter is the earliest time an account comes back, 0 if unknown.
	RetryAfter time.Duration
	// ResetAt is the instant of RetryAfter.
	ResetAt time.Time
	// SoonestQuota is the last quota snapshot of the account that comes
	// back at ResetAt, nil when none was seen: a client that reads the
	// x-codex-* headers can then show real numbers.
	SoonestQuota *Quota
	// Family is the limit family that meters the request on the account
	// that comes back at ResetAt; LimitReason the backend's reached type
	// of its usage limit ("" for an ordinary one).
	Family, LimitReason string
	// CreditsHeldBack: some account could have served on credits, which
	// the policy never keeps back (docs/selection.md).
	CreditsHeldBack bool
}

// judgement is whether an account can serve one request now.
type judgement struct {
	reason    string    // the skip reason, "" when it can serve
	until     time.Time // when the reason ends, zero when unknown or none
	tier      int
	family    string // the family that meters the request
	onCredits bool
	limitWhy  string // the backend's reached type of a usage limit
}

// judge says whether a can serve req at now, and in which tier. It reads
// the entry's derived view, freshened when a window has reset since.
// Callers hold rt.mu.
func (s *Selector) judge(a *accounts.Account, e *entry, req *Request, now time.Time) judgement {
	if !a.Enabled {
		return judgement{reason: SkipDisabled}
	}
	if _, ok := a.Flagged(); ok {
		return judgement{reason: SkipFlagged}
	}
	nowNS := now.UnixNano()
	e.fresh(now)
	fam, _, full, _, deferred := e.meter(req.Model)
	j := judgement{family: fam}
	if r, until := e.st.AvailabilityFor(fam, now); r != "" {
		j.reason, j.until = r, until
		if r == SkipRateLimited && fam == MainFamily {
			j.limitWhy = e.st.LimitReason
		}
		return j
	}
	j.onCredits = e.credits && full > nowNS
	j.tier = tierOf(deferred, j.onCredits, s.Credits())
	if j.tier < 0 {
		j.reason, j.until = SkipCreditsHeldBack, time.Unix(0, full)
	}
	return j
}

// tierOf is the tier of a usable account, -1 when the policy keeps it
// out: an account on credits is the last resort, never, or as good as
// one with quota left.
func tierOf(deferred, onCredits bool, policy CreditsPolicy) int {
	switch {
	case onCredits && policy == CreditsNever:
		return -1
	case onCredits && policy == CreditsSpend:
		return tierRoom
	case onCredits:
		return tierCredits
	case deferred:
		return tierDeferred
	}
	return tierRoom
}

// fresh derives e again when a window it was derived from has reset
// since, so the selection loop never weighs a spent window that is new
// again. Callers hold rt.mu.
func (e *entry) fresh(now time.Time) {
	if e.quotaUntil != 0 && now.UnixNano() >= e.quotaUntil {
		e.derive(now)
	}
}

// Pick chooses the account for req, or explains why none can serve.
func (s *Selector) Pick(req *Request) (Choice, *Refusal) {
	v := s.cur.Load()
	now := s.clock.Now()
	s.rt.mu.Lock()
	defer s.rt.mu.Unlock()

	if id, src, why, ok := s.pinOf(v); ok {
		return s.pickPinned(v, req, now, id, src, why, false)
	}
	moved := false
	bi, btier := s.best(v, req, now, nil)
	if req.AffinityKey != "" {
		if id, ok := s.affinity.getAt(req.AffinityKey, now); ok {
			if i := v.indexOf(id); i > 0 && !req.attempted(id) && req.skipped(&v.pool.Accounts[i-1]) == "" {
				// A conversation keeps its account, unless that would
				// spend credits while another account has quota left.
				if j := s.judge(&v.pool.Accounts[i-1], v.entries[i-1], req, now); j.reason == "" && (j.tier < tierCredits || btier >= tierCredits) {
					return s.take(v, i, now, WhyAffinity, "", j), nil
				}
			}
			moved = true
		}
	}
	if moved && bi > 0 {
		// A conversation forced off its account goes where the other
		// conversations will need the room least, so it is not moved
		// again soon (docs/PERFORMANCE.md). Counting the live bindings
		// costs only the requests that move, which are few, and only
		// while the table is small (Load is nil past maxLoadScan).
		if load := s.affinity.Load(req.AffinityKey); load != nil {
			bi, btier = s.best(v, req, now, load)
		}
	}
	if bi > 0 {
		why := WhyBestScore
		switch btier {
		case tierDeferred:
			why = WhyDeferred
		case tierCredits:
			why = WhyOnCredits
		}
		ch := s.take(v, bi, now, why, "", s.judge(&v.pool.Accounts[bi-1], v.entries[bi-1], req, now))
		ch.Moved = moved
		return ch, nil
	}
	return Choice{}, s.refuse(v, req, now)
}

// pickPinned picks the pinned account id or explains why it cannot serve;
// with dry it never records a pick.
func (s *Selector) pickPinned(v *view, req *Request, now time.Time, id, source, why string, dry bool) (Choice, *Refusal) {
	i := v.indexOf(id)
	reason := SkipMissing
	var j judgement
	if i > 0 {
		j = s.judge(&v.pool.Accounts[i-1], v.entries[i-1], req, now)
		reason = j.reason
		if reason == "" && req.attempted(id) {
			reason = SkipAlreadyAttempted
		}
		if reason == "" {
			reason = req.skipped(&v.pool.Accounts[i-1])
		}
		if reason == "" && !dry {
			return s.take(v, i, now, why, source, j), nil
		}
	}
	ref := s.refuse(v, req, now)
	ref.Pinned, ref.PinSource, ref.PinnedIndex, ref.PinReason = true, source, i, reason
	ref.RetryAfter, ref.ResetAt = 0, time.Time{}
	if !j.until.IsZero() {
		ref.ResetAt, ref.RetryAfter = j.until, j.until.Sub(now)
		ref.Family, ref.LimitReason = j.family, j.limitWhy
	}
	return Choice{}, ref
}

// take records the pick of the account at index i, judged j. Callers
// hold rt.mu.
func (s *Selector) take(v *view, i int, now time.Time, why, source string, j judgement) Choice {
	e := v.entries[i-1]
	refill(e, now)
	// The bucket may run into debt: under a burst faster than it refills,
	// each pick keeps lowering the account's score, so picks rotate instead
	// of piling onto whichever account wins the tie-breaker.
	e.tokens = max(e.tokens-1, -bucketSize)
	e.picked = now.UnixNano()
	return Choice{Index: i, Account: v.pool.Accounts[i-1], Why: why, PinSource: source, Family: j.family, OnCredits: j.onCredits, At: now}
}

func refill(e *entry, now time.Time) {
	if dt := float64(now.UnixNano()-e.tokensAt) / 1e9; dt > 0 {
		e.tokens = min(bucketSize, e.tokens+dt*bucketRefill)
		e.tokensAt = now.UnixNano()
	}
}

// score ranks a usable account: health, its token bucket, time since this
// process last picked it or anyone last used it, quota headroom and quota
// that would otherwise expire (expiring), plus a per-process offset small
// enough to break exact ties only (a 10 ms difference in idle time
// outweighs it, so bursts rotate). It reads the entry's derived integers
// where it can: it runs for every account on every request.
func score(e *entry, nowNS int64, head float64, offset float64, fam string) float64 {
	health := 1.0
	if e.healthAt != 0 {
		h := e.healthBase + int((nowNS-e.healthAt)/int64(time.Minute))*healthRecovery
		health = float64(min(max(h, 0), 100)) / 100
	}
	tokens := e.tokens
	if dt := float64(nowNS-e.tokensAt) / 1e9; dt > 0 {
		tokens = min(bucketSize, tokens+dt*bucketRefill)
	}
	idle := 1.0
	if last := max(e.lastUsed, e.picked); last != 0 {
		idle = min(float64(nowNS-last)/float64(idleHorizon), 1)
	}
	sc := 0.35*health + 0.15*tokens/bucketSize + 0.3*idle + 0.2*head + 1e-6*offset
	if q := e.st.Quota; q != nil {
		p, sw := q.windowsOf(fam)
		sc += expiringWeight * expiringOf(p, sw, nowNS)
	}
	return sc
}

// movedRoomWeight is the weight, for a conversation forced off its
// account, of the room an account would have for it: its quota headroom
// shared with the conversations already bound to it (itself counted).
// It outweighs spreading and expiring, so the moved conversation lands
// where it is least likely to be moved again.
const movedRoomWeight = 2.0

// expiringWeight is the weight of expiring in score, beside health's 0.35
// and idle time's 0.3.
const expiringWeight = 0.5

// roomKept is the share of the five-hour window expiring keeps for the
// conversations already running on an account: below it, the account's
// weekly quota no longer draws new ones (see expiring).
const roomKept = 0.25

// Spending what expires first (docs/selection.md). A quota window starts at its
// first use and throws away whatever is left of it when it resets, so of
// two accounts that could take a new conversation, the one whose window
// would otherwise lose quota soonest should take it: the other's quota
// keeps. expiring scores that from the windows of the last quota snapshot
// q (primary: five hours; secondary: the week), between -0.1 and 1; 0
// when nothing is known, so an account never seen is neither preferred
// nor avoided.
//
//   - Urgency, per window with more than 5% left (less is the deferral's
//     business, and too little to steer to): how far its room is ahead of
//     its time, need = room / (share of the window's time still to run).
//     At 1 the window would be used up exactly at its reset if spent at an
//     even pace; above it some of it would be lost at that pace, and the
//     sooner the reset, the higher need climbs. Urgency rises from 0 at
//     need 1 to 1 at need 3.
//   - The weekly window's urgency is held back only by the five-hour
//     window's room: it counts in full while more than half of the
//     five-hour window is left, and fades to nothing as the room falls to
//     roomKept, which the conversations already running there will need
//     (a new one sent to a full account would have to move, losing its
//     prompt cache). It is not held back by pace: an account whose weekly
//     quota expires on Tuesday has to spend it in the working hours before
//     then, so its five-hour windows should fill, not idle along at an
//     even pace and reset half used.
//   - The five-hour window's own urgency (room left late in the window)
//     counts in full only while both windows are on course, at their pace
//     so far, to end at most half used, fading to nothing at a projected
//     100%: steering more work to a window already filling fast would only
//     make it fill before its reset.
//   - An account on course to overrun a window scores up to 0.1 lower.
//
// The account's score is the larger of the two. It is one term of the
// score, weighed against health and spreading: a failing or just-picked
// account still loses to a healthy idle one. Pins and session affinity
// come before any score, so a running conversation keeps its account.
// cmd/rotor-sim measures the policy against simpler ones
// (docs/PERFORMANCE.md).
func expiring(q *Quota, nowNS int64) float64 {
	if q == nil {
		return 0
	}
	return expiringOf(q.Primary, q.Secondary, nowNS)
}

// expiringOf is expiring of one limit family's windows: p its five-hour
// window, sw its weekly one. A request is weighed by the windows of the
// family that meters it (docs/selection.md): a model metered on its own spends
// only its family's quota, so only that quota's expiry says where it
// should go.
func expiringOf(p, sw *Window, nowNS int64) float64 {
	var urgency, projected [2]float64 // five-hour, weekly
	room := [2]float64{1, 1}
	for i, w := range [2]*Window{p, sw} {
		if w == nil || w.WindowMinutes <= 0 || w.ResetsAt.IsZero() {
			continue // no length or no reset: nothing says when it expires
		}
		left := w.ResetsAt.UnixNano() - nowNS
		if left <= 0 {
			continue // already reset: a fresh window, as good as unknown
		}
		toRun := min(float64(left)/float64(time.Duration(w.WindowMinutes)*time.Minute), 1)
		used := min(max(w.UsedPercent/100, 0), 1)
		if room[i] = 1 - used; room[i] > 0.05 {
			need := room[i] / max(toRun, 1e-3)
			urgency[i] = min(max((need-1)/2, 0), 1)
		}
		// The pace counts from a fifth of the window on: the first minutes
		// of a window say little about how fast it fills.
		projected[i] = used / max(1-toRun, 0.2)
	}
	weekly := urgency[1] * min(max((room[0]-roomKept)/roomKept, 0), 1)
	fiveHour := urgency[0] * onCourse(projected[0]) * onCourse(projected[1])
	overrun := min(max(max(projected[0], projected[1])-1, 0), 1)
	return max(weekly, fiveHour) - 0.1*overrun
}

// onCourse is 1 for a window projected to end at most half used, fading
// to 0 at a projected 100%.
func onCourse(projected float64) float64 { return min(max((1-projected)/0.5, 0), 1) }

// refuse builds the explanation of an empty pick. Callers hold rt.mu.
func (s *Selector) refuse(v *view, req *Request, now time.Time) *Refusal {
	ref := &Refusal{SkipReasons: make(map[int]string, len(v.pool.Accounts))}
	live, limited := 0, 0
	for i := range v.pool.Accounts {
		a := &v.pool.Accounts[i]
		e := v.entries[i]
		j := s.judge(a, e, req, now)
		r := j.reason
		if r == "" && req.attempted(a.ID) {
			r = SkipAlreadyAttempted
		}
		if r == "" {
			r = req.skipped(a)
		}
		ref.SkipReasons[i+1] = r
		if r == SkipDisabled || r == SkipFlagged {
			continue
		}
		live++
		switch r {
		case SkipCreditsHeldBack:
			ref.CreditsHeldBack = true
			limited++
		case SkipRateLimited:
			limited++
		}
		if until := j.until; !until.IsZero() && (ref.ResetAt.IsZero() || until.Before(ref.ResetAt)) {
			ref.ResetAt, ref.SoonestQuota = until, nil
			ref.Family, ref.LimitReason = j.family, j.limitWhy
			if q := e.st.Quota; q != nil {
				cp := *q
				ref.SoonestQuota = &cp
			}
		}
	}
	ref.AllRateLimited = live > 0 && limited == live
	if !ref.ResetAt.IsZero() {
		ref.RetryAfter = ref.ResetAt.Sub(now)
	}
	return ref
}

// pinOf is the pin in force for v, first match wins: the process pin
// (serve --account), else the manual pin (rotor switch). ok is false when
// requests rotate. Pick, Explain, Next, Status and Forecast all read it
// here, so they cannot disagree about which pin counts.
func (s *Selector) pinOf(v *view) (id, source, why string, ok bool) {
	if pin := s.processPin.Load(); pin != nil {
		return *pin, PinProcess, WhyProcessPin, true
	}
	if v.pool.PinnedAccountID != nil {
		return *v.pool.PinnedAccountID, PinManual, WhyManualPin, true
	}
	return "", "", "", false
}

// Explain says why no account is left for req, without picking.
func (s *Selector) Explain(req *Request) *Refusal {
	v := s.cur.Load()
	now := s.clock.Now()
	s.rt.mu.Lock()
	defer s.rt.mu.Unlock()
	if id, src, why, ok := s.pinOf(v); ok {
		_, ref := s.pickPinned(v, req, now, id, src, why, true)
		return ref
	}
	return s.refuse(v, req, now)
}

// Bind remembers that the conversation with key is served by account id,
// so its next turns go to the same account (and its prompt cache).
func (s *Selector) Bind(key, id string) {
	if key != "" {
		s.affinity.Put(key, id)
	}
}

// Bound reports whether the conversation with key is bound to an
// account.
func (s *Selector) Bound(key string) bool {
	_, ok := s.affinity.Get(key)
	return ok
}

// Next says which account a request without affinity would get now, and
// why, without recording a pick; index 0 means none.
func (s *Selector) Next() (int, string) { return s.NextFor(&Request{}) }

// NextFor says which account Pick would give req now, req naming no
// conversation already bound (a new conversation), and why, without
// recording a pick; index 0 means none. It is the same judgement as
// Pick's, over the same state: in the process that picks, what it says is
// what the pick does.
func (s *Selector) NextFor(req *Request) (int, string) {
	v := s.cur.Load()
	now := s.clock.Now()
	s.rt.mu.Lock()
	defer s.rt.mu.Unlock()
	if id, src, why, ok := s.pinOf(v); ok {
		i := v.indexOf(id)
		if src == PinProcess || i > 0 && s.judge(&v.pool.Accounts[i-1], v.entries[i-1], req, now).reason == "" && req.skipped(&v.pool.Accounts[i-1]) == "" {
			return i, why
		}
		return 0, "the pinned account cannot serve now; the proxy answers 503 until it can (or run \"rotor unpin\")"
	}
	i, tier := s.best(v, req, now, nil)
	switch {
	case i == 0:
		return 0, "no account can serve now"
	case tier == tierDeferred:
		return i, WhyDeferred
	case tier == tierCredits:
		return i, WhyOnCredits
	}
	return i, WhyBestScore
}

// best returns the 1-based index of the best-scoring usable account not yet
// attempted, from the best tier any is in (quota left, then deferred,
// then on credits), and that tier; 0 if none. load, when not nil, is the
// live conversations bound to each account, for a conversation that had
// to move (see movedRoomWeight). It runs for every request:
// it reads the entries' derived integers, and judges no account in full.
// Callers hold rt.mu.
func (s *Selector) best(v *view, req *Request, now time.Time, load map[string]int) (int, int) {
	bi, bt := 0, 0
	var bs float64
	nowNS := now.UnixNano()
	policy := s.Credits()
	for i := range v.pool.Accounts {
		a := &v.pool.Accounts[i]
		e := v.entries[i]
		if !a.Enabled || a.FlaggedReason != nil && *a.FlaggedReason != "" || e.blocked > nowNS || req.attempted(a.ID) || req.skipped(a) != "" {
			continue
		}
		e.fresh(now)
		fam, limited, full, head, deferred := e.meter(req.Model)
		if limited > nowNS {
			continue
		}
		t := tierOf(deferred, e.credits && full > nowNS, policy)
		if t < 0 {
			continue
		}
		sc := score(e, nowNS, head, v.offset[i], fam)
		if load != nil {
			sc += movedRoomWeight * head / float64(1+load[a.ID])
		}
		if bi == 0 || t < bt || (t == bt && sc > bs) {
			bi, bs, bt = i+1, sc, t
		}
	}
	return bi, bt
}
