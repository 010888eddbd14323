package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts/hometest"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// rotor report prices the usage log (docs/cost.md), each record as its
// account's kind says: what the API key cost, what the ChatGPT account's
// usage was worth at API prices, what cached input saved, and the tokens
// of a model the table does not know, never priced as 0. prices.json
// changes the figures; a damaged one is named, the shipped prices stand
// in, and it is left as it was, by report and by fix.
func TestDiagReportPricesTheUsage(t *testing.T) {
	t.Parallel()
	h := newDiagHome(t)
	p := h.prep.Write(hometest.APIKey("work", "sk-1"), diagChatGPT("me", "cg-1", "at-1", "rt-1", time.Hour))
	log, err := usage.Open(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	work, me := p.Accounts[0].ID, p.Accounts[1].ID
	for _, u := range []usage.Record{
		// 600k fresh × $1.25 + 400k cached × $0.125 + 200k × $10 = $2.80; saved 400k × $1.125 = $0.45.
		{Time: now.Add(-10 * time.Minute), AccountID: work, Model: "gpt-5", Status: 200, Tokens: &usage.Tokens{Input: 1_000_000, Cached: 400_000, Output: 200_000}},
		// A dated snapshot at gpt-5's price: $0.125 + $0.0125 + $0.10 = $0.2375 of value; saved $0.1125.
		{Time: now.Add(-20 * time.Minute), AccountID: me, Model: "gpt-5-2025-08-07", Status: 200, Tokens: &usage.Tokens{Input: 200_000, Cached: 100_000, Output: 10_000}},
		{Time: now.Add(-30 * time.Minute), AccountID: me, Model: "mystery-model", Status: 200, Tokens: &usage.Tokens{Input: 5000, Output: 1000}},
		// gpt-5-mini: $0.25 + 100k × $2 = $0.45.
		{Time: now.Add(-5 * time.Hour), AccountID: work, Model: "gpt-5-mini", Status: 200, Tokens: &usage.Tokens{Input: 1_000_000, Output: 100_000}},
		// o3 on an account since removed: $8 of unknown kind.
		{Time: now.Add(-2 * 24 * time.Hour), AccountID: "acct_removed", Model: "o3", Status: 200, Tokens: &usage.Tokens{Output: 1_000_000}},
		{Time: now.Add(-3 * time.Minute), AccountID: work, Model: "gpt-5", Status: 502},
	} {
		log.Append(u)
	}
	log.Close()

	v := h.runJSON(0, "report", "--json")
	if diagField(t, v, "usage", "prices", "date") != "2025-11-20" || diagField(t, v, "usage", "prices", "error") != nil {
		t.Errorf("prices: %v", diagField(t, v, "usage", "prices"))
	}
	for _, c := range []struct {
		path []any
		want any
	}{
		{[]any{"1h", "total", "money", "cost_usd"}, 2.8},
		{[]any{"1h", "total", "money", "value_usd"}, 0.2375},
		{[]any{"1h", "total", "money", "saved_usd"}, 0.5625},
		{[]any{"1h", "total", "money", "unknown_kind_usd"}, 0.0},
		{[]any{"1h", "total", "money", "unpriced_tokens", "mystery-model"}, 6000.0},
		{[]any{"1h", "by_account", 0, "money", "cost_usd"}, 2.8},
		{[]any{"1h", "by_account", 1, "money", "value_usd"}, 0.2375},
		{[]any{"1h", "by_account", 1, "money", "cost_usd"}, 0.0},
		{[]any{"24h", "total", "money", "cost_usd"}, 3.25},
		{[]any{"7d", "total", "money", "cost_usd"}, 3.25},
		{[]any{"7d", "total", "money", "unknown_kind_usd"}, 8.0},
		{[]any{"7d", "total", "money", "saved_usd"}, 0.5625},
	} {
		if got := diagField(t, v, append([]any{"usage", "windows"}, c.path...)...); got != c.want {
			t.Errorf("%v = %v, want %v", c.path, got, c.want)
		}
	}
	for _, m := range diagField(t, v, "usage", "windows", "1h", "by_model").([]any) {
		mm := m.(map[string]any)
		if mm["model"] == "gpt-5-2025-08-07" && diagField(t, mm, "money", "value_usd") != 0.2375 {
			t.Errorf("1h by_model %v", mm)
		}
	}

	r := h.run("report")
	for _, want := range []string{"Prices:  OpenAI list prices of 2025-11-20 (shipped)", "COST (API KEYS)", "VALUE (CHATGPT)", "SAVED BY CACHE",
		"$2.80", "$0.2375", "$0.5625", "$3.25", "6000", "unpriced in 7d", "mystery-model 6000", "accounts no longer in the pool, 7d: $8.00", "$8.00 (kind unknown)", "$0.45\n",
		"$2.80 cost", "$0.2375 value", "AT API PRICES"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, r.stdout)
		}
	}

	// prices.json over the shipped prices: gpt-5 dearer, mystery-model priced.
	const override = `{"version":1,"date":"2025-12-01","models":{
  "gpt-5":{"input":2,"cached_input":0.2,"output":20},
  "mystery-model":{"input":1,"cached_input":0.5,"output":2}}}`
	path := h.path("prices.json")
	os.WriteFile(path, []byte(override), 0o600)
	v = h.runJSON(0, "report", "--json")
	hour := diagField(t, v, "usage", "windows", "1h", "total", "money").(map[string]any)
	// 600k × $2 + 400k × $0.2 + 200k × $20 = $5.28; value: $0.2 + $0.02 + $0.2, and 5000 × $1 + 1000 × $2.
	if hour["cost_usd"] != 5.28 || hour["value_usd"] != 0.427 || hour["saved_usd"] != 0.9 || len(hour["unpriced_tokens"].(map[string]any)) != 0 {
		t.Errorf("1h at prices.json's prices: %v", hour)
	}
	if diagField(t, v, "usage", "prices", "file") != path || diagField(t, v, "usage", "prices", "file_date") != "2025-12-01" {
		t.Errorf("prices: %v", diagField(t, v, "usage", "prices"))
	}
	if r := h.run("report"); !strings.Contains(r.stdout, "2 model(s) from "+path+" of 2025-12-01") || !strings.Contains(r.stdout, "$5.28") {
		t.Errorf("report with prices.json:\n%s", r.stdout)
	}

	// A damaged prices.json: named, the shipped prices stand in, untouched.
	const bad = `{"version":1,"date":"2025-12-01","models":{"gpt-5":{"input":1,"cached_input":2,"output":1}}}`
	os.WriteFile(path, []byte(bad), 0o600)
	v = h.runJSON(0, "report", "--json")
	if e, _ := diagField(t, v, "usage", "prices", "error").(string); !strings.Contains(e, path) || !strings.Contains(e, "dearer than input") ||
		diagField(t, v, "usage", "windows", "1h", "total", "money", "cost_usd") != 2.8 {
		t.Errorf("damaged prices.json: %v", diagField(t, v, "usage", "prices"))
	}
	if r := h.run("report"); !strings.Contains(r.stdout, "UNREADABLE: Cannot read "+path) || !strings.Contains(r.stdout, "$2.80") {
		t.Errorf("report with a damaged prices.json:\n%s", r.stdout)
	}
	h.run("fix")
	if data, _ := os.ReadFile(path); string(data) != bad {
		t.Errorf("prices.json was rewritten: %s", data)
	}
}

// A model the price table does not know is unpriced, never free (docs/cost.md): where only its usage went, the amount is null in `report --json`
// (per model, per account, in total) and "unpriced" in the text, not 0
// and $0; an amount no usage went to stays a true 0.
func TestDiagReportUnpricedIsNotFree(t *testing.T) {
	t.Parallel()
	h := newDiagHome(t)
	p := h.prep.Write(hometest.APIKey("work", "sk-1"), diagChatGPT("me", "cg-1", "at-1", "rt-1", time.Hour))
	log, err := usage.Open(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	work, me := p.Accounts[0].ID, p.Accounts[1].ID
	for _, u := range []usage.Record{
		// The last hour: the API key only on a model without a price.
		{Time: now.Add(-10 * time.Minute), AccountID: work, Model: "mystery-model", Status: 200, Tokens: &usage.Tokens{Input: 5000, Output: 1000}},
		// Earlier: gpt-5 on the ChatGPT account, $0.125 of value.
		{Time: now.Add(-5 * time.Hour), AccountID: me, Model: "gpt-5", Status: 200, Tokens: &usage.Tokens{Input: 100_000}},
	} {
		log.Append(u)
	}
	log.Close()

	v := h.runJSON(0, "report", "--json")
	hour := diagField(t, v, "usage", "windows", "1h").(map[string]any)
	for _, money := range []any{diagField(t, hour, "total", "money"), diagField(t, hour, "by_account", 0, "money"), diagField(t, hour, "by_model", 0, "money")} {
		m := money.(map[string]any)
		if m["cost_usd"] != nil || m["saved_usd"] != nil || m["value_usd"] != 0.0 || diagField(t, m, "unpriced_tokens", "mystery-model") != 6000.0 {
			t.Errorf("1h money of mystery-model on the API key: %v", m)
		}
	}
	day := diagField(t, v, "usage", "windows", "24h", "total", "money").(map[string]any)
	if day["cost_usd"] != nil || day["value_usd"] != 0.125 || day["saved_usd"] != 0.0 {
		t.Errorf("24h money: %v", day)
	}

	r := h.run("report")
	if !regexp.MustCompile(`(?m)^\s+1h\s+unpriced\s+\$0\s+unpriced\s+6000\s*$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^\s+24h\s+unpriced\s+\$0\.125\s+\$0\s+6000\s*$`).MatchString(r.stdout) {
		t.Errorf("report's money per window does not show the API key's cost as unpriced:\n%s", r.stdout)
	}
}
