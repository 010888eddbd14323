package dashboard

import (
	"testing"
	"time"

	"github.com/rotorproxy/rotor/rotation/usage"
)

// records is a usage log that hands out its records once, as usage.Tail
// does with what the log gained.
type records struct{ recs []usage.Record }

func (r *records) Read(reset func(), add func(usage.Record)) error {
	for _, rec := range r.recs {
		add(rec)
	}
	r.recs = nil
	return nil
}

// The page's cache hit rate is cached ÷ input tokens of the account's
// records in each window, and none where nothing was sent (SPEC §12).
func TestUsageViewCacheHitRate(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 30, 0, 0, time.UTC)
	rec := func(ago time.Duration, id string, input, cached int64) usage.Record {
		return usage.Record{Time: now.Add(-ago), AccountID: id, Status: 200,
			Tokens: &usage.Tokens{Input: input, Cached: cached, Total: input}}
	}
	log := &records{recs: []usage.Record{
		rec(10*time.Minute, "a", 1000, 900), // 1 h, 24 h, 7 d
		rec(50*time.Minute, "a", 1000, 500), // 1 h, 24 h, 7 d
		rec(5*time.Hour, "a", 2000, 0),      // 24 h, 7 d
		rec(3*24*time.Hour, "a", 4000, 4000),
		rec(2*time.Hour, "b", 0, 0), // no input: no rate
	}}
	v := NewUsage(log, time.Second).View(now, map[string]int{"a": 1, "b": 2})
	if len(v.Accounts) != 2 {
		t.Fatalf("accounts %+v", v.Accounts)
	}
	a, b := v.Accounts[0].CacheHit, v.Accounts[1].CacheHit
	for _, c := range []struct {
		name string
		got  *float64
		want float64
	}{{"1h", a.Hour, 1400.0 / 2000}, {"24h", a.Day, 1400.0 / 4000}, {"7d", a.Week, 5400.0 / 8000}} {
		if c.got == nil || *c.got != c.want {
			t.Errorf("account a, %s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if b.Hour != nil || b.Day != nil || b.Week != nil {
		t.Errorf("account b sent no input, yet has rates %+v", b)
	}
}
