package proxy

import (
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/rotorproxy/rotor/accounts"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/upstream"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// Rotor's own congestion, a connect that found every slot taken for its
// whole wait, is nobody's fault: no endpoint is blamed for it.
func TestOwnCongestionIsNobodysFault(t *testing.T) {
	t.Parallel()
	if v := classifyTransport(&upstream.DialError{Err: upstream.ErrNoFreeConns}); v != verdictOverloaded {
		t.Errorf("verdict %v, want overloaded (nobody's fault)", v)
	}
}

// armDial makes e's straight way out dial with a dial that panics once
// armed: a bug on the connector's goroutine.
func armDial(e *env) *atomic.Bool {
	var armed atomic.Bool
	opts := upstreamOptions(&e.srv.cfg)
	d := &net.Dialer{Timeout: opts.ConnectTimeout}
	opts.Dial = func(network, addr string) (net.Conn, error) {
		if armed.CompareAndSwap(true, false) {
			panic("boom in dial")
		}
		return d.Dial(network, addr)
	}
	e.srv.exits = upstream.NewExits(opts)
	return &armed
}

// A bug met while dialing an upstream (here a dial that panics, once)
// ends that request alone: a 500 proxy_error, the panic logged once with
// the request id, no account or endpoint marked, and the next request on
// the same upstream served.
func TestDialPanicEndsOnlyThatRequest(t *testing.T) {
	t.Parallel()
	var log syncBuffer
	e := newEnvWith(t, []acct{{accounts.KindAPIKey, "k1"}}, peerConfig{seed: 1, tls: true, log: &log})
	armDial(e).Store(true)
	resp := e.do("POST", "/v1/responses", streamBody)
	if got := readAll(t, resp); resp.StatusCode != 500 || !strings.Contains(got, rerr.ProxyError) {
		t.Fatalf("%d %s, want 500 %s", resp.StatusCode, got, rerr.ProxyError)
	}
	id := resp.Header.Get("x-request-id")
	eventually(t, 5*time.Second, "the panic logged with "+id, func() bool {
		return strings.Contains(log.String(), `"request_id":"`+id+`","panic":"boom in dial (met while dialing`)
	})
	expectUnmarked(t, e, 1)
	if e.srv.endpoints.AnyDown() {
		t.Error("an endpoint was marked unreachable for rotor's own bug")
	}
	expectStream(t, e.do("POST", "/v1/responses", streamBody))
	if n := strings.Count(log.String(), `"panic":"boom in dial`); n != 1 {
		t.Errorf("the panic is logged %d times, want once:\n%s", n, log.String())
	}
}

// The same bug met by a socket: at its handshake, where rotor dials the
// account's upstream socket, the handshake is answered 500; in a request,
// where rotor dials a new upstream socket for one the backend expired,
// that socket closes with 1011, as with any bug a socket's request meets.
// Nothing is marked, and a new socket is served.
func TestDialPanicClosesOnlyThatSocket(t *testing.T) {
	t.Parallel()
	var log syncBuffer
	e := newEnvWith(t, []acct{{accounts.KindChatGPT, "t1"}}, peerConfig{seed: 1, tls: true, log: &log})
	armed := armDial(e)
	create := `{"type":"response.create","model":"gpt-5-codex","input":[` + userOne + `]}`

	armed.Store(true)
	if c, resp, err := e.dialSocket("/v1/responses"); err == nil || resp == nil || resp.StatusCode != 500 {
		if c != nil {
			c.Close()
		}
		t.Fatalf("handshake: %v %v, want a 500", resp, err)
	}

	c := e.openSocket()
	turn(t, c, create)
	const life = time.Second // the first upstream socket expires: the next request dials
	e.up.Set("t1", upstreamtest.Behavior{SocketLifetime: life})
	time.Sleep(life + 50*time.Millisecond)
	armed.Store(true)
	if err := c.WriteMessage(websocket.TextMessage, []byte(create)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, got, err := c.ReadMessage()
	if ce, ok := errors.AsType[*websocket.CloseError](err); !ok || ce.Code != websocket.CloseInternalServerErr {
		t.Fatalf("the socket got %q, %v; want a close with 1011", got, err)
	}

	expectUnmarked(t, e, 1)
	if e.srv.endpoints.AnyDown() {
		t.Error("an endpoint was marked unreachable for rotor's own bug")
	}
	e.up.Set("t1", upstreamtest.Behavior{})
	if ts := types(turn(t, e.openSocket(), create)); ts[len(ts)-1] != "response.completed" {
		t.Errorf("a new socket's turn: %v", ts)
	}
	if n := strings.Count(log.String(), `"panic":"boom in dial`); n != 2 {
		t.Errorf("the panics are logged %d times, want once each (2):\n%s", n, log.String())
	}
}
