package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// armedUsage is a UsageSink that stands for a bug in a request's finish
// once armed: the next record panics, once.
type armedUsage struct {
	sink  UsageSink
	armed atomic.Bool
}

func (a *armedUsage) Append(rec usage.Record) {
	if a.armed.CompareAndSwap(true, false) {
		panic("boom in finish")
	}
	a.sink.Append(rec)
}

// A bug met in the relay that ends an answer runs after the handler
// returned, outside its recover: fasthttp closes the relay once the answer
// is written, or when it resets the response. It is logged once with the
// request id, the client has its whole answer, and serve goes on.
func TestRelayPanicLeavesServeRunning(t *testing.T) {
	t.Parallel()
	bug := &armedUsage{}
	var log syncBuffer
	e := newEnvWith(t, []acct{{accounts.KindAPIKey, "k1"}}, peerConfig{seed: 1, log: &log,
		usage: func(u UsageSink) UsageSink { bug.sink = u; return bug }})
	for _, body := range []string{
		`{"model":"gpt-5","input":"hi","stream":false}`, // an answer of known length
		`{"model":"gpt-5","input":"hi","stream":true}`,  // a streamed one
	} {
		bug.armed.Store(true)
		resp := e.do("POST", "/v1/responses", body)
		got := readAll(t, resp)
		if resp.StatusCode != 200 || !strings.Contains(got, "Hello") {
			t.Fatalf("%s: %d %q, want the whole answer", body, resp.StatusCode, got)
		}
		id := resp.Header.Get("x-request-id")
		eventually(t, 5*time.Second, "the panic logged with "+id, func() bool {
			return strings.Contains(log.String(), `"request_id":"`+id+`","panic":"boom in finish"`)
		})
	}
	resp := e.do("POST", "/v1/responses", `{"model":"gpt-5","input":"again","stream":false}`)
	if got := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("after the panics: %d %q, want serve to go on", resp.StatusCode, got)
	}
	if n := strings.Count(log.String(), `"panic":"boom in finish"`); n != 2 {
		t.Errorf("the panics are logged %d times, want once each (2):\n%s", n, log.String())
	}
}

// observeBug is a clock that stands for a bug in a relay's read once
// armed: the next time the relay asks it the time while it reads an
// answer (observe, at the first byte), it panics, once.
type observeBug struct {
	clock.System
	armed atomic.Bool
}

func (c *observeBug) Now() time.Time {
	if c.armed.Load() {
		pc := make([]uintptr, 8)
		frames := runtime.CallersFrames(pc[:runtime.Callers(2, pc)])
		for f, more := frames.Next(); more; f, more = frames.Next() {
			if strings.HasSuffix(f.Function, "(*relay).observe") && c.armed.CompareAndSwap(true, false) {
				panic("boom in read")
			}
		}
	}
	return c.System.Now()
}

// A bug met while the relay reads an answer (after the handler returned)
// cuts that answer, so the client sees it broken rather than complete;
// it is logged once with the request id, charged to no account, and
// serve goes on. Over HTTP/1.0, where the relay runs on a goroutine of
// its own, it would otherwise end the process.
func TestRelayReadPanicCutsOnlyThatAnswer(t *testing.T) {
	t.Parallel()
	bug := &observeBug{}
	var log syncBuffer
	e := newEnvWith(t, []acct{{accounts.KindAPIKey, "k1"}}, peerConfig{seed: 1, log: &log, clock: bug})
	const body = `{"model":"gpt-5","input":"hi","stream":true}`

	// HTTP/1.1: the client sees the connection end before the answer's
	// end (here before its headers: the bug is met at the first byte).
	bug.armed.Store(true)
	req, _ := http.NewRequest("POST", e.base+"/v1/responses", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil || strings.Contains(string(got), "response.completed") {
			t.Errorf("HTTP/1.1: read %q, %v; want the answer cut", got, err)
		}
	}
	eventually(t, 5*time.Second, "the panic logged with a request id", func() bool {
		return strings.Contains(log.String(), `","panic":"boom in read"`) &&
			strings.Contains(log.String(), `"request_id":"rotor_`)
	})

	// HTTP/1.0: the answer runs until the connection closes.
	bug.armed.Store(true)
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/responses HTTP/1.0\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		strings.TrimPrefix(e.base, "http://"), testKey, len(body), body)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	raw, _ := io.ReadAll(conn)
	if !strings.HasPrefix(string(raw), "HTTP/1.1 200") || strings.Contains(string(raw), "response.completed") {
		t.Errorf("HTTP/1.0: read %.200q; want a 200 cut short", raw)
	}
	eventually(t, 5*time.Second, "the HTTP/1.0 panic logged", func() bool {
		return strings.Count(log.String(), `"panic":"boom in read"`) == 2
	})

	resp := e.do("POST", "/v1/responses", body)
	if got := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(got, "response.completed") {
		t.Fatalf("after the panics: %d %q, want serve to go on", resp.StatusCode, got)
	}
	if n := strings.Count(log.String(), `"panic":"boom in read"`); n != 2 {
		t.Errorf("the panics are logged %d times, want once each (2):\n%s", n, log.String())
	}
	for _, st := range e.sel.Status() {
		if st.State != "available" {
			t.Errorf("account %d is %s after rotor's own bug, want available", st.Index, st.State)
		}
	}
}
