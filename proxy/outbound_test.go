package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/netproxy"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
)

// Tests of docs/behind-a-proxy.md's outbound proxies, through real proxies on loopback
// in front of the fake upstream.

// forwardProxy is an HTTP forwarding proxy: CONNECT tunnels and
// absolute-form plain HTTP, asking for basic auth when user is set. It
// counts what it carried and what it refused.
type forwardProxy struct {
	user, password string
	addr           string
	carried        atomic.Int32
	refused        atomic.Int32
}

func startForwardProxy(t *testing.T, user, password string) *forwardProxy {
	t.Helper()
	p := &forwardProxy{user: user, password: password}
	ln := listenLoopback(t)
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	p.addr = ln.Addr().String()
	return p
}

// listenLoopback listens on a free loopback port until the test ends.
func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// url is the proxy's URL with the given password ("" for none).
func (p *forwardProxy) url(password string) string {
	if p.user == "" {
		return "http://" + p.addr
	}
	return "http://" + p.user + ":" + password + "@" + p.addr
}

func (p *forwardProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.user != "" {
		user, pw, ok := (&http.Request{Header: http.Header{"Authorization": {r.Header.Get("Proxy-Authorization")}}}).BasicAuth()
		if !ok || user != p.user || pw != p.password {
			p.refused.Add(1)
			w.Header().Set("Proxy-Authenticate", `Basic realm="test"`)
			w.WriteHeader(http.StatusProxyAuthRequired)
			return
		}
	}
	p.carried.Add(1)
	if r.Method == http.MethodConnect {
		tunnel(w, r.Host)
		return
	}
	r.RequestURI = "" // absolute form: send it on as a client would
	r.Header.Del("Proxy-Authorization")
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// tunnel answers a CONNECT and pipes the client's connection to addr.
func tunnel(w http.ResponseWriter, addr string) {
	up, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	conn, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		up.Close()
		return
	}
	conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
	pipe(conn, io.MultiReader(brw.Reader, conn), up)
}

// pipe copies both ways between a client (read through in) and up until
// either side ends.
func pipe(client net.Conn, in io.Reader, up net.Conn) {
	var once sync.Once
	done := func() { once.Do(func() { client.Close(); up.Close() }) }
	go func() { io.Copy(up, in); done() }()
	io.Copy(client, up)
	done()
}

// socksProxy is a SOCKS5 server (RFC 1928, with RFC 1929 user and
// password when user is set) that counts the connections it carried.
type socksProxy struct {
	user, password string
	addr           string
	carried        atomic.Int32
}

func startSocksProxy(t *testing.T, user, password string) *socksProxy {
	t.Helper()
	s := &socksProxy{user: user, password: password}
	ln := listenLoopback(t)
	s.addr = ln.Addr().String()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

func (s *socksProxy) serve(c net.Conn) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	target, ok := s.handshake(c, br)
	if !ok {
		c.Close()
		return
	}
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
		c.Close()
		return
	}
	s.carried.Add(1)
	c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	c.SetDeadline(time.Time{})
	pipe(c, br, up)
}

// handshake reads the greeting, the sub-negotiation and the request, and
// returns the address asked for.
func (s *socksProxy) handshake(c net.Conn, br *bufio.Reader) (string, bool) {
	hdr := make([]byte, 2)
	if _, err := io.ReadFull(br, hdr); err != nil || hdr[0] != 5 {
		return "", false
	}
	methods := make([]byte, hdr[1])
	io.ReadFull(br, methods)
	method := byte(0)
	if s.user != "" {
		method = 2
	}
	if !bytes.Contains(methods, []byte{method}) {
		c.Write([]byte{5, 0xff})
		return "", false
	}
	c.Write([]byte{5, method})
	if method == 2 {
		user, pw := readSocksString(br, 1), readSocksString(br, 0)
		if user != s.user || pw != s.password {
			c.Write([]byte{1, 1})
			return "", false
		}
		c.Write([]byte{1, 0})
	}
	req := make([]byte, 4)
	if _, err := io.ReadFull(br, req); err != nil || req[1] != 1 {
		return "", false
	}
	var host string
	switch req[3] {
	case 1:
		ip := make([]byte, 4)
		io.ReadFull(br, ip)
		host = net.IP(ip).String()
	case 3:
		host = readSocksString(br, 0)
	default:
		return "", false
	}
	port := make([]byte, 2)
	io.ReadFull(br, port)
	return net.JoinHostPort(host, strconv.Itoa(int(binary.BigEndian.Uint16(port)))), true
}

// readSocksString reads skip bytes (the sub-negotiation's version), then
// one length-prefixed string.
func readSocksString(br *bufio.Reader, skip int) string {
	br.Discard(skip)
	n, _ := br.ReadByte()
	b := make([]byte, n)
	io.ReadFull(br, b)
	return string(b)
}

// envProxy makes the proxy read vars as its environment. The upstream's
// bases name 0.0.0.0, which reaches the loopback listener on Linux and
// macOS but, unlike 127.0.0.1, is not exempt from proxying by Go's rule.
func envProxy(vars map[string]string) envOption {
	return func(c *Config) {
		c.EnvProxy = netproxy.FromEnv(func(k string) string { return vars[k] })
		c.ChatGPTBase = strings.Replace(c.ChatGPTBase, "127.0.0.1", "0.0.0.0", 1)
		c.OpenAIBase = strings.Replace(c.OpenAIBase, "127.0.0.1", "0.0.0.0", 1)
	}
}

// setProxy gives account i its own proxy raw, as "rotor set --proxy" does.
func (e *env) setProxy(i int, raw string) {
	e.t.Helper()
	sec, err := secrets.Open(e.store.Dir(), "file", io.Discard)
	if err != nil {
		e.t.Fatal(err)
	}
	p, err := accounts.SetProxy(e.store, sec, e.id(i), raw)
	if err != nil {
		e.t.Fatal(err)
	}
	e.pool = p
	e.sel.SetPool(p)
}

func expectOK(t *testing.T, e *env) {
	t.Helper()
	r := e.do("POST", "/v1/responses", streamBody)
	body := readAll(t, r)
	if r.StatusCode != 200 || !strings.Contains(body, "response.completed") {
		t.Fatalf("status %d: %.300s", r.StatusCode, body)
	}
}

func TestProxyFromEnvironmentCarriesRequests(t *testing.T) {
	t.Parallel()
	// HTTP_PROXY for an http upstream, HTTPS_PROXY for an https one, as
	// Go's and curl's clients read them.
	for _, c := range []struct {
		env string
		tls bool
	}{{"HTTP_PROXY", false}, {"HTTPS_PROXY", true}} {
		fp := startForwardProxy(t, "u", "s3cret")
		e := newEnvWith(t, []acct{{accounts.KindAPIKey, "a"}}, peerConfig{seed: 1, tls: c.tls},
			envProxy(map[string]string{c.env: fp.url("s3cret")}))
		expectOK(t, e)
		if fp.carried.Load() != 1 || fp.refused.Load() != 0 {
			t.Errorf("%s: proxy carried %d, refused %d; want 1, 0", c.env, fp.carried.Load(), fp.refused.Load())
		}
	}
}

func TestProxyNoProxySkipsIt(t *testing.T) {
	t.Parallel()
	fp := startForwardProxy(t, "", "")
	e := newEnv(t, []acct{{accounts.KindAPIKey, "a"}},
		envProxy(map[string]string{"http_proxy": fp.url(""), "NO_PROXY": "0.0.0.0"}))
	expectOK(t, e)
	if n := fp.carried.Load(); n != 0 {
		t.Errorf("the proxy carried %d requests for a NO_PROXY host", n)
	}
}

func TestProxyOfTheAccountWinsOverTheEnvironment(t *testing.T) {
	t.Parallel()
	envP := startForwardProxy(t, "", "")
	own := startSocksProxy(t, "sock", "pw-of-socks")
	e := newEnv(t, []acct{{accounts.KindAPIKey, "a"}}, envProxy(map[string]string{"HTTPS_PROXY": envP.url(""), "HTTP_PROXY": envP.url("")}))
	e.setProxy(1, "socks5://sock:pw-of-socks@"+own.addr)
	expectOK(t, e)
	if envP.carried.Load() != 0 || own.carried.Load() != 1 {
		t.Errorf("environment's proxy carried %d, the account's %d; want 0, 1", envP.carried.Load(), own.carried.Load())
	}
}

// Two accounts on one upstream host through different proxies (and none)
// never share a pooled connection.
func TestProxyRoutesKeepTheirOwnConnections(t *testing.T) {
	t.Parallel()
	p1, p2 := startForwardProxy(t, "", ""), startForwardProxy(t, "", "")
	e := newEnv(t, []acct{{accounts.KindAPIKey, "a"}, {accounts.KindAPIKey, "b"}, {accounts.KindAPIKey, "c"}})
	e.setProxy(1, p1.url(""))
	e.setProxy(2, p2.url(""))
	for range 2 {
		for i := 1; i <= 3; i++ {
			e.pin(i)
			expectOK(t, e)
		}
	}
	// One tunnel each, kept and used again; the straight account's
	// requests in neither.
	if p1.carried.Load() != 1 || p2.carried.Load() != 1 || e.up.Count("c") != 2 {
		t.Errorf("proxies carried %d and %d tunnels, the straight account had %d requests; want 1, 1, 2",
			p1.carried.Load(), p2.carried.Load(), e.up.Count("c"))
	}
}

// A proxy that refuses the password is a fault of its route: 503
// network-error naming the proxy's host and port, no account marked, and
// the password nowhere in the answer, the log or accounts.json.
func TestProxyRefusingThePasswordIsTheRoutesFault(t *testing.T) {
	t.Parallel()
	fp := startForwardProxy(t, "u", "right-password")
	var logs syncBuffer
	e := newEnvLogged(t, []acct{{accounts.KindAPIKey, "a"}}, &logs)
	e.setProxy(1, fp.url("wrong-password"))
	r := e.do("POST", "/v1/responses", streamBody)
	got := expectError(t, r, 503, rerr.PoolExhausted)
	if got.Extra["reason"] != "network-error" || !strings.Contains(got.Message, fp.addr) || !strings.Contains(got.Message, "407") {
		t.Errorf("reason %v, message %q: want network-error naming %s and the 407", got.Extra["reason"], got.Message, fp.addr)
	}
	if fp.refused.Load() != 1 {
		t.Errorf("proxy refused %d tunnels, want 1", fp.refused.Load())
	}
	expectUnmarked(t, e, 1)
	raw, err := os.ReadFile(e.store.Path())
	if err != nil {
		t.Fatal(err)
	}
	stored := string(raw)
	for what, text := range map[string]string{"answer": got.Message, "log": logs.String(), "accounts.json": stored} {
		if strings.Contains(text, "wrong-password") {
			t.Errorf("the proxy password is in the %s: %s", what, text)
		}
	}
	if !strings.Contains(stored, `"proxy_url": "http://u@`+fp.addr+`"`) {
		t.Errorf("accounts.json does not show the proxy without its password:\n%s", stored)
	}
}

// A WebSocket's upstream socket goes through the account's proxy too.
func TestProxyCarriesTheUpstreamSocket(t *testing.T) {
	t.Parallel()
	fp := startForwardProxy(t, "u", "pw")
	e := newEnv(t, []acct{{accounts.KindChatGPT, "a"}})
	e.setProxy(1, fp.url("pw"))
	c := e.openSocket()
	if got := types(turn(t, c, `{"type":"response.create","model":"gpt-5","input":"hi"}`)); got[len(got)-1] != "response.completed" {
		t.Fatalf("frames %v", got)
	}
	if e.up.Sockets() != 1 || fp.carried.Load() != 1 {
		t.Errorf("proxy carried %d tunnels to %d upstream sockets, want 1 to 1", fp.carried.Load(), e.up.Sockets())
	}
}

// syncBuffer is a log sink safe for the proxy's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
