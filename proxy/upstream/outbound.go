package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	xproxy "golang.org/x/net/proxy"

	"github.com/rotorproxy/rotor/accounts/netproxy"
)

// Outbound proxies (docs/behind-a-proxy.md). A request reaches its upstream one way:
// straight, or through one proxy, the account's own (its proxy_url, whose
// password is in its secret) or else the environment's (HTTPS_PROXY,
// HTTP_PROXY, NO_PROXY). The way is also what a failed connect is blamed
// on: a proxy that refuses, asks for a password it did not get or cannot
// reach the upstream puts its route out of reach, never the account.

// A Way is how requests to one upstream base go out for one account.
type Way struct {
	// Endpoint names the route for docs/selection.md's endpoint rule: the upstream's
	// scheme://host:port and, through a proxy, " via " its shown form, so
	// the 503 names the proxy's host and port and never its password.
	Endpoint string
	// proxy is nil for a straight connection. An account's own proxy
	// (own) carries no password here: it is in the account's secret.
	proxy *url.URL
	own   bool
	shown string // netproxy.Display(proxy): the key of its client
	err   error  // the account's stored proxy URL could not be read
}

// WayOf resolves the way to base for an account whose own proxy is
// accountProxy (a netproxy.Display form; "" for none), the environment's
// rule env (nil: none) deciding otherwise.
func WayOf(base, accountProxy string, env netproxy.Func) Way {
	w := Way{Endpoint: endpointOf(base)}
	switch {
	case accountProxy != "":
		u, err := netproxy.Parse(accountProxy)
		if err != nil {
			// Never straight instead: the account is meant to be reached
			// only through its proxy.
			w.err = err
			u = &url.URL{Scheme: "proxy", Host: "unreadable"}
		}
		w.proxy, w.own = u, true
	case env != nil:
		if target, err := url.Parse(base); err == nil {
			w.proxy, _ = env(target)
		}
	}
	if w.proxy != nil {
		w.shown = netproxy.Display(w.proxy)
		w.Endpoint += " via " + w.shown
	}
	return w
}

// An Exit is a way made real: the client that sends over it, and the
// dial that opens its connections (for the WebSocket upstream).
type Exit struct {
	// Client sends HTTP requests over the exit, each on a connection of
	// its pool, and reads their answers' bodies as streams.
	Client *fasthttp.Client
	// Dial connects to an address; DialTLS makes a TLS connection to it,
	// handshaken on the connecting goroutine like the client's.
	Dial, DialTLS func(addr string) (net.Conn, error)
}

// Exits keeps one upstream client per way out: the straight one, made
// up front, and one per proxy, made when first used. fasthttp pools
// connections by host within a client, so a connection through one proxy
// (or none) is never handed to a request meant to go through another.
type Exits struct {
	opts      Options
	dialer    *net.Dialer
	connector *connector // shared by every exit: it bounds connects in flight
	direct    Exit

	mu  sync.Mutex
	via map[string]*viaExit // by way.shown, at most maxProxies
}

// viaExit is an exit through one proxy, with the password it dials with.
type viaExit struct {
	Exit
	password string
}

// maxProxies bounds the proxied clients kept; past it the oldest are let
// go (their idle connections closed), and the next request through one of
// them makes it again.
const maxProxies = 64

// NewExits returns the exits of clients made with opts, the straight one
// made.
func NewExits(opts Options) *Exits {
	rs := &Exits{opts: opts, dialer: newDialer(&opts), connector: newConnector(opts.ConnWait), via: map[string]*viaExit{}}
	direct := opts.Dial
	if direct == nil {
		direct = rs.dialer.Dial
	}
	rs.direct = rs.exitOver(direct)
	return rs
}

// exitOver is the exit whose connections dial opens.
func (rs *Exits) exitOver(dial dialFunc) Exit {
	base := upstreamTLS(&rs.opts)
	return Exit{
		Client: newUpstreamClient(&rs.opts, rs.connector, dial),
		Dial:   func(addr string) (net.Conn, error) { return rs.connector.dial(dial, addr, nil) },
		DialTLS: func(addr string) (net.Conn, error) {
			return rs.connector.dial(dial, addr, func(raw net.Conn) (net.Conn, error) {
				return handshake(raw, hostTLS(base, addr, rs.connector.sessions), rs.opts.ConnectTimeout)
			})
		},
	}
}

// Of returns the exit of w for an account whose own proxy's password,
// from its secret, is password. The straight way costs nothing: no lock,
// no allocation.
func (rs *Exits) Of(w *Way, password string) (*Exit, error) {
	if w.proxy == nil {
		return &rs.direct, nil
	}
	if w.err != nil {
		return nil, &DialError{w.err}
	}
	p := w.proxy
	if !w.own {
		password = "" // the environment's proxy: its password is in its URL
		if p.User != nil {
			password, _ = p.User.Password()
		}
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if vr, ok := rs.via[w.shown]; ok && vr.password == password {
		return &vr.Exit, nil
	}
	rs.dropLocked(w.shown)
	if len(rs.via) >= maxProxies {
		for k := range rs.via {
			rs.dropLocked(k) // map order: an arbitrary one; a miss costs a new client
			break
		}
	}
	dial := viaProxy(rs.dialer, withPassword(p, password), rs.opts.ConnectTimeout)
	vr := &viaExit{Exit: rs.exitOver(dial), password: password}
	rs.via[w.shown] = vr
	return &vr.Exit, nil
}

// dropLocked lets the client of shown go; requests still using it keep
// their connections until they end.
func (rs *Exits) dropLocked(shown string) {
	if vr, ok := rs.via[shown]; ok {
		vr.Client.CloseIdleConnections()
		delete(rs.via, shown)
	}
}

// CloseIdle closes the idle connections of every exit.
func (rs *Exits) CloseIdle() {
	rs.direct.Client.CloseIdleConnections()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, vr := range rs.via {
		vr.Client.CloseIdleConnections()
	}
}

func withPassword(p *url.URL, password string) *url.URL {
	if p.User == nil || password == "" {
		return p
	}
	q := *p
	q.User = url.UserPassword(p.User.Username(), password)
	return &q
}

// viaProxy returns a dial that reaches addr through proxy p within
// timeout: a SOCKS5 connect, or a CONNECT tunnel through an HTTP(S)
// proxy, for plain and TLS upstreams alike (fasthttp and the WebSocket
// dialer start TLS on the tunnel). Its errors name the proxy as shown,
// never its password.
func viaProxy(d *net.Dialer, p *url.URL, timeout time.Duration) func(network, addr string) (net.Conn, error) {
	shown := netproxy.Display(p)
	if strings.HasPrefix(p.Scheme, "socks5") {
		return socksDial(d, p, shown, timeout)
	}
	return func(_, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		conn, err := connectTunnel(ctx, d, p, addr)
		if err != nil {
			return nil, fmt.Errorf("proxy %s: %w", shown, err)
		}
		return conn, nil
	}
}

func socksDial(d *net.Dialer, p *url.URL, shown string, timeout time.Duration) func(network, addr string) (net.Conn, error) {
	var auth *xproxy.Auth
	if p.User != nil {
		pw, _ := p.User.Password()
		auth = &xproxy.Auth{User: p.User.Username(), Password: pw}
	}
	// SOCKS5 fails only for a network other than tcp; rotor passes tcp.
	sd, _ := xproxy.SOCKS5("tcp", netproxy.HostPort(p), auth, d)
	cd := sd.(xproxy.ContextDialer)
	return func(network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		conn, err := cd.DialContext(ctx, network, addr)
		if err != nil {
			return nil, fmt.Errorf("proxy %s: %w", shown, err)
		}
		return conn, nil
	}
}

// connectTunnel opens a CONNECT tunnel to addr through the HTTP proxy p
// (over TLS for an https:// proxy), with basic auth from p's user info,
// all of it before ctx ends.
func connectTunnel(ctx context.Context, d *net.Dialer, p *url.URL, addr string) (net.Conn, error) {
	conn, err := d.DialContext(ctx, "tcp", netproxy.HostPort(p))
	if err != nil {
		return nil, err
	}
	if p.Scheme == "https" {
		conn = tls.Client(conn, &tls.Config{ServerName: p.Hostname()})
	}
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	tunnel, err := connect(conn, p, addr)
	if err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return tunnel, nil
}

// errProxyRefused is wrapped by the error of a proxy that answered
// CONNECT with anything but 200 (407: wrong or missing password).
var errProxyRefused = errors.New("refused the tunnel")

func connect(conn net.Conn, p *url.URL, addr string) (net.Conn, error) {
	req := "CONNECT " + addr + " HTTP/1.1\r\nHost: " + addr + "\r\n"
	if p.User != nil {
		pw, _ := p.User.Password()
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(p.User.Username()+":"+pw)) + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		return nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w to %s: %s", errProxyRefused, addr, resp.Status)
	}
	if br.Buffered() > 0 {
		return &bufferedConn{Conn: conn, r: br}, nil
	}
	return conn, nil
}

// bufferedConn reads first what the proxy's answer left in the buffer.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
