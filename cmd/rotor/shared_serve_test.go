package main

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// Two real `rotor serve` processes on one ROTOR_HOME: a usage limit one of
// them meets is honored by the other within a second, and `rotor switch`
// run while traffic flows moves both of them within a second, with no
// request failing on the way.
func TestTwoServeProcessesShareStateAndPins(t *testing.T) {
	t.Parallel()
	up := upstreamtest.New("../../testdata")
	if err := up.Start(""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	up.Set("sk-1", upstreamtest.Behavior{Status: 429, ResetIn: time.Hour})

	h := newHome(t)
	h.setenv("ROTOR_OPENAI_BASE_URL", up.OpenAIBase())
	h.setenv("ROTOR_CLIENT_KEY", raceClientKey)
	for _, k := range []string{"sk-1", "sk-2", "sk-3"} {
		h.addKey(k[3:], k)
	}
	p := raceServe(t, rotorBin, h.env, "P")
	q := raceServe(t, rotorBin, h.env, "Q")
	mustServe := func(proc *raceProc) {
		t.Helper()
		if code, body, err := raceRequest(proc); err != nil || code != 200 || !raceHelloStream(body) {
			t.Fatalf("request through %s: %d %v %.200s", proc.name, code, err, body)
		}
	}

	// P meets account 1's limit (it fails over, the client never sees it).
	for i := 0; up.Count("sk-1") == 0; i++ {
		if i == 6 {
			t.Fatal("P never tried account 1")
		}
		mustServe(p)
	}
	learned := time.Now()
	time.Sleep(time.Until(learned.Add(time.Second)))
	for range 9 {
		mustServe(q)
	}
	if n := up.Count("sk-1"); n != 1 {
		t.Fatalf("account 1 was asked %d times; Q did not honor P's rate limit within 1s", n)
	}

	// Traffic through both while the pin moves.
	var stop atomic.Bool
	var failed atomic.Int32
	var wg sync.WaitGroup
	for _, proc := range []*raceProc{p, q} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if code, body, err := raceRequest(proc); err != nil || code != 200 || !raceHelloStream(body) {
					failed.Add(1)
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	h.ok("", "switch", "3")
	switched := time.Now()
	time.Sleep(time.Until(switched.Add(time.Second)))
	before2, before3 := up.Count("sk-2"), up.Count("sk-3")
	time.Sleep(500 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Errorf("%d requests failed while the pin moved", n)
	}
	if d := up.Count("sk-2") - before2; d != 0 {
		t.Errorf("account 2 served %d requests more than 1s after rotor switch 3", d)
	}
	if up.Count("sk-3") == before3 {
		t.Error("no traffic reached the pinned account")
	}

	// Unpinned: both rotate again (account 2 serves some).
	h.ok("", "unpin")
	time.Sleep(time.Second)
	before2 = up.Count("sk-2")
	for range 4 {
		mustServe(p)
		mustServe(q)
	}
	if up.Count("sk-2") == before2 {
		t.Error("after unpin, account 2 never served")
	}
	p.stop(t)
	q.stop(t)
}
