package proxy

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/proxy/upstream"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation"
)

// docs/selection.md: "A client that goes away cancels the upstream request", also
// before the first byte of its answer, when nothing is written to it that
// could fail: rotor watches the client while it waits (upstream.ClientWatch).

// leaveBound is how soon after its client leaves an upstream request must
// be closed.
const leaveBound = time.Second

// expectLeftCleanly checks what a client that left before its answer
// started leaves behind: the upstream request closed within leaveBound of
// left, one usage record and one log line of 499 client_closed, the
// request not sent on to the other account ("bad" got sent requests,
// "good" none), and no account marked.
func expectLeftCleanly(t *testing.T, e *env, log *syncBuffer, left time.Time, open func() int, sent int) {
	t.Helper()
	deadline := left.Add(leaveBound)
	for open() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the upstream request is still open %s after its client left", leaveBound)
		}
		time.Sleep(5 * time.Millisecond)
	}
	rec := waitUsage(t, e, 1)[0]
	if rec.Status != statusClientClosed || rec.Code != codeClientClosed {
		t.Errorf("usage record %+v, want 499 client_closed", rec)
	}
	eventually(t, 5*time.Second, "the request's log line", func() bool { return requestLine(log, statusClientClosed) != nil })
	if line := requestLine(log, statusClientClosed); line["code"] != codeClientClosed || line["request_id"] == "" {
		t.Errorf("log line %v, want code client_closed and the request id", line)
	}
	e.expectCounts(map[string]int{"bad": sent, "good": 0})
	expectUnmarked(t, e, 1)
	expectUnmarked(t, e, 2)
}

// requestLine is the proxy's "request" log line of the given status, nil
// when there is none.
func requestLine(log *syncBuffer, status int) map[string]any {
	for l := range strings.SplitSeq(log.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["message"] == "request" && m["status"] == float64(status) {
			return m
		}
	}
	return nil
}

// waitOpen waits, at most 5 s, until the fake holds n requests.
func waitOpen(t *testing.T, e *env, n int) {
	t.Helper()
	eventually(t, 5*time.Second, fmt.Sprintf("the fake to hold %d request(s)", n), func() bool { return e.up.Open() == n })
}

// postAndLeave sends body to /v1/responses on a connection of its own,
// waits until the fake holds the request, closes the connection and
// returns when it did.
func postAndLeave(t *testing.T, e *env, body string) time.Time {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(e.base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", testKey, len(body), body)
	waitOpen(t, e, 1)
	c.Close()
	return time.Now()
}

// An upstream that accepts the request and says nothing: the client, a
// stream or not, gives up before any header.
func TestClientLeavingBeforeAnyHeaderClosesTheUpstreamRequest(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"stream":     streamBody,
		"non-stream": `{"model":"gpt-5","stream":false,"input":"hi"}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var log syncBuffer
			e := newEnvLogged(t, twoAPIKeys(), &log)
			e.up.Set("bad", upstreamtest.Behavior{HangHeaders: true})
			favor(e, 1)
			left := postAndLeave(t, e, body)
			expectLeftCleanly(t, e, &log, left, e.up.Open, 1)
		})
	}
}

// The same once the headers came: the stream is held back until its first
// output, which does not come.
func TestClientLeavingDuringTheHoldBackClosesTheUpstreamRequest(t *testing.T) {
	t.Parallel()
	var log syncBuffer
	e := newEnvLogged(t, twoAPIKeys(), &log)
	e.up.Set("bad", upstreamtest.Behavior{StallAfter: 1}) // response.created, then silence
	favor(e, 1)
	left := postAndLeave(t, e, streamBody)
	expectLeftCleanly(t, e, &log, left, e.up.Open, 1)
}

// A socket's request that went up over HTTP: the client closes its socket,
// abruptly or with a close frame (then waiting for rotor's), while the
// upstream says nothing.
func TestSocketClientLeavingBeforeAnyHeaderClosesTheUpstreamRequest(t *testing.T) {
	t.Parallel()
	for name, leave := range map[string]func(c *websocket.Conn){
		"connection closed": func(c *websocket.Conn) { c.Close() },
		"close frame": func(c *websocket.Conn) {
			msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye")
			if err := c.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second)); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var log syncBuffer
			e := newEnvLogged(t, twoAPIKeys(), &log)
			overHTTP(e, nil)
			favor(e, 1)
			c := e.openSocket() // the endpoint refuses sockets: remembered, requests go over HTTP
			e.up.Set("bad", upstreamtest.Behavior{NoWebSocket: true, HangHeaders: true})
			favor(e, 1)
			if err := c.WriteMessage(websocket.TextMessage, []byte(createFrame)); err != nil {
				t.Fatal(err)
			}
			waitOpen(t, e, 1)
			leave(c)
			expectLeftCleanly(t, e, &log, time.Now(), e.up.Open, 2) // the handshake, then the request
		})
	}
}

// favor makes account i the selector's choice by far: every other account
// was just used and has used 80% of its quota, i none of its own. e.prefer
// alone is a near tie once i itself was picked (a socket's handshake
// picks an account). i's quota is set too: an account whose state was
// never touched counts as having no quota left in the score.
func favor(e *env, i int) {
	e.prefer(i)
	for j := 1; j <= len(e.pool.Accounts); j++ {
		used := 80.0
		if j == i {
			used = 0
		}
		e.sel.Runtime().SetQuota(e.id(j), rotation.Quota{
			Primary: &rotation.Window{UsedPercent: used, ResetsAt: time.Now().Add(time.Hour)}})
	}
}

// A socket's request that went up on the account's own upstream socket:
// the client leaves while the upstream holds back the answer's first
// output, or while a new upstream socket's handshake (the old one expired)
// gets no answer.
func TestSocketClientLeavingClosesTheUpstreamSocket(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		then upstreamtest.Behavior
		sent int // to "bad": handshakes and frames
		open func(e *env) int
	}{
		{"hold-back", upstreamtest.Behavior{StallAfter: 1}, 2, func(e *env) int { return e.up.Sockets() }},
		{"handshake of a new socket", upstreamtest.Behavior{HangHeaders: true, SocketLifetime: time.Nanosecond}, 3,
			func(e *env) int { return e.up.Open() + e.up.Sockets() }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var log syncBuffer
			e := newEnvLogged(t, twoAPIKeys(), &log)
			favor(e, 1)
			ws := e.openSocket() // and its upstream socket, to "bad"
			if e.up.Sockets() != 1 {
				t.Fatalf("%d upstream sockets, want 1", e.up.Sockets())
			}
			e.up.Set("bad", c.then)
			favor(e, 1)
			if err := ws.WriteMessage(websocket.TextMessage, []byte(createFrame)); err != nil {
				t.Fatal(err)
			}
			eventually(t, 5*time.Second, "the fake to hold the request", func() bool { return e.up.Count("bad") == c.sent })
			ws.Close()
			expectLeftCleanly(t, e, &log, time.Now(), func() int { return c.open(e) }, c.sent)
		})
	}
}

// A client that stays is served as ever while watched: its keep-alive
// connection takes its next request, its socket its next turn, and no
// watching goroutine is left behind (not parallel: it counts goroutines).
func TestWatchedClientsThatStayAreServed(t *testing.T) {
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	ws := e.openSocket()
	// A socket's turn is watched when its first output comes two
	// EventDelays in, after upstream.WatchAfter; the next turn is quick.
	turnDone := func(delay time.Duration) {
		e.up.Set("k1", upstreamtest.Behavior{EventDelay: delay})
		if got := types(turn(t, ws, createFrame)); got[len(got)-1] != "response.completed" {
			t.Fatalf("turn: %v", got)
		}
	}
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	var conns []string
	// An HTTP request is watched when its headers come after upstream.WatchAfter.
	post := func() {
		e.up.Set("k1", upstreamtest.Behavior{HeaderDelay: 2 * upstream.WatchAfter})
		req, _ := http.NewRequest("POST", e.base+"/v1/responses", strings.NewReader(`{"model":"gpt-5","stream":false,"input":"hi"}`))
		req.Header.Set("Authorization", "Bearer "+testKey)
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { conns = append(conns, i.Conn.LocalAddr().String()) }}
		resp, err := client.Do(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
		if err != nil {
			t.Fatal(err)
		}
		if body := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(body, "Hello from the fake upstream.") {
			t.Fatalf("status %d: %.200s", resp.StatusCode, body)
		}
	}
	post() // the first: its connections and their goroutines stay, pooled
	before := runtime.NumGoroutine()
	post()
	turnDone(upstream.WatchAfter * 3 / 4)
	post()
	turnDone(0)
	if len(conns) != 3 || conns[0] != conns[1] || conns[1] != conns[2] {
		t.Errorf("the requests went on connections %v, want one kept alive", conns)
	}
	client.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before the watched requests:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
