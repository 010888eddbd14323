package proxy

import (
	"github.com/rs/zerolog"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// Home is what a proxy needs from one ROTOR_HOME, opened the way every
// `rotor serve` opens it: the pool and a selector over it on the shared
// runtime state, and the usage log. The proxy's own tests open theirs with
// OpenHome too, so the wiring they test is serve's.
type Home struct {
	Store    *accounts.Store
	Pool     *accounts.Pool
	Selector *rotation.Selector
	Usage    *usage.Log
}

// OpenHome loads st's pool, sets up the runtime state on clock (seed
// spreads parallel proxies, SPEC §4) and opens the usage log. stateErr
// reports a state.json that could not be read: advisory, the proxy starts
// with fresh state and says so.
func OpenHome(st *accounts.Store, clock clock.Clock, seed uint64) (h *Home, stateErr, err error) {
	pool, err := st.Load()
	if err != nil {
		return nil, nil, err
	}
	rt := rotation.NewRuntime(st.Dir(), clock)
	sel := rotation.NewSelector(rt, clock, seed)
	sel.SetPool(pool)
	stateErr = rt.Sync(nil)
	usage, err := usage.OpenWith(st.Dir(), usage.Options{Clock: clock})
	if err != nil {
		return nil, stateErr, err
	}
	return &Home{Store: st, Pool: pool, Selector: sel, Usage: usage}, stateErr, nil
}

// Deps are a proxy's dependencies on h; the caller adds the refresher and
// the dashboard, which need more than the home.
func (h *Home) Deps(sec SecretSource, clock clock.Clock, log zerolog.Logger) Deps {
	return Deps{Selector: h.Selector, Secrets: sec, Flagger: h.Store, Usage: h.Usage, Clock: clock, Log: log}
}
