package main

import (
	"slices"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/rotation"
)

// picker chooses the account for one attempt of a request, the way a
// proxy's selection would: it may read only what the proxy knows (the
// runtime state the replay feeds), never the model's windows.
type picker interface {
	// pick returns the 0-based index of the account for request q,
	// leaving out the accounts already attempted for it; ok is false when
	// the picker refuses (no account it would use).
	pick(q request, attempted []string) (i int, ok bool)
	// served tells the picker that account i answered conv's request.
	served(conv string, i int)
}

// rotorPicker is rotor's own policy: the real rotation.Selector, asked
// and told exactly as the proxy asks and tells it (proxy/forward.go).
type rotorPicker struct {
	sel   *rotation.Selector
	pool  *accounts.Pool
	model *ModelSpec
}

func (p *rotorPicker) pick(q request, attempted []string) (int, bool) {
	ch, ref := p.sel.Pick(&rotation.Request{AffinityKey: q.conv, Model: modelOf(q, p.model), Attempted: attempted})
	if ref != nil {
		return 0, false
	}
	return ch.Index - 1, true
}

func (p *rotorPicker) served(conv string, i int) { p.sel.Bind(conv, p.pool.Accounts[i].ID) }

// modelOf is the model q asks for.
func modelOf(q request, m *ModelSpec) string {
	if q.fam == 1 && m != nil {
		return m.Name
	}
	return mainModel
}

// familyOf is the limit id of the family that meters q ("codex", the
// main one, or m's).
func familyOf(q request, m *ModelSpec) string {
	if q.fam == 1 && m != nil {
		return rotation.NormalizeFamily(m.ID)
	}
	return rotation.MainFamily
}

// baseline is a picker of another proxy's kind. It keeps rotor's
// affinity (a conversation stays on its account while that account can
// serve, for rotation.AffinityTTL after its last turn), so that only the
// placement of new conversations differs between the policies; choose
// places them. It skips what rotor skips: accounts known to be
// rate-limited (from the usage limits the replay records) and those
// already attempted. They know the limit families as rotor does (a
// family's usage limit keeps only its model off the account), and spend
// credits whenever the account they pick is on them, as the backend
// does for a proxy that does not know of credits.
type baseline struct {
	rt       *rotation.Runtime
	pool     *accounts.Pool
	now      func() time.Time
	choose   func(b *baseline, usable []int) int
	model    *ModelSpec
	fam      string // the family of the request being placed
	bound    map[string]binding
	last     int // round-robin: the index picked last
	usable   []int
	affinity time.Duration
}

type binding struct {
	i  int
	at time.Time
}

func newBaseline(rt *rotation.Runtime, pool *accounts.Pool, now func() time.Time, choose func(*baseline, []int) int, m *ModelSpec) *baseline {
	return &baseline{rt: rt, pool: pool, now: now, choose: choose, bound: map[string]binding{}, last: -1,
		affinity: rotation.AffinityTTL, model: m}
}

func (b *baseline) pick(q request, attempted []string) (int, bool) {
	now, conv := b.now(), q.conv
	b.fam = familyOf(q, b.model)
	b.usable = b.usable[:0]
	for i := range b.pool.Accounts {
		id := b.pool.Accounts[i].ID
		st := b.rt.Snapshot(id)
		if why, _ := st.AvailabilityFor(b.fam, now); why == "" && !slices.Contains(attempted, id) {
			b.usable = append(b.usable, i)
		}
	}
	if len(b.usable) == 0 {
		return 0, false
	}
	if bd, ok := b.bound[conv]; ok && now.Sub(bd.at) <= b.affinity && slices.Contains(b.usable, bd.i) {
		return bd.i, true
	}
	i := b.choose(b, b.usable)
	b.last = i
	return i, true
}

func (b *baseline) served(conv string, i int) { b.bound[conv] = binding{i: i, at: b.now()} }

// roundRobin places each new conversation on the next usable account
// after the one placed last.
func roundRobin(b *baseline, usable []int) int {
	for _, i := range usable {
		if i > b.last {
			return i
		}
	}
	return usable[0]
}

// fillFirst places every new conversation on the first usable account in
// the pool's order, so one account is used up before the next starts.
func fillFirst(_ *baseline, usable []int) int { return usable[0] }

// leastUsed places each new conversation on the account whose fuller
// window (of the family that meters it) has the lowest used percent, as
// its last answer reported it (a window past its reset counts as empty,
// an account never seen as unused).
func leastUsed(b *baseline, usable []int) int {
	now := b.now()
	best, bestUsed := usable[0], 101.0
	for _, i := range usable {
		used := 0.0
		if q := b.rt.Snapshot(b.pool.Accounts[i].ID).Quota; q != nil {
			ws := []*rotation.Window{q.Primary, q.Secondary}
			if f := q.Family(b.fam); f != nil {
				ws = []*rotation.Window{f.Primary, f.Secondary}
			}
			for _, w := range ws {
				if w != nil && w.ResetsAt.After(now) {
					used = max(used, w.UsedPercent)
				}
			}
		}
		if used < bestUsed {
			best, bestUsed = i, used
		}
	}
	return best
}
