package dashboard

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/rotation"
)

// armedPool is an empty pool that stands for a bug in a snapshot once
// armed: the next look at its accounts panics, once.
type armedPool struct{ armed atomic.Bool }

func (p *armedPool) Status() []rotation.AccountStatus {
	if p.armed.CompareAndSwap(true, false) {
		panic("boom in snapshot")
	}
	return nil
}
func (p *armedPool) Pool() *accounts.Pool          { return &accounts.Pool{} }
func (p *armedPool) Next() (index int, why string) { return 0, "" }

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// fasthttp writes a page's live stream on a goroutine of its own, with no
// recover: a bug met in a snapshot there ends that page's stream (the
// page reconnects), is logged once, and the serve goes on, its other
// pages answered.
func TestStreamPanicEndsOnlyThatStream(t *testing.T) {
	t.Parallel()
	pool := &armedPool{}
	var log lockedBuffer
	d := New(Config{ClientKey: key, Pool: pool, Usage: NewUsage(&records{}, time.Second, nil),
		Log: zerolog.New(&log), Tick: 20 * time.Millisecond})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: d.ServePage}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	get := func(path string) (*http.Response, error) {
		req, _ := http.NewRequest("GET", "http://127.0.0.1:"+port+path, nil)
		req.Header.Set("Cookie", "rotor_dashboard_"+port+"="+mint(key, purposeSession, time.Now().Add(time.Hour)))
		return (&http.Client{Timeout: 10 * time.Second}).Do(req)
	}

	ev, err := get("/dashboard/events")
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Body.Close()
	r := bufio.NewReader(ev.Body)
	if first, err := r.ReadString('\n'); !strings.HasPrefix(first, "data: {") {
		t.Fatalf("the stream's first line %q, %v", first, err)
	}
	pool.armed.Store(true)
	ended := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, r); ended <- err }()
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("the stream ended with %v, want its end", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream goes on 5 s after the bug")
	}
	if n := strings.Count(log.String(), `"panic":"boom in snapshot"`); n != 1 {
		t.Errorf("the panic is logged %d times, want once:\n%s", n, log.String())
	}
	resp, err := get("/dashboard/state")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the bug: %v %v, want the page served", resp, err)
	}
	resp.Body.Close()
}
