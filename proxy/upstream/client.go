package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rotorproxy/rotor/accounts/netproxy"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/valyala/fasthttp"
)

// Options are what an upstream client is made with.
type Options struct {
	// ConnectTimeout bounds a connect, through a proxy too, and a TLS
	// handshake.
	ConnectTimeout time.Duration
	// ResponseTimeout bounds the wait for the first byte of an answer;
	// StallTimeout, every read after it (idleConn).
	ResponseTimeout, StallTimeout time.Duration
	// MaxConns caps the connections to one upstream host; a request that
	// finds none free, or finds maxDialing connects already in flight,
	// waits up to ConnWait, then fails with ErrNoFreeConns.
	MaxConns int
	ConnWait time.Duration
	// RootCAs are the authorities an upstream's TLS certificate is
	// checked against; nil: the system's.
	RootCAs *x509.CertPool
	// Dial connects straight to an address; nil: a net.Dialer bounded by
	// ConnectTimeout. Connects through a proxy always use a net.Dialer.
	Dial func(network, addr string) (net.Conn, error)
}

// MaxErrorBody bounds what rotor reads of an upstream's error answer.
const MaxErrorBody = 64 << 10

// ReadErrorBody reads at most MaxErrorBody bytes of an error answer and
// closes its stream; a longer body is cut and its connection discarded
// rather than drained.
func ReadErrorBody(resp *fasthttp.Response) []byte { return ReadBodyUpTo(resp, MaxErrorBody) }

// ReadBodyUpTo reads at most limit bytes of an answer and closes its
// stream, as ReadErrorBody does.
func ReadBodyUpTo(resp *fasthttp.Response, limit int) []byte {
	bs := resp.BodyStream()
	if bs == nil {
		b := resp.Body()
		return append([]byte(nil), b[:min(len(b), limit)]...)
	}
	buf := make([]byte, 0, 4096)
	var err error
	for len(buf) < limit && err == nil {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		var n int
		n, err = bs.Read(buf[len(buf):min(cap(buf), limit)])
		buf = buf[:len(buf)+n]
	}
	if err == io.EOF {
		resp.CloseBodyStream()
	} else {
		CloseStream(resp, ErrCut)
	}
	return buf
}

// ErrCut is what an answer's body is closed with when rotor stops
// reading it before its end (CloseStream), and what it reads once closed.
var ErrCut = errors.New("rotor: upstream body abandoned")

// CloseStream closes resp's body stream with err, which makes fasthttp
// close the connection instead of returning a half-read one to its pool.
func CloseStream(resp *fasthttp.Response, err error) {
	if rc, ok := resp.BodyStream().(fasthttp.ReadCloserWithError); ok {
		rc.CloseWithError(err)
	}
	resp.CloseBodyStream()
}

// Errors of the upstream client that proxy reads to classify a failure.
var (
	// ErrNoFreeConns is rotor's own congestion: no connection came free,
	// or no connect could start, within Options.ConnWait.
	ErrNoFreeConns = fasthttp.ErrNoFreeConns
	// ErrResponseTimeout is what the client returns when no byte of an
	// answer came within the response timeout (idleConn's deadline).
	ErrResponseTimeout = fasthttp.ErrTimeout
)

// newDialer is how rotor connects to every upstream, over HTTP or a
// socket.
func newDialer(o *Options) *net.Dialer {
	return &net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second}
}

// upstreamTLS is the TLS configuration of every connection to an
// upstream, over HTTP or a socket: nil (the defaults, the system's roots)
// unless o names the roots to trust. Each client sets the server name.
func upstreamTLS(o *Options) *tls.Config {
	if o.RootCAs == nil {
		return nil
	}
	return &tls.Config{RootCAs: o.RootCAs}
}

// newUpstreamClient returns an HTTP client whose connections c opens with
// dial (one per way out: see Exits). Reads on an
// upstream connection have two bounds (idleConn): the first byte of an
// answer must come within the response timeout, and once it has, every
// read must make progress within the stall timeout. A fasthttp
// ReadTimeout would instead cap the whole stream.
func newUpstreamClient(o *Options, c *connector, dial dialFunc) *fasthttp.Client {
	stall, response := o.StallTimeout, o.ResponseTimeout
	open := func(addr string, conf *tls.Config) (net.Conn, error) {
		conn, err := c.dial(dial, addr, func(raw net.Conn) (net.Conn, error) {
			conn := net.Conn(&idleConn{Conn: raw, stall: stall, response: response})
			if conf != nil {
				return handshake(conn, conf, o.ConnectTimeout)
			}
			return conn, nil
		})
		if err != nil {
			return nil, &DialError{err}
		}
		return conn, nil
	}
	return &fasthttp.Client{
		Name:                          "rotor",
		NoDefaultUserAgentHeader:      true,
		StreamResponseBody:            true,
		DisableHeaderNamesNormalizing: false,
		DisablePathNormalizing:        true,
		MaxIdleConnDuration:           60 * time.Second,
		WriteTimeout:                  60 * time.Second,
		ReadBufferSize:                16 << 10,
		MaxResponseBodySize:           0,
		MaxConnsPerHost:               o.MaxConns,
		TLSConfig:                     upstreamTLS(o),
		MaxConnWaitTimeout:            o.ConnWait,
		// Each request's connection is known to its client's watch, which
		// closes it if the client leaves before the answer starts.
		Transport: roundTrip{},
		Dial:      func(addr string) (net.Conn, error) { return open(addr, nil) },
		// A TLS host's connections come handshaken from the dialing
		// goroutine, so fasthttp, which skips the handshake of a conn
		// that has one, does not make it on the request's goroutine.
		ConfigureClient: func(hc *fasthttp.HostClient) error {
			if hc.IsTLS {
				conf := hostTLS(hc.TLSConfig, hc.Addr, c.sessions)
				hc.Dial = func(addr string) (net.Conn, error) { return open(addr, conf) }
			}
			return nil
		},
		// Only a request that never reached the upstream is sent again: a
		// pooled keep-alive connection the server had already closed.
		RetryIfErr: func(_ *fasthttp.Request, attempts int, err error) (bool, bool) {
			return false, attempts == 1 && (errors.Is(err, io.EOF) || errors.Is(err, fasthttp.ErrConnectionClosed))
		},
	}
}

// hostTLS is the TLS configuration of connections to addr: base's (the
// system's roots when nil), naming the host, with sessions kept in
// sessions, so that every connection after the first resumes one instead
// Of verifying the host's certificates again. (fasthttp keeps none.)
func hostTLS(base *tls.Config, addr string, sessions tls.ClientSessionCache) *tls.Config {
	conf := &tls.Config{}
	if base != nil {
		conf = base.Clone()
	}
	if conf.ServerName == "" {
		conf.ServerName = addr
		if host, _, err := net.SplitHostPort(addr); err == nil {
			conf.ServerName = host
		}
	}
	if conf.ClientSessionCache == nil {
		conf.ClientSessionCache = sessions
	}
	return conf
}

// tlsSessions is how many TLS sessions a connector keeps, the latest one
// for each host (crypto/tls keys them by server name).
const tlsSessions = 64

// handshake makes conn a TLS client connection with conf and completes
// its handshake within timeout.
func handshake(conn net.Conn, conf *tls.Config, timeout time.Duration) (net.Conn, error) {
	tc := tls.Client(conn, conf)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("TLS handshake: no answer within %s", timeout)
		}
		return nil, err
	}
	return tc, nil
}

// maxDialing bounds the connects in flight at once. A burst of new
// streams (a thousand clients arriving together) would otherwise start a
// dialing goroutine for each, and every one of their stacks would stay
// resident after the burst; more connects than this in parallel buy
// nothing on a real network (a browser opens six per host).
const maxDialing = 64

// A connector opens upstream connections, each on a goroutine of its own
// and at most maxDialing at once.
type connector struct {
	slots    chan struct{}
	wait     time.Duration          // how long a connect may wait for a slot
	sessions tls.ClientSessionCache // of every TLS connection it makes (hostTLS)
}

func newConnector(wait time.Duration) *connector {
	return &connector{slots: make(chan struct{}, maxDialing), wait: wait,
		sessions: tls.NewLRUClientSessionCache(tlsSessions)}
}

// dialFunc connects to an address, straight or through a proxy.
type dialFunc = func(network, addr string) (net.Conn, error)

// dial connects to addr with dial on a goroutine of its own, readies the
// connection there with ready (when not nil: rotor's read bounds, a TLS
// handshake), and waits for it. net's dial path is deep, a handshake
// deeper, and on top of a request's either would grow the stack of the
// goroutine serving the client from 8 to 16 KiB or more, which it then
// keeps for as long as the connection lives, streams included. The
// dialing goroutine's stack is freed once it is done. When maxDialing
// connects are in flight it waits up to c.wait for one to end, then fails
// with ErrNoFreeConns: rotor's own congestion, which blames no endpoint.
// So at most maxDialing handshakes run at once too, and a burst of new
// connections to a TLS host resumes the sessions its first ones made.
func (c *connector) dial(dial dialFunc, addr string, ready func(net.Conn) (net.Conn, error)) (net.Conn, error) {
	select {
	case c.slots <- struct{}{}:
	default:
		t := time.NewTimer(c.wait)
		select {
		case c.slots <- struct{}{}:
			t.Stop()
		case <-t.C:
			return nil, ErrNoFreeConns
		}
	}
	type dialed struct {
		conn net.Conn
		err  error
	}
	done := make(chan dialed, 1)
	go func() {
		defer func() { <-c.slots }()
		defer func() {
			if v := recover(); v != nil {
				done <- dialed{err: &dialPanic{v, debug.Stack()}}
			}
		}()
		conn, err := dial("tcp", addr)
		if err == nil && ready != nil {
			raw := conn
			if conn, err = ready(raw); err != nil {
				raw.Close()
			}
		}
		done <- dialed{conn, err}
	}()
	r := <-done
	return r.conn, r.err
}

// dialPanic is a panic met on a dialing goroutine: a bug. Nothing
// recovers that goroutine, so the connector hands the panic back as the
// dial's error; the upstream client gives it up like any failed connect,
// with its own bookkeeping done, and RaiseDialPanic raises it again on the
// request's goroutine, whose recover ends that request alone.
type dialPanic struct {
	v     any
	stack []byte
}

func (p *dialPanic) Error() string { return fmt.Sprintf("rotor: a bug while dialing: %v", p.v) }

// RaiseDialPanic raises again a bug the connector met while dialing for
// this request (dialPanic), with the stack it was met on; any other error
// is left to the caller to classify. A bug is nobody's fault upstream: no
// account or endpoint is marked for it.
func RaiseDialPanic(err error) {
	if p, ok := errors.AsType[*dialPanic](err); ok {
		panic(fmt.Sprintf("%v (met while dialing, on the connector's goroutine: %s)", p.v, p.stack))
	}
}

// idleConn gives every Read its own deadline: the response timeout while
// an answer has not started, the stall timeout once it has. So a slow
// answer is waited for, a stalled one is cut, and a healthy stream may
// last as long as it likes.
type idleConn struct {
	net.Conn
	stall, response time.Duration
	// awaiting is set by each write of a request and cleared by the first
	// byte of its answer. fasthttp writes and reads one request at a time
	// per connection, but from different goroutines over its life.
	awaiting atomic.Bool
}

func (c *idleConn) Write(p []byte) (int, error) {
	c.awaiting.Store(true)
	return c.Conn.Write(p)
}

func (c *idleConn) Read(p []byte) (int, error) {
	d := c.stall
	awaiting := c.awaiting.Load()
	if awaiting {
		d = c.response
	}
	if err := c.Conn.SetReadDeadline(time.Now().Add(d)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	if n > 0 && awaiting {
		c.awaiting.Store(false)
	}
	return n, err
}

// SetReadDeadline is a no-op: fasthttp sets whole-response deadlines, and
// idleConn's per-read deadline replaces them.
func (c *idleConn) SetReadDeadline(time.Time) error { return nil }

// Endpoints resolves the ways to upstream bases and keeps the record of
// their endpoints. An endpoint is where an upstream base lives: scheme,
// host and port, and the proxy in between when there is one (see Way). When rotor cannot
// connect to it, the network (or that host, or that proxy) is at fault,
// not the accounts behind it (docs/selection.md's connect-error row), so the fault
// is recorded on the endpoint, in the runtime state every process on the
// home shares (rotation.Runtime.EndpointDown), and no account is marked.
type Endpoints struct {
	rt  *rotation.Runtime
	env netproxy.Func // the environment's proxy rule; nil: none

	mu   sync.Mutex
	ways map[wayKey]Way // bounded by MaxBases
}

// wayKey is a base URL and an account's own proxy: comparing it costs no
// allocation, so the straight hot path allocates nothing.
type wayKey struct{ base, proxy string }

// MaxBases bounds the ways an Endpoints keeps, and the endpoints a caller
// keeps anything about.
const MaxBases = 1024

// NewEndpoints records endpoints' faults in rt, and resolves ways with the
// environment's proxy rule env (nil: none).
func NewEndpoints(rt *rotation.Runtime, env netproxy.Func) *Endpoints {
	return &Endpoints{rt: rt, env: env, ways: map[wayKey]Way{}}
}

// Way returns the way to base for an account whose own proxy is
// accountProxy ("" for none); its endpoint is what a connect failure
// puts out of reach.
func (e *Endpoints) Way(base, accountProxy string) Way {
	k := wayKey{base, accountProxy}
	e.mu.Lock()
	defer e.mu.Unlock()
	if w, ok := e.ways[k]; ok {
		return w
	}
	w := WayOf(base, accountProxy, e.env)
	if len(e.ways) >= MaxBases {
		clear(e.ways) // bounded: a miss costs one parse
	}
	e.ways[k] = w
	return w
}

// endpointOf is the endpoint of base: its scheme, host and port, the
// scheme's port when base names none.
func endpointOf(base string) string {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return base
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
	}
	return u.Scheme + "://" + net.JoinHostPort(u.Hostname(), port)
}

// MarkDown records that connecting to ep failed with err.
func (e *Endpoints) MarkDown(ep string, err error) { e.rt.EndpointDown(ep, err) }

// MarkUp records that ep answered.
func (e *Endpoints) MarkUp(ep string) { e.rt.EndpointUp(ep) }

// AnyDown reports whether some endpoint is on record as unreachable.
func (e *Endpoints) AnyDown() bool { return e.rt.AnyEndpointDown() }

// IsDown reports whether ep is unreachable and not yet due for a probe.
func (e *Endpoints) IsDown(ep string) bool {
	until, _ := e.rt.EndpointDownUntil(ep)
	return !until.IsZero()
}

// DialError marks an error that happened while connecting, before any
// byte of the request was sent.
type DialError struct{ Err error }

// Error is the connect's error as it was met.
func (e *DialError) Error() string { return e.Err.Error() }

// Unwrap lets errors.Is and errors.As see the connect's error.
func (e *DialError) Unwrap() error { return e.Err }
