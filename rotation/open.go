package rotation

import (
	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
)

// Open returns a selector over pool on the shared runtime state of the
// ROTOR_HOME dir, with state.json read once, telling time by clk. seed
// spreads parallel proxies (docs/selection.md): each process should pass a
// different value. It is how every rotor process wires selection, so
// serve, the commands that read the pool and the proxy's tests wire it
// alike.
//
// The selector is usable even when err is not nil: err then says
// state.json could not be read, and the selector starts from empty
// runtime state. State is advisory (docs/files.md), so an error wrapping
// ErrDamagedState deserves a warning, not a failure; the next write
// replaces the file.
func Open(dir string, pool *accounts.Pool, clk clock.Clock, seed uint64) (*Selector, error) {
	rt := NewRuntime(dir, clk)
	sel := NewSelector(rt, clk, seed)
	sel.SetPool(pool)
	return sel, rt.Sync(nil)
}
