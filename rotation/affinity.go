package rotation

import (
	"sync"
	"time"

	"github.com/rotorproxy/rotor/accounts/clock"
)

// Affinity defaults (docs/selection.md): a conversation sticks to its account for 20
// minutes after its last turn; the table is bounded so it cannot grow with
// the number of conversations.
const (
	AffinityTTL = 20 * time.Minute
	AffinityMax = 50_000
)

type binding struct {
	id  string
	gen int64
	at  time.Time
}

// Affinity maps conversation keys to the account serving them. Entries
// expire after the TTL and are dropped when the affinity generation moves
// (`rotor switch`/`unpin`). Safe for concurrent use.
type Affinity struct {
	clock clock.Clock
	ttl   time.Duration
	max   int

	mu  sync.Mutex
	gen int64
	m   map[string]binding
}

// NewAffinity returns an empty table holding at most max keys.
func NewAffinity(clock clock.Clock, ttl time.Duration, max int) *Affinity {
	return &Affinity{clock: clock, ttl: ttl, max: max, m: make(map[string]binding)}
}

// SetGeneration moves the table to generation gen; bindings made under
// another generation no longer count.
func (a *Affinity) SetGeneration(gen int64) {
	a.mu.Lock()
	if gen != a.gen {
		a.gen = gen
		clear(a.m)
	}
	a.mu.Unlock()
}

// Get returns the account bound to key, if the binding is live.
func (a *Affinity) Get(key string) (string, bool) {
	return a.getAt(key, a.clock.Now())
}

// getAt is Get at now, the clock as the caller (Pick) read it.
func (a *Affinity) getAt(key string, now time.Time) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, ok := a.m[key]
	if !ok || b.gen != a.gen || now.Sub(b.at) > a.ttl {
		return "", false
	}
	return b.id, true
}

// Put binds key to id.
func (a *Affinity) Put(key, id string) {
	now := a.clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.m[key]; !ok && len(a.m) >= a.max {
		a.evict(now)
	}
	a.m[key] = binding{id: id, gen: a.gen, at: now}
}

// evict drops expired bindings, and if that frees nothing, an arbitrary
// eighth of the table: losing a binding only costs a prompt-cache miss.
func (a *Affinity) evict(now time.Time) {
	for k, b := range a.m {
		if now.Sub(b.at) > a.ttl || b.gen != a.gen {
			delete(a.m, k)
		}
	}
	if len(a.m) < a.max {
		return
	}
	n := a.max / 8
	for k := range a.m {
		if n <= 0 {
			break
		}
		delete(a.m, k)
		n--
	}
}

// Len returns the number of bindings held.
func (a *Affinity) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.m)
}

// maxLoadScan is the most bindings Load counts: it runs under the
// selector's lock, so a table larger than this (a busy proxy) is not
// walked for a moved conversation's sake, and Load says nothing.
const maxLoadScan = 4096

// Load counts the live bindings per account id, leaving out key; nil
// when the table holds more than maxLoadScan bindings.
func (a *Affinity) Load(except string) map[string]int {
	now := a.clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.m) > maxLoadScan {
		return nil
	}
	n := make(map[string]int)
	for k, b := range a.m {
		if k != except && b.gen == a.gen && now.Sub(b.at) <= a.ttl {
			n[b.id]++
		}
	}
	return n
}
