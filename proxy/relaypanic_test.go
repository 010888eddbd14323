package proxy

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
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
