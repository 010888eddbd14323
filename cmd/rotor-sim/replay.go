package main

import (
	"fmt"
	"os"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock/clocktest"
	"github.com/rotorproxy/rotor/rotation"
)

// maxAttempts is the proxy's default --max-attempts (proxy.DefaultMaxAttempts,
// docs/selection.md): the most accounts one request tries.
const maxAttempts = 4

// Policies, in the order the tables show them.
const (
	PolicyRotor      = "rotor"
	PolicyRoundRobin = "round-robin"
	PolicyFillFirst  = "fill-first"
	PolicyLeastUsed  = "least-used"
)

// Policies lists every policy the replay compares.
var Policies = []string{PolicyRotor, PolicyRoundRobin, PolicyFillFirst, PolicyLeastUsed}

// Result is what one policy made of one workload.
type Result struct {
	Policy   string
	Requests int // in the workload
	Served   int
	// Blocked is how long people were blocked: from each request no
	// account could serve until the first moment one could again (the
	// wait Codex CLI shows its user), counted for each person only while
	// they were working, overlaps once.
	Blocked time.Duration
	// Moved counts turns served by another account than the turn before
	// them in the same conversation.
	Moved int
	// WeeklyExpired is the share of the pool's weekly quota that weekly
	// resets during the replay threw away unused.
	WeeklyExpired float64
	// GaveUp counts requests refused while an account could have served
	// them (the picker refused, or the attempts ran out first): such a
	// replay is not a work-conserving schedule, which the offline bound
	// assumes.
	GaveUp int
	// Credits is the tokens served on credits (docs/selection.md), CreditRequests
	// the requests.
	Credits        float64
	CreditRequests int
}

// sim is one replay in progress.
type sim struct {
	w        *Workload
	clk      *clocktest.Fake
	rt       *rotation.Runtime
	pool     *accounts.Pool
	accts    []*account
	p        picker
	res      Result
	lastAcct map[string]int // conversation → account of its last served turn
	blocked  time.Time      // the end of the block counted so far
	working  [][]span       // per person
}

// Replay runs wk (w expanded) through policy on a fresh pool, runtime
// state and fake clock starting at w.Start.
func Replay(w *Workload, wk *week, policy string) (Result, error) {
	dir, err := os.MkdirTemp("", "rotor-sim-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	s, err := newSim(dir, w, wk, policy)
	if err != nil {
		return Result{}, err
	}
	return s.run(wk), nil
}

// run replays wk's requests in order and sums up.
func (s *sim) run(wk *week) Result {
	for _, q := range wk.reqs {
		s.clk.Advance(q.at.Sub(s.clk.Now()))
		s.request(q)
	}
	s.finish()
	return s.res
}

// newSim prepares the replay of wk through policy, with dir as the
// selector's ROTOR_HOME.
func newSim(dir string, w *Workload, wk *week, policy string) (*sim, error) {
	s := &sim{w: w, clk: clocktest.Frozen(w.Start), lastAcct: map[string]int{}, working: wk.working,
		res: Result{Policy: policy, Requests: len(wk.reqs)}}
	s.pool, s.accts = newPool(w)
	// The selector is built as every rotor process builds it: rotation.Open
	// over a ROTOR_HOME (here an empty temporary one, of which only
	// state.json is read, once). The seed only breaks exact ties.
	sel, err := rotation.Open(dir, s.pool, s.clk, 1)
	if err != nil {
		return nil, err
	}
	s.rt = sel.Runtime()
	if s.p, err = s.picker(policy, sel); err != nil {
		return nil, err
	}
	for i, a := range s.accts {
		// What rotor's usage read at serve start (docs/selection.md) knows of the
		// windows already running.
		if q := a.quota(w.Start, w.Model); q.Primary != nil || q.Secondary != nil || q.Credits != nil || q.Families != nil {
			s.rt.SetQuota(s.pool.Accounts[i].ID, q)
		}
	}
	return s, nil
}

// picker builds the picker of policy.
func (s *sim) picker(policy string, sel *rotation.Selector) (picker, error) {
	choose := map[string]func(*baseline, []int) int{
		PolicyRoundRobin: roundRobin, PolicyFillFirst: fillFirst, PolicyLeastUsed: leastUsed,
	}
	if policy == PolicyRotor {
		sel.SetCredits(rotation.CreditsLastResort)
		return &rotorPicker{sel: sel, pool: s.pool, model: s.w.Model}, nil
	}
	if f, ok := choose[policy]; ok {
		return newBaseline(s.rt, s.pool, s.clk.Now, f, s.w.Model), nil
	}
	return nil, fmt.Errorf("unknown policy %q", policy)
}

// newPool is w's accounts, enabled, in the pool and in the model.
func newPool(w *Workload) (*accounts.Pool, []*account) {
	pool := &accounts.Pool{Version: 1}
	var accts []*account
	for i, spec := range w.Accounts {
		plan := w.Plans[spec.Plan]
		id := fmt.Sprintf("acct_sim%02d", i+1)
		pool.Accounts = append(pool.Accounts, accounts.Account{ID: id, Label: spec.Label, Kind: accounts.KindChatGPT,
			PlanType: spec.Plan, Enabled: true, AddedAt: w.Start})
		a := &account{id: id, label: spec.Label, fams: [][2]window{{
			{length: fiveHours, capacity: plan.FiveHourTokens},
			{length: oneWeek, capacity: plan.WeeklyTokens},
		}}, hasCredits: spec.Credits > 0, credits: spec.Credits}
		if m := w.Model; m != nil {
			a.fams = append(a.fams, [2]window{
				{length: fiveHours, capacity: m.Capacity * plan.FiveHourTokens},
				{length: oneWeek, capacity: m.Capacity * plan.WeeklyTokens},
			})
		}
		for j, run := range []*RunningWindow{spec.FiveHour, spec.Weekly} {
			if run != nil {
				win := &a.fams[0][j]
				win.used = run.UsedPercent / 100 * win.capacity
				win.resetsAt = w.Start.Add(time.Duration(run.ResetsInMinutes) * time.Minute)
			}
		}
		accts = append(accts, a)
	}
	return pool, accts
}

// request serves one request as the proxy's failover loop would: pick,
// attempt, and on a usage limit record it and try the next account.
func (s *sim) request(q request) {
	now := s.clk.Now()
	for _, a := range s.accts {
		a.at(now)
	}
	var attempted []string
	for len(attempted) < maxAttempts {
		i, ok := s.p.pick(q, attempted)
		if !ok {
			break
		}
		a := s.accts[i]
		if until := a.blockedUntil(q.fam); !until.IsZero() {
			// The backend refuses: a 429 with the reset and the family
			// that metered the request, and the windows in its headers.
			s.rt.SetQuota(a.id, a.quota(now, s.w.Model))
			s.rt.Record(a.id, rotation.Limited, 429, rotation.Limit{Until: until, Family: s.familyID(q.fam)})
			attempted = append(attempted, a.id)
			continue
		}
		if a.serve(now, q.fam, q.tokens) {
			s.res.Credits += q.tokens
			s.res.CreditRequests++
		}
		s.rt.SetQuota(a.id, a.quota(now, s.w.Model))
		s.rt.Record(a.id, rotation.Served, 200, rotation.Limit{})
		s.p.served(q.conv, i)
		s.res.Served++
		if last, ok := s.lastAcct[q.conv]; ok && last != i {
			s.res.Moved++
		}
		s.lastAcct[q.conv] = i
		return
	}
	s.block(now, q.fam)
}

// familyID is the limit id of family f: "" for the main one.
func (s *sim) familyID(f int) string {
	if f == 0 || s.w.Model == nil {
		return ""
	}
	return s.w.Model.ID
}

// block counts the time from a refused request of family f at now until
// some account can serve the family again (at least a minute, for a
// refusal while an account could have served: the attempts ran out
// first), for every person working in that time. Each refusal starts no
// earlier than the one before, so counting from the end counted so far
// counts the union of the blocked stretches of every family once.
func (s *sim) block(now time.Time, f int) {
	free, gaveUp := time.Time{}, false
	for _, a := range s.accts {
		until := a.blockedUntil(f)
		if until.IsZero() {
			until, gaveUp = now.Add(time.Minute), true
		}
		if free.IsZero() || until.Before(free) {
			free = until
		}
	}
	if gaveUp {
		s.res.GaveUp++
	}
	from := later(now, s.blocked)
	if !free.After(from) {
		return
	}
	for _, spans := range s.working {
		s.res.Blocked += within(spans, from, free)
	}
	s.blocked = free
}

// finish brings every window to the end of the replay and sums what the
// weekly resets threw away.
func (s *sim) finish() {
	end := s.w.End()
	var expired, capacity float64
	for _, a := range s.accts {
		a.at(end)
		expired += a.fams[0][1].expired
		capacity += a.fams[0][1].capacity
	}
	s.res.WeeklyExpired = expired / capacity
}
