package dashboard

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/prices"
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
// records in each window, and none where nothing was sent (docs/cost.md).
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
	v := NewUsage(log, time.Second, nil).View(now, map[string]int{"a": 1, "b": 2}, nil)
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

// The money card's figures (docs/cost.md): each window's records priced at
// the table's prices, an API key's as cost, a ChatGPT account's as value,
// a removed account's as of unknown kind; cached input's saving; an
// unknown model's tokens apart, in no amount.
func TestUsageViewMoney(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 30, 0, 0, time.UTC)
	rec := func(ago time.Duration, id, model string, input, cached, output int64) usage.Record {
		return usage.Record{Time: now.Add(-ago), AccountID: id, Model: model, Status: 200,
			Tokens: &usage.Tokens{Input: input, Cached: cached, Output: output, Total: input + output}}
	}
	recs := []usage.Record{
		// $0.75 + $0.05 + $2 = $2.80 of cost; saved $0.45.
		rec(10*time.Minute, "key", "gpt-5", 1_000_000, 400_000, 200_000),
		// gpt-5-mini, $0.25 + $0.20 = $0.45 of value.
		rec(3*time.Hour, "cg", "gpt-5-mini-2025-08-07", 1_000_000, 0, 100_000),
		rec(20*time.Minute, "cg", "mystery", 700, 0, 300),
		// o3 output: $8, two days back, on an account since removed.
		rec(2*24*time.Hour, "gone", "o3", 0, 0, 1_000_000),
		{Time: now.Add(-time.Minute), AccountID: "key", Model: "gpt-5", Status: 502},
	}
	kinds := map[string]accounts.Kind{"key": accounts.KindAPIKey, "cg": accounts.KindChatGPT}
	index := map[string]int{"key": 1, "cg": 2}
	m := NewUsage(&records{recs: recs}, time.Second, nil).View(now, index, kinds).Money
	for _, c := range []struct {
		name string
		got  prices.Sum
		want string
	}{
		// In the last hour the ChatGPT account served only the unknown
		// model: its value is unpriced (null), not $0.
		{"1h", m.Hour, `{"cost_usd":2.8,"value_usd":null,"unknown_kind_usd":0,"saved_usd":0.45,"unpriced_tokens":{"mystery":1000}}`},
		{"24h", m.Day, `{"cost_usd":2.8,"value_usd":0.45,"unknown_kind_usd":0,"saved_usd":0.45,"unpriced_tokens":{"mystery":1000}}`},
		{"7d", m.Week, `{"cost_usd":2.8,"value_usd":0.45,"unknown_kind_usd":8,"saved_usd":0.45,"unpriced_tokens":{"mystery":1000}}`},
	} {
		if got, _ := json.Marshal(c.got); string(got) != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	if m.Prices.Date != "2025-11-20" || m.Prices.File != "" {
		t.Errorf("prices %+v", m.Prices)
	}

	// The home's prices.json prices the same records otherwise.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "prices.json"), []byte(`{"version":1,"date":"2025-12-01","models":{
		"gpt-5":{"input":2,"cached_input":0.2,"output":20},"mystery":{"input":1,"cached_input":1,"output":1}}}`), 0o600)
	tab, err := prices.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	m = NewUsage(&records{recs: recs}, time.Second, tab).View(now, index, kinds).Money
	// 600k × $2 + 400k × $0.2 + 200k × $20 = $5.28; mystery: 1000 × $1 per 1M.
	if m.Hour.Cost != 5.28 || m.Hour.Value != 0.001 || m.Hour.Saved != 0.72 || len(m.Hour.Unpriced) != 0 || m.Prices.FileDate != "2025-12-01" {
		t.Errorf("at prices.json's prices: %+v", m)
	}
}

// The page counts, per account over 24 h, the requests served on credits
// and their tokens, and those that asked for Fast (docs/selection.md).
func TestUsageViewCreditsAndFast(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 30, 0, 0, time.UTC)
	tok := &usage.Tokens{Input: 100, Output: 10, Total: 110}
	log := &records{recs: []usage.Record{
		{Time: now.Add(-10 * time.Minute), AccountID: "a", Status: 200, Tokens: tok, Credits: true, Tier: usage.TierFast},
		{Time: now.Add(-2 * time.Hour), AccountID: "a", Status: 200, Tokens: tok, Credits: true},
		{Time: now.Add(-3 * time.Hour), AccountID: "a", Status: 200, Tokens: tok, Tier: usage.TierFlex},
		{Time: now.Add(-3 * 24 * time.Hour), AccountID: "a", Status: 200, Tokens: tok, Credits: true}, // past 24 h
		{Time: now.Add(-time.Hour), AccountID: "b", Status: 200, Tokens: tok, Tier: usage.TierFast},
	}}
	v := NewUsage(log, time.Second, nil).View(now, map[string]int{"a": 1, "b": 2}, nil)
	b, err := json.Marshal(v.Accounts)
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	json.Unmarshal(b, &got)
	if len(got) != 2 {
		t.Fatalf("accounts %s", b)
	}
	for i, want := range []map[string]float64{
		{"credits_requests_24h": 2, "credits_tokens_24h": 220, "fast_requests_24h": 1},
		{"credits_requests_24h": 0, "credits_tokens_24h": 0, "fast_requests_24h": 1},
	} {
		for k, w := range want {
			if got[i][k] != w {
				t.Errorf("account %d: %s = %v, want %v", i+1, k, got[i][k], w)
			}
		}
	}
}
