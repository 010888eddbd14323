package rotation

import (
	"time"
)

// Endpoint is what is known of one upstream endpoint (scheme://host:port)
// that failed to connect: docs/selection.md's rule puts such a failure on the
// endpoint, not on the accounts served from it, which are skipped with
// cooling-down:network-error until Until. It is kept in state.json beside
// the accounts, so every process on the home learns it within a second.
type Endpoint struct {
	// Until is when the endpoint is next worth a try; zero once it
	// answered again.
	Until time.Time `json:"until,omitzero"`
	// Error is the OS error of the last failed connect ("" once it
	// answered again).
	Error string `json:"error,omitempty"`
	// Fails counts the failures in a row; each doubles the wait.
	Fails int `json:"fails,omitempty"`
	// At is when this was observed: the newer observation wins a merge.
	At time.Time `json:"at"`
}

const (
	// An unreachable endpoint is skipped for a while that doubles with
	// each failure in a row, from EndpointBackoff up to EndpointBackoffMax;
	// once that passes, the next request probes it.
	EndpointBackoff    = time.Second
	EndpointBackoffMax = 30 * time.Second
	// maxEndpoints bounds the records kept; endpointKeep is how long a
	// record of an endpoint that answered again stays, so other processes
	// see the recovery before it is dropped.
	maxEndpoints = 256
	endpointKeep = 10 * time.Minute
)

// EndpointDown records that connecting to ep failed with err, and returns
// until when the endpoint is skipped.
func (r *Runtime) EndpointDown(ep string, err error) time.Time {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	d := Endpoint{Fails: 1, Error: err.Error(), At: now}
	if old, ok := r.eps[ep]; ok && !old.Until.IsZero() {
		d.Fails = old.Fails + 1
	}
	d.Until = now.Add(min(EndpointBackoff<<min(d.Fails-1, 5), EndpointBackoffMax))
	r.setEndpointLocked(ep, d)
	r.dirty = true
	return d.Until
}

// EndpointUp records that ep answered. It costs nothing while no endpoint
// is down, which is nearly always.
func (r *Runtime) EndpointUp(ep string) {
	if !r.AnyEndpointDown() {
		return
	}
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.eps[ep]; ok && !old.Until.IsZero() {
		r.setEndpointLocked(ep, Endpoint{At: now})
		r.dirty = true
	}
}

// AnyEndpointDown reports whether some endpoint is on record as
// unreachable (its wait may have passed): one atomic load.
func (r *Runtime) AnyEndpointDown() bool { return r.down.Load() != nil }

// EndpointDownUntil returns until when ep is skipped and the error that
// put it there; a zero time when it is not (or no longer) skipped. It
// takes no lock: the selector calls it, through Request.Skip, under its
// own.
func (r *Runtime) EndpointDownUntil(ep string) (time.Time, string) {
	down := r.down.Load()
	if down == nil {
		return time.Time{}, ""
	}
	d, ok := (*down)[ep]
	if !ok || !d.Until.After(r.clock.Now()) {
		return time.Time{}, ""
	}
	return d.Until, d.Error
}

// setEndpointLocked stores d for ep within the bound on records. Callers
// hold r.mu.
func (r *Runtime) setEndpointLocked(ep string, d Endpoint) {
	if _, ok := r.eps[ep]; !ok && len(r.eps) >= maxEndpoints {
		r.pruneEndpointsLocked(d.At)
		if len(r.eps) >= maxEndpoints {
			return // more unreachable endpoints than accounts could name
		}
	}
	r.eps[ep] = d
	r.publishDownLocked()
}

// publishDownLocked publishes the endpoints that are down for readers that
// take no lock; changes are rare, so a copy each time is cheap. Callers
// hold r.mu.
func (r *Runtime) publishDownLocked() {
	down := make(map[string]Endpoint)
	for ep, d := range r.eps {
		if !d.Until.IsZero() {
			down[ep] = d
		}
	}
	if len(down) == 0 {
		r.down.Store(nil)
		return
	}
	r.down.Store(&down)
}

// mergeEndpointsLocked folds the file's records in: per endpoint the newer
// observation wins (on a tie, the later Until), which is commutative, so
// processes may merge in any order. Callers hold r.mu.
func (r *Runtime) mergeEndpointsLocked(disk map[string]Endpoint) {
	for ep, d := range disk {
		old, ok := r.eps[ep]
		if ok && (old.At.After(d.At) || old.At.Equal(d.At) && !d.Until.After(old.Until)) {
			continue
		}
		r.setEndpointLocked(ep, d)
	}
}

// pruneEndpointsLocked drops records of endpoints that answered again
// more than endpointKeep ago, or whose wait ended that long ago. Callers
// hold r.mu.
func (r *Runtime) pruneEndpointsLocked(now time.Time) {
	for ep, d := range r.eps {
		if now.Sub(d.At) > endpointKeep && now.Sub(d.Until) > endpointKeep {
			delete(r.eps, ep)
		}
	}
	r.publishDownLocked()
}
