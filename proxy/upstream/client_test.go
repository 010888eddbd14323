package upstream

import (
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A burst of connects runs at most maxDialing at once; one past the bound
// waits for a slot, and one that waits longer than its bound fails as
// rotor's own congestion (ErrNoFreeConns).
func TestConnectsInFlightAreBounded(t *testing.T) {
	t.Parallel()
	var inFlight, most atomic.Int32
	gate := make(chan struct{})
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	t.Cleanup(release)
	blocked := func(string, string) (net.Conn, error) {
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-gate
		inFlight.Add(-1)
		a, b := net.Pipe()
		b.Close()
		return a, nil
	}
	short, long := newConnector(100*time.Millisecond), newConnector(10*time.Second)
	long.slots = short.slots // one bound, two ways of waiting on it

	results := make(chan error, maxDialing+1)
	dial := func(c *connector) {
		conn, err := c.dial(blocked, "upstream:443", nil)
		if conn != nil {
			conn.Close()
		}
		results <- err
	}
	for range maxDialing {
		go dial(long)
	}
	deadline := time.Now().Add(5 * time.Second)
	for inFlight.Load() < maxDialing && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := inFlight.Load(); n != maxDialing {
		t.Fatalf("%d connects in flight, want %d", n, maxDialing)
	}

	start := time.Now()
	errc := make(chan error, 1)
	go func() { _, err := short.dial(blocked, "upstream:443", nil); errc <- err }()
	var err error
	select {
	case err = <-errc:
	case <-time.After(5 * time.Second):
		t.Fatal("a connect past the bound neither waited nor failed: it ran")
	}
	if !errors.Is(err, ErrNoFreeConns) {
		t.Fatalf("a connect past the bound: %v, want ErrNoFreeConns", err)
	}
	if d := time.Since(start); d < 90*time.Millisecond {
		t.Errorf("gave up after %s: it did not wait for a slot", d)
	}
	// That it blames no endpoint is proxy's classifyTransport's to say
	// (TestOwnCongestionIsNobodysFault).

	go dial(long) // waits: every slot is taken
	time.Sleep(50 * time.Millisecond)
	if n := inFlight.Load(); n != maxDialing {
		t.Errorf("%d connects in flight past the bound", n)
	}
	release()
	for range maxDialing + 1 {
		select {
		case err := <-results:
			if err != nil {
				t.Errorf("connect: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a connect that waited for a slot never ran")
		}
	}
	if m := most.Load(); m > maxDialing {
		t.Errorf("%d connects ran at once, bound %d", m, maxDialing)
	}
}

// The connector dials on a goroutine nothing recovers: a bug met there is
// handed back as the dial's error, and the connect slot is given back.
func TestConnectorHandsBackADialPanic(t *testing.T) {
	t.Parallel()
	c := newConnector(time.Second)
	_, err := c.dial(func(string, string) (net.Conn, error) { panic("boom in dial") }, "upstream:443", nil)
	if p, ok := errors.AsType[*dialPanic](err); !ok || p.v != "boom in dial" || !strings.Contains(string(p.stack), "TestConnectorHandsBackADialPanic") {
		t.Fatalf("dial error %v, want the panic with the stack it was met on", err)
	}
	// The slot is given back by the dialing goroutine's last defer, which
	// may run after the error was handed back: wait for it, bounded.
	deadline := time.Now().Add(5 * time.Second)
	for len(c.slots) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("timed out after 5s waiting for the connect slot given back after the panic")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
