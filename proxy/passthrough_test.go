package proxy

import (
	"bytes"
	"io"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// A backend call passes through with its target as the client sent it
// (docs/codex.md: "unchanged"), only /backend-api swapped for the account's
// base: the backend decodes it once, as it would have come direct. A
// target that names a . or .. segment however often it is decoded, or
// that is not under /backend-api/, could reach another of the backend's
// paths (its OpenAI API, its sign-in) as the account, and is refused.
func TestBackendCallsPassTheTargetAsSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "tok-one"}})
	send := func(method, target, body string) string {
		t.Helper()
		return e.rawRequest(method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer tok-one\r\n" +
			"Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body)
	}
	for _, target := range []string{
		"/backend-api/a%3Fb",
		"/backend-api/a%2Fb",
		"/backend-api/a%23b/c?d=%23e",
		"/backend-api/plugins/list?scope=user&v=2&",
		"/backend-api/files/x%252e%252ey/..z",
		"/backend-api/tasks//list",
	} {
		before := len(e.up.Requests())
		out := send("GET", target, "")
		if !strings.HasPrefix(out, "HTTP/1.1 404") || !strings.Contains(out, "Not Found") {
			t.Errorf("%s: the upstream's answer was not relayed: %.200s", target, out)
			continue
		}
		reqs := e.up.Requests()[before:]
		if want := target; len(reqs) != 1 || reqs[0].RawURI != want || reqs[0].Token != "tok-one" {
			t.Errorf("%s reached the backend as %+v, want exactly %s", target, reqs, want)
		}
	}
	for _, c := range []struct{ method, target string }{
		{"GET", "/backend-api/%252e%252e/%252e%252e/v1/models"},
		{"POST", "/backend-api/%252e%252e/oauth/token"},
		{"GET", "/backend-api/%25252e%25252E/v1/models"},
		{"GET", "/backend-api/x/%2e%2e/y"},
		{"GET", "/backend-api/%2e/plugins"},
		{"GET", "/backend-api/./plugins"},
		{"GET", "/backend-api/a%5c..%5cb"},
		{"GET", "/backend-api/..%252f..%252fv1/models"},
		{"GET", "/x/../backend-api/plugins"},
		{"GET", "/backend-api/../backend-api/plugins"},
	} {
		before := len(e.up.Requests())
		out := send(c.method, c.target, `{"grant_type":"refresh_token"}`)
		if !strings.HasPrefix(out, "HTTP/1.1 400") || !strings.Contains(out, rerr.ProxyBadRequest) {
			t.Errorf("%s %s: %.300s, want a 400 %s", c.method, c.target, out, rerr.ProxyBadRequest)
		}
		if reqs := e.up.Requests()[before:]; len(reqs) != 0 {
			t.Errorf("%s %s reached the backend as %s", c.method, c.target, reqs[0].RawURI)
		}
	}
}

// matchWriter compares what is written to it with want, as it comes, so
// a big answer is checked without being kept.
type matchWriter struct {
	want    io.Reader
	n       int64
	bad     int64 // where the first byte that differs is, -1 for none
	scratch []byte
}

func (m *matchWriter) Write(p []byte) (int, error) {
	if len(m.scratch) < len(p) {
		m.scratch = make([]byte, len(p))
	}
	k, _ := io.ReadFull(m.want, m.scratch[:len(p)])
	if m.bad < 0 && (k < len(p) || !bytes.Equal(p, m.scratch[:len(p)])) {
		m.bad = m.n
		for i := range min(k, len(p)) {
			if p[i] != m.scratch[i] {
				m.bad = m.n + int64(i)
				break
			}
		}
	}
	m.n += int64(len(p))
	return len(p), nil
}

// A backend answer many times --max-body streams through whole, in
// bounded memory, and a request body is bounded by --max-body as on
// every route. Not parallel: it measures the process's heap.
func TestBigBackendAnswersStreamWhole(t *testing.T) {
	const maxBody = 1 << 20
	const size = 24 * maxBody
	e := newEnv(t, []acct{{accounts.KindChatGPT, "tok-download"}}, func(c *Config) { c.MaxBody = maxBody })
	e.up.Set("tok-download", upstreamtest.Behavior{Download: size})
	readAll(t, e.doAs("tok-download", "GET", "/backend-api/plugins/list", "")) // warm the connections

	defer debug.SetGCPercent(debug.SetGCPercent(10)) // garbage is not what is measured
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	resp := e.doAs("tok-download", "GET", "/backend-api/files/big?part=1", "")
	m := &matchWriter{want: upstreamtest.Generated(size), bad: -1}
	_, err := io.Copy(m, resp.Body)
	resp.Body.Close()
	close(stop)
	<-stopped
	if resp.StatusCode != 200 || err != nil || m.n != size || m.bad >= 0 {
		t.Fatalf("status %d, %d of %d bytes, first wrong at %d, %v", resp.StatusCode, m.n, size, m.bad, err)
	}
	grew := int64(peak.Load()) - int64(base.HeapAlloc)
	t.Logf("the heap grew by at most %d KiB passing %d MiB through", grew>>10, size>>20)
	if grew > size/4 {
		t.Errorf("the heap grew by %d MiB passing %d MiB through", grew>>20, size>>20)
	}

	before := len(e.up.Requests())
	resp = e.doAs("tok-download", "POST", "/backend-api/files/upload", strings.Repeat("x", maxBody+1))
	if er := decodeError(t, resp); resp.StatusCode != 413 || er.Code != rerr.ProxyPayloadTooLarge {
		t.Errorf("a body over --max-body: %d %+v", resp.StatusCode, er)
	}
	if n := len(e.up.Requests()) - before; n != 0 {
		t.Errorf("a body over --max-body reached the backend (%d requests)", n)
	}
}
