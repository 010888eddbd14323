package metrics

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// outcomes stand for the request path's failover table: index 1 moves a
// request on, index 0 (a success) does not.
var outcomes = []string{"", "server-error"}

// newSelector is a selector over one API-key account, "k1", at index 1.
func newSelector(tb testing.TB) *rotation.Selector {
	tb.Helper()
	pool := &accounts.Pool{Accounts: []accounts.Account{{ID: "acct-k1", Kind: accounts.KindAPIKey, Label: "k1", Enabled: true}}}
	sel, err := rotation.Open(tb.TempDir(), pool, clock.System{}, 1)
	if err != nil {
		tb.Fatal(err)
	}
	return sel
}

// What the end of a request pays to count it once its label set is
// known: atomic adds, no lock, no allocation.
func BenchmarkMetricsFinished(b *testing.B) {
	sel := newSelector(b)
	m := New(sel, func() int { return 0 }, outcomes)
	r := Request{AccountID: sel.Pool().At(1).ID, Index: 1, Model: "gpt-5", Status: 200,
		Tokens: &usage.Tokens{Input: 10, Cached: 5, Output: 2}, TTFB: time.Millisecond, Dur: time.Second,
		Answered: true, Counted: true}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Started()
			m.Finished(r)
			m.Failover(1) // a server error, then a success
			m.Failover(0)
		}
	})
}

// The first MaxLabelValues names keep their own label value, copied so no
// request's memory is held; every later one is Other, known ones still
// themselves.
func TestBoundedNames(t *testing.T) {
	b := boundedNames{limit: MaxLabelValues}
	for i := range MaxLabelValues {
		buf := []byte(fmt.Sprintf("model-%d", i))
		got := b.name(string(buf))
		buf[0] = 'X' // the request's memory goes back to its pool
		if want := fmt.Sprintf("model-%d", i); got != want {
			t.Fatalf("name %d = %q, want %q", i, got, want)
		}
	}
	if got := b.name("one-too-many"); got != Other {
		t.Errorf("past the limit: %q, want %q", got, Other)
	}
	if got := b.name("model-3"); got != "model-3" {
		t.Errorf("a known name past the limit: %q, want itself", got)
	}
}

// Only the outcomes that move a request on are written, each under its
// label; a success counts nowhere.
func TestFailoversByIndex(t *testing.T) {
	m := New(newSelector(t), func() int { return 2 }, outcomes)
	m.Failover(0)
	m.Failover(1)
	m.Failover(1)
	out := string(m.Registry().Append(nil))
	if !strings.Contains(out, "rotor_failovers_total{outcome=\"server-error\"} 2\n") {
		t.Errorf("no server-error count of 2:\n%s", out)
	}
	if strings.Contains(out, "rotor_failovers_total{outcome=\"\"}") {
		t.Errorf("a success counted as a failover:\n%s", out)
	}
	if !strings.Contains(out, "rotor_open_websockets 2\n") {
		t.Errorf("the sockets func not read:\n%s", out)
	}
}

// The money of an account counts under the meter its kind says; an
// account replaced at its index since is not priced.
func TestCostsCountUnderTheMeter(t *testing.T) {
	sel := newSelector(t)
	m := New(sel, func() int { return 0 }, outcomes)
	c := NewCosts(nil, sel, m.Registry(), func(accounts.Kind) string { return MeterValue })
	tok := &usage.Tokens{Input: 1280, Cached: 1024, Output: 9}
	c.Count("gpt-5", tok, nil, sel.Pool().At(1).ID, 1)
	c.Count("gpt-5", tok, nil, "replaced", 1)
	out := string(m.Registry().Append(nil))
	if !strings.Contains(out, `rotor_cost_usd_total{account="1",model="gpt-5",kind="value"} 0.000538`+"\n") {
		t.Errorf("want one request's value at gpt-5's prices:\n%s", out)
	}
}
