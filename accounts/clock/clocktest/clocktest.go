// Package clocktest provides a clock tests control, for code that takes
// rotor's one clock (clock.Clock). It imports only the standard library,
// and only tests import it.
package clocktest

import (
	"sync"
	"time"
)

// Fake is a clock.Clock a test moves by hand. Its present is either
// frozen at a start instant (Frozen) or the real time (Real), plus every
// Advance so far; its tickers tick only when the test calls Tick, so a
// watcher looks at shared state exactly when the test says and no test
// waits for a real interval to pass. A Fake is safe for concurrent use.
type Fake struct {
	mu    sync.Mutex
	start time.Time // zero: follow the real time
	off   time.Duration
	ticks chan time.Time
}

// Frozen returns a clock that stands at start until advanced. Tests that
// use it depend on no real time at all.
func Frozen(start time.Time) *Fake {
	return &Fake{start: start, ticks: make(chan time.Time)}
}

// Real returns a clock that follows the real time plus what the test
// advanced, for tests where the network keeps real time but a cooldown
// should pass without waiting for it.
func Real() *Fake { return &Fake{ticks: make(chan time.Time)} }

// Now returns the clock's present.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start.IsZero() {
		return time.Now().Add(c.off)
	}
	return c.start.Add(c.off)
}

// Advance moves the clock's present forward by d.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

// NewTicker returns the clock's one tick channel, whatever d: every ticker
// of the clock ticks when the test calls Tick, and never by itself.
func (c *Fake) NewTicker(time.Duration) (<-chan time.Time, func()) {
	return c.ticks, func() {}
}

// Tick delivers one tick to a ticker of the clock, waiting at most wait
// for one to take it, and reports whether one did.
func (c *Fake) Tick(wait time.Duration) bool {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case c.ticks <- c.Now():
		return true
	case <-t.C:
		return false
	}
}
