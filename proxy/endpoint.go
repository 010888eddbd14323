package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
)

// An endpoint is where an upstream base lives: scheme, host and port. When
// rotor cannot connect to it, the network (or that host) is at fault, not
// the accounts behind it (SPEC §4's connect-error row), so the fault is
// recorded here and no account is marked.
type endpoints struct {
	clock clock.Clock
	nDown atomic.Int32 // fast path: most of the time nothing is down

	mu    sync.Mutex
	down  map[string]*endpointDown
	bases map[string]string // base URL → endpoint, bounded by maxBases
}

type endpointDown struct {
	until time.Time
	fails int
	err   error
}

const (
	// An unreachable endpoint is skipped for a while that doubles with each
	// failure, from endpointBackoff up to endpointBackoffMax; once that
	// passes, the next request probes it.
	endpointBackoff    = time.Second
	endpointBackoffMax = 30 * time.Second
	maxBases           = 1024
)

func newEndpoints(clock clock.Clock) *endpoints {
	return &endpoints{clock: clock, down: map[string]*endpointDown{}, bases: map[string]string{}}
}

// of returns the endpoint of an upstream base URL, "scheme://host:port".
func (e *endpoints) of(base string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ep, ok := e.bases[base]; ok {
		return ep
	}
	ep := base
	if u, err := url.Parse(base); err == nil && u.Host != "" {
		port := u.Port()
		if port == "" {
			port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
		}
		ep = u.Scheme + "://" + net.JoinHostPort(u.Hostname(), port)
	}
	if len(e.bases) >= maxBases {
		clear(e.bases) // bounded: a miss costs one parse
	}
	e.bases[base] = ep
	return ep
}

// markDown records that connecting to ep failed with err.
func (e *endpoints) markDown(ep string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	d, ok := e.down[ep]
	if !ok {
		if len(e.down) >= maxBases {
			return // more unreachable endpoints than accounts could name
		}
		d = &endpointDown{}
		e.down[ep] = d
		e.nDown.Add(1)
	}
	d.fails++
	d.err = err
	d.until = e.clock.Now().Add(min(endpointBackoff<<min(d.fails-1, 5), endpointBackoffMax))
}

// markUp records that ep answered.
func (e *endpoints) markUp(ep string) {
	if e.nDown.Load() == 0 {
		return
	}
	e.mu.Lock()
	if _, ok := e.down[ep]; ok {
		delete(e.down, ep)
		e.nDown.Add(-1)
	}
	e.mu.Unlock()
}

// anyDown reports whether some endpoint is marked unreachable.
func (e *endpoints) anyDown() bool { return e.nDown.Load() > 0 }

// isDown reports whether ep is unreachable and not yet due for a probe.
func (e *endpoints) isDown(ep string) bool {
	if e.nDown.Load() == 0 {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	d, ok := e.down[ep]
	return ok && e.clock.Now().Before(d.until)
}

// endpointOf is the endpoint account a's requests go to.
func (s *Server) endpointOf(a *accounts.Account) string {
	return s.endpoints.of(adapters[a.Kind].base(&s.cfg, a))
}

// dialError marks an error that happened while connecting, before any
// byte of the request was sent.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// classifyTransport reads an error of the upstream client (no response
// came) into an outcome: rotor's own limits are outOverloaded (nobody's
// fault), a failed connect, TLS handshake or a missing answer within the
// response timeout is outUnreachable (the endpoint's), anything else, such
// as a reset after the request was sent, is outNetworkError (the
// account's answer broke).
func classifyTransport(err error) outcome {
	var de *dialError
	switch {
	case errors.Is(err, errNoFreeConns):
		return outOverloaded
	case errors.As(err, &de):
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			return outOverloaded // rotor ran out of descriptors, not the network
		}
		return outUnreachable
	case tlsFailure(err), errors.Is(err, errResponseTimeout):
		return outUnreachable
	}
	return outNetworkError
}

func tlsFailure(err error) bool {
	var (
		rec   tls.RecordHeaderError
		alert tls.AlertError
		verr  *tls.CertificateVerificationError
		uae   x509.UnknownAuthorityError
		hne   x509.HostnameError
		cie   x509.CertificateInvalidError
	)
	return errors.As(err, &rec) || errors.As(err, &alert) || errors.As(err, &verr) ||
		errors.As(err, &uae) || errors.As(err, &hne) || errors.As(err, &cie)
}
