package rotation

import (
	"errors"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts/clock/clocktest"
)

// An endpoint's fall and recovery reach another process through
// state.json, the newer observation winning, and the wait doubles with
// each failure in a row up to the cap.
func TestEndpointStateIsSharedAndBackedOff(t *testing.T) {
	dir := t.TempDir()
	clk := clocktest.Frozen(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	a, b := NewRuntime(dir, clk), NewRuntime(dir, clk)
	const ep = "https://chatgpt.com:443"
	refused := errors.New("dial tcp: connect: connection refused")

	var waits []time.Duration
	for range 7 {
		waits = append(waits, a.EndpointDown(ep, refused).Sub(clk.Now()))
	}
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30}
	for i := range want {
		if waits[i] != want[i]*time.Second {
			t.Fatalf("waits %v, want %v seconds", waits, want)
		}
	}
	if err := a.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(nil); err != nil {
		t.Fatal(err)
	}
	until, why := b.EndpointDownUntil(ep)
	if !until.Equal(clk.Now().Add(30*time.Second)) || why != refused.Error() || !b.AnyEndpointDown() {
		t.Fatalf("the other process sees %v %q", until, why)
	}

	clk.Advance(time.Second)
	a.EndpointUp(ep)
	if err := a.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if until, _ := b.EndpointDownUntil(ep); !until.IsZero() || b.AnyEndpointDown() {
		t.Errorf("the other process still sees the endpoint down until %v", until)
	}
	// A record of a recovery is dropped once it is old news.
	clk.Advance(endpointKeep + time.Minute)
	a.EndpointDown("https://other:443", refused)
	if err := a.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.eps[ep]; ok {
		t.Error("an old recovery record was kept")
	}
}
