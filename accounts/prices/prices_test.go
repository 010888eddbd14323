package prices

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	rerr "github.com/rotorproxy/rotor/errors"
)

// The arithmetic on exact figures: input the cache did not serve at the
// input price, cached input at the cached price, output at the output
// price, per 1M tokens; the cache's saving is the cached tokens at the
// difference.
func TestCostOnExactFigures(t *testing.T) {
	_, p, ok := Shipped().Lookup("gpt-5")
	if !ok || p != (Price{Input: 1.25, Cached: 0.125, Output: 10}) {
		t.Fatalf("gpt-5: %v %+v", ok, p)
	}
	for _, c := range []struct {
		name                  string
		input, cached, output int64
		cost, saved           USD
	}{
		// 600k fresh × 1.25 + 400k cached × 0.125 + 200k out × 10.
		{"a million in, 40% cached", 1_000_000, 400_000, 200_000, 2.8, 0.45},
		// hello.sse's usage: 256 × 1.25 + 1024 × 0.125 + 9 × 10 = 538 µ$.
		{"the fake upstream's answer", 1280, 1024, 9, 0.000538, 0.001152},
		{"input only", 1_000_000, 0, 0, 1.25, 0},
		{"all cached", 1_000_000, 1_000_000, 0, 0.125, 1.125},
		{"output only", 0, 0, 1_000_000, 10, 0},
		{"nothing", 0, 0, 0, 0, 0},
		{"more cached than input: all of it cached", 1000, 5000, 0, 0.000125, 0.001125},
	} {
		if got := p.Cost(c.input, c.cached, c.output); got != c.cost {
			t.Errorf("%s: cost %v, want %v", c.name, got, c.cost)
		}
		var s Sum
		Shipped().Add(&s, accounts.KindAPIKey, "gpt-5", c.input, c.cached, c.output)
		if s.Cost != c.cost || s.Saved != c.saved {
			t.Errorf("%s: sum cost %v saved %v, want %v and %v", c.name, s.Cost, s.Saved, c.cost, c.saved)
		}
	}
	// The cached discount: the same million input tokens cost exactly the
	// saving less when the cache served them.
	if d := p.Cost(1_000_000, 0, 0) - p.Cost(1_000_000, 1_000_000, 0); d != p.Saved(1_000_000) || d != 1.125 {
		t.Errorf("discount %v, saved %v", d, p.Saved(1_000_000))
	}
	// Prices that are no binary fraction: within a billionth of a cent.
	_, nano, _ := Shipped().Lookup("gpt-5-nano")
	if got := nano.Cost(3_000_000, 1_000_000, 500_000); math.Abs(float64(got)-(2*0.05+0.005+0.5*0.40)) > 1e-11 {
		t.Errorf("gpt-5-nano: %v, want 0.305", got)
	}
}

// The shipped table holds the list prices the README quotes, of its date.
func TestShippedTable(t *testing.T) {
	want := map[string]Price{
		"gpt-5": {1.25, 0.125, 10}, "gpt-5-codex": {1.25, 0.125, 10}, "gpt-5.1": {1.25, 0.125, 10}, "gpt-5.1-codex": {1.25, 0.125, 10},
		"gpt-5-mini": {0.25, 0.025, 2}, "gpt-5.1-codex-mini": {0.25, 0.025, 2}, "gpt-5-nano": {0.05, 0.005, 0.40},
		"gpt-4.1": {2, 0.50, 8}, "gpt-4.1-mini": {0.40, 0.10, 1.60}, "gpt-4o": {2.50, 1.25, 10}, "gpt-4o-mini": {0.15, 0.075, 0.60},
		"o3": {2, 0.50, 8}, "o4-mini": {1.10, 0.275, 4.40},
	}
	for m, w := range want {
		if name, p, ok := Shipped().Lookup(m); !ok || name != m || p != w {
			t.Errorf("%s: %v %q %+v, want %+v", m, ok, name, p, w)
		}
	}
	if a := Shipped().About(); a.Date != "2025-11-20" || a.File != "" || !strings.Contains(a.String(), "2025-11-20") {
		t.Errorf("about: %+v", a)
	}
	var none *Table
	if none.About().Date != "2025-11-20" || len(none.Models()) != len(Shipped().Models()) {
		t.Error("a nil table must be the shipped one")
	}
}

// A dated snapshot takes its base model's price; a model the table does
// not know is unpriced: counted in tokens, in no amount, never as 0 USD.
func TestLookupAndUnpriced(t *testing.T) {
	tab := Shipped()
	for _, c := range []struct {
		model, name string
		ok          bool
	}{
		{"gpt-5-2025-08-07", "gpt-5", true},
		{"gpt-4o-mini-2024-07-18", "gpt-4o-mini", true},
		{"o3-2025-04-16", "o3", true},
		{"gpt-5-codex", "gpt-5-codex", true},
		{"gpt-6", "", false},
		{"gpt-5-2025-08", "", false},
		{"mystery-2025-08-07", "", false},
		{"", "", false},
	} {
		if name, _, ok := tab.Lookup(c.model); name != c.name || ok != c.ok {
			t.Errorf("Lookup(%q) = %q %v, want %q %v", c.model, name, ok, c.name, c.ok)
		}
	}
	var s Sum
	tab.Add(&s, accounts.KindAPIKey, "gpt-5-2025-08-07", 1_000_000, 0, 0)
	tab.Add(&s, accounts.KindChatGPT, "gpt-5-mini", 1_000_000, 0, 1_000_000)
	tab.Add(&s, "", "o3", 0, 0, 1_000_000)
	tab.Add(&s, accounts.KindAPIKey, "mystery", 700, 600, 50)
	tab.Add(&s, accounts.KindChatGPT, "mystery", 100, 0, 0)
	tab.Add(&s, accounts.KindChatGPT, "other", 0, 0, 0)
	if s.Cost != 1.25 || s.Value != 2.25 || s.Unknown != 8 || s.Saved != 0 {
		t.Errorf("sum %+v", s)
	}
	if len(s.Unpriced) != 1 || s.Unpriced["mystery"] != 850 || s.UnpricedTokens() != 850 {
		t.Errorf("unpriced %v", s.Unpriced)
	}
	var total Sum
	total.Merge(&s)
	total.Merge(&s)
	if total.Cost != 2.5 || total.Unpriced["mystery"] != 1700 || !slices.Equal(total.UnpricedModels(), []string{"mystery"}) {
		t.Errorf("merged %+v", total)
	}
	b, _ := json.Marshal(Sum{Cost: 0.1 + 0.2, Value: 0.0000538 * 3, Saved: 1234567.891234})
	if string(b) != `{"cost_usd":0.3,"value_usd":0.0001614,"unknown_kind_usd":0,"saved_usd":1234567.89123,"unpriced_tokens":{}}` {
		t.Errorf("JSON %s", b)
	}
}

// writePrices writes prices.json in dir, 0600 like every file of the home.
func writePrices(t *testing.T, dir, content string) string {
	t.Helper()
	path := filepath.Join(dir, "prices.json")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// prices.json replaces the prices of the models it names and adds the
// others; the shipped models it does not name keep theirs.
func TestLoadOverridesAndAdds(t *testing.T) {
	dir := t.TempDir()
	if tab, err := Load(dir); err != nil || tab != Shipped() {
		t.Fatalf("no prices.json: %v", err)
	}
	path := writePrices(t, dir, `{"version":1,"date":"2025-12-01","models":{
		"gpt-5":{"input":2,"cached_input":0.2,"output":20},
		"my-model":{"input":1,"cached_input":1,"output":0}}}`)
	tab, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		model string
		want  Price
	}{{"gpt-5", Price{2, 0.2, 20}}, {"gpt-5-2025-08-07", Price{2, 0.2, 20}}, {"my-model", Price{1, 1, 0}}, {"o3", Price{2, 0.5, 8}}} {
		if _, p, ok := tab.Lookup(c.model); !ok || p != c.want {
			t.Errorf("%s: %v %+v, want %+v", c.model, ok, p, c.want)
		}
	}
	a := tab.About()
	if a.Date != "2025-11-20" || a.File != path || a.FileDate != "2025-12-01" || !slices.Equal(a.FileModels, []string{"gpt-5", "my-model"}) ||
		a.String() != "OpenAI list prices of 2025-11-20 (shipped); 2 model(s) from "+path+" of 2025-12-01" {
		t.Errorf("about %+v: %s", a, a)
	}
	if _, p, _ := Shipped().Lookup("gpt-5"); p.Input != 1.25 {
		t.Error("an override changed the shipped table")
	}
	var s Sum
	tab.Add(&s, accounts.KindAPIKey, "gpt-5", 1_000_000, 500_000, 100_000)
	if s.Cost != 1+0.1+2 || s.Saved != 0.9 {
		t.Errorf("priced with the file: %+v", s)
	}
}

// A damaged prices.json is an error naming the file and what is wrong
// with it, and is never rewritten.
func TestLoadRefusesABadFileAndLeavesIt(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ content, why string }{
		{`{"version":1,"date":"2025-12-01","models":{"gpt-5":{"input":-1,"cached_input":0,"output":1}}}`, `model "gpt-5": "input" price -1 is negative`},
		{`{"version":1,"date":"2025-12-01","models":{"gpt-5":{"input":1,"cached_input":0,"output":-0.5}}}`, `"output" price -0.5 is negative`},
		{`{"version":1,"date":"2025-12-01","models":{"gpt-5":{"input":1,"cached_input":2,"output":1}}}`, "cached input (2) dearer than input (1)"},
		{`{"version":1,"date":"2025-12-01","models":{"gpt-5":{"input":1,"output":1}}}`, `no "cached_input" price`},
		{`{"version":1,"date":"2025-12-01","models":{"gpt-5":{"input":1,"cached":0.1,"output":1}}}`, `no "cached_input" price`},
		{`{"version":1,"date":"2025-12-01","models":{"gpt-5":{"input":2e6,"cached_input":0,"output":1}}}`, "above 1000000 USD"},
		{`{"version":1,"date":"2025-12-01","models":{"gpt 5":{"input":1,"cached_input":0,"output":1}}}`, "space or control character"},
		{`{"version":1,"date":"2025-12-01","models":{"":{"input":1,"cached_input":0,"output":1}}}`, "empty model name"},
		{`{"version":1,"models":{}}`, `date "" is not a day`},
		{`{"version":1,"date":"1 Dec 2025","models":{}}`, `date "1 Dec 2025" is not a day`},
		{`{"version":2,"date":"2025-12-01","models":{}}`, "unsupported version 2"},
		{`{"version":1,"date":"2025-12-01","models":{}} {}`, "invalid JSON"},
		{`{"version":1,"date":"2025-12-01","models":{"gpt-5":`, "invalid JSON"},
		{`{"version":1,"date":"2025-12-01","models":{"gpt-5":{"input":"1.25","cached_input":0,"output":1}}}`, "invalid JSON"},
	} {
		path := writePrices(t, dir, c.content)
		old := time.Now().Add(-time.Hour).Truncate(time.Second)
		os.Chtimes(path, old, old)
		tab, err := Load(dir)
		var re *rerr.Error
		if tab != nil || !errors.As(err, &re) || re.Code != rerr.CodeStorageUnreadable || re.Path != path ||
			!strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.why) || !strings.Contains(re.Hint, "left untouched") {
			t.Errorf("%s: %v, want an error naming %s and %q", c.content, err, path, c.why)
			continue
		}
		data, _ := os.ReadFile(path)
		fi, _ := os.Stat(path)
		if string(data) != c.content || !fi.ModTime().Equal(old) || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: the file was touched", c.content)
		}
	}
}

// An amount only unpriced usage went to is unpriced, null in JSON, never
// 0 (docs/cost.md): a script that sums cost_usd must not read a model without
// a price as free. Some priced usage makes it a figure again, the rest
// counted apart; an amount no usage went to is a true 0.
func TestUnpricedAmountIsNull(t *testing.T) {
	tab := Shipped()
	var s Sum
	tab.Add(&s, accounts.KindAPIKey, "mystery", 1000, 0, 100)
	b, _ := json.Marshal(s)
	if string(b) != `{"cost_usd":null,"value_usd":0,"unknown_kind_usd":0,"saved_usd":null,"unpriced_tokens":{"mystery":1100}}` {
		t.Errorf("unpriced only: %s", b)
	}
	if s.Priced(accounts.KindAPIKey) || !s.Priced(accounts.KindChatGPT) || s.SavedPriced() {
		t.Errorf("unpriced only: Priced %v %v, SavedPriced %v", s.Priced(accounts.KindAPIKey), s.Priced(accounts.KindChatGPT), s.SavedPriced())
	}
	var total Sum
	total.Merge(&s)
	tab.Add(&total, accounts.KindChatGPT, "gpt-5", 1_000_000, 0, 0)
	b, _ = json.Marshal(total)
	if string(b) != `{"cost_usd":null,"value_usd":1.25,"unknown_kind_usd":0,"saved_usd":0,"unpriced_tokens":{"mystery":1100}}` {
		t.Errorf("API key unpriced, ChatGPT priced: %s", b)
	}
	tab.Add(&total, accounts.KindAPIKey, "gpt-5", 1_000_000, 0, 0)
	if b, _ = json.Marshal(total); !strings.HasPrefix(string(b), `{"cost_usd":1.25,`) {
		t.Errorf("API key partly priced: %s", b)
	}

	// The dashboard adds usage as of unknown kind and then names the
	// account's kind: what is unpriced stays unpriced under its new name.
	var d Sum
	tab.Add(&d, "", "mystery", 10, 0, 0)
	d.As(accounts.KindChatGPT)
	if b, _ = json.Marshal(d); string(b) != `{"cost_usd":0,"value_usd":null,"unknown_kind_usd":0,"saved_usd":null,"unpriced_tokens":{"mystery":10}}` {
		t.Errorf("unknown kind as ChatGPT: %s", b)
	}
	var e Sum
	tab.Add(&e, "", "gpt-5", 1_000_000, 0, 0)
	e.As(accounts.KindAPIKey)
	if e.Cost != 1.25 || e.Unknown != 0 || !e.Priced(accounts.KindAPIKey) {
		t.Errorf("unknown kind as API key: %+v", e)
	}
}
