package proxy

import (
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/prices"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// /metrics prices what it counts (docs/cost.md): an API key's usage is cost,
// a ChatGPT account's is value at API prices, each under the model the
// table prices it as (a dated snapshot as its base model); cached input's
// saving beside; an unknown model's tokens counted apart, in no dollar
// amount and under no model label. The figures are the usage records'
// priced with the shipped table: hello.sse reports 1280 input tokens,
// 1024 of them cached, and 9 output, which at gpt-5's $1.25, $0.125 and
// $10 per 1M is 256×1.25 + 1024×0.125 + 9×10 = 538 µ$, and saves
// 1024×1.125 = 1152 µ$.
func TestMetricsCostAndValue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}, {accounts.KindChatGPT, "cg1"}})
	e.sel.SetProcessPin(e.id(1))
	readAll(t, e.do("POST", "/v1/responses", streamBody))
	readAll(t, e.do("POST", "/v1/responses", streamBody))
	readAll(t, e.do("POST", "/v1/responses", `{"model":"mystery-model","stream":true,"input":"hi"}`))
	e.sel.SetProcessPin(e.id(2))
	readAll(t, e.do("POST", "/v1/responses", `{"model":"gpt-5-2025-08-07","stream":true,"input":"hi"}`))

	var fams map[string]*dto.MetricFamily
	var raw string
	eventually(t, 5*time.Second, "4 requests counted", func() bool {
		fams, raw = e.scrape()
		return sample(fams, "rotor_requests_total") == 4
	})
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"rotor_cost_usd_total", []string{"account", "1", "model", "gpt-5", "kind", "cost"}, 2 * 0.000538},
		{"rotor_cost_usd_total", []string{"account", "2", "model", "gpt-5", "kind", "value"}, 0.000538},
		{"rotor_cost_usd_total", []string{"kind", "value"}, 0.000538},
		{"rotor_cache_saved_usd_total", []string{"account", "1", "model", "gpt-5"}, 2 * 0.001152},
		{"rotor_cache_saved_usd_total", []string{"account", "2", "model", "gpt-5"}, 0.001152},
		{"rotor_unpriced_tokens_total", []string{"account", "1", "kind", "cost"}, 1280 + 9},
		{"rotor_unpriced_tokens_total", nil, 1280 + 9},
	} {
		if got := sample(fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for _, name := range []string{"rotor_cost_usd_total", "rotor_cache_saved_usd_total", "rotor_unpriced_tokens_total"} {
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.Label {
				if l.GetName() == "model" && l.GetValue() != "gpt-5" {
					t.Errorf("%s has model label %q: only the table's names are labels", name, l.GetValue())
				}
			}
		}
	}
	for _, line := range strings.Split(raw, "\n") {
		money := strings.HasPrefix(line, "rotor_cost_usd_total") || strings.HasPrefix(line, "rotor_cache_saved_usd_total") ||
			strings.HasPrefix(line, "rotor_unpriced_tokens_total")
		if money && (strings.Contains(line, "mystery") || strings.Contains(line, "2025-08-07")) {
			t.Errorf("a money series names a model the table does not: %s", line)
		}
	}

	// The same figures from the usage records, priced by the table: the
	// metric counts what finish records.
	e.usage.Close()
	var want prices.Sum
	n, _ := usage.Read(e.store.Dir(), func(u usage.Record) {
		if u.Tokens != nil {
			k := e.pool.At(e.pool.IndexOf(u.AccountID)).Kind
			prices.Shipped().Add(&want, k, u.Model, u.Tokens.Input, u.Tokens.Cached, u.Tokens.Output)
		}
	})
	if n != 0 || float64(want.Cost) != sample(fams, "rotor_cost_usd_total", "kind", "cost") ||
		float64(want.Value) != sample(fams, "rotor_cost_usd_total", "kind", "value") ||
		float64(want.Unpriced["mystery-model"]) != sample(fams, "rotor_unpriced_tokens_total") {
		t.Errorf("the records price to %+v; the metrics say otherwise", want)
	}
}
