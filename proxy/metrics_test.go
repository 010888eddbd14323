package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/proxy/metrics"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// scrape reads /metrics with the client key and parses it with the
// Prometheus library's own parser; raw is the text as served.
func (e *env) scrape() (fams map[string]*dto.MetricFamily, raw string) {
	e.t.Helper()
	resp := e.do("GET", "/metrics", "")
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		e.t.Fatalf("GET /metrics: %d %v\n%s", resp.StatusCode, err, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		e.t.Errorf("Content-Type %q, want Prometheus text", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err = p.TextToMetricFamilies(strings.NewReader(string(b)))
	if err != nil {
		e.t.Fatalf("the exposition does not parse: %v\n%s", err, b)
	}
	return fams, string(b)
}

// sample sums the values of name's series whose labels include want
// (a histogram: its sample count).
func sample(fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var sum float64
	for _, m := range f.Metric {
		if !hasLabels(m, want) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}

// hasLabels reports whether m has every name=value pair of kv.
func hasLabels(m *dto.Metric, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		found := false
		for _, l := range m.Label {
			if l.GetName() == kv[i] && l.GetValue() == kv[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// The counters equal what the test sent: a failover, a 400 passed through
// and plain successes, with their tokens and both histograms' counts; the
// pool's gauges show the account the failover cooled down.
func TestMetricsCountTheRequestsSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoAPIKeys())
	e.up.Set("bad", upstreamtest.Behavior{Status: 500})
	e.prefer(1)
	readAll(t, e.do("POST", "/v1/responses", streamBody)) // bad 500, then good
	e.up.Set("good", upstreamtest.Behavior{Status: 400})
	expectError(t, e.do("POST", "/v1/responses", streamBody), 400, "unsupported_parameter")
	e.up.Set("good", upstreamtest.Behavior{})
	readAll(t, e.do("POST", "/v1/responses", streamBody))
	readAll(t, e.do("POST", "/v1/responses", `{"model":"gpt-5","stream":false,"input":"hi"}`))

	var fams map[string]*dto.MetricFamily
	eventually(t, 5*time.Second, "4 requests counted", func() bool {
		fams, _ = e.scrape()
		return sample(fams, "rotor_requests_total") == 4 && sample(fams, "rotor_requests_in_flight") == 0
	})
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"rotor_requests_total", []string{"account", "2", "model", "gpt-5", "status", "200", "code", ""}, 3},
		{"rotor_requests_total", []string{"account", "2", "status", "400", "code", "unsupported_parameter"}, 1},
		{"rotor_failovers_total", []string{"outcome", "server-error"}, 1},
		{"rotor_failovers_total", nil, 1},
		{"rotor_request_duration_seconds", nil, 4},
		{"rotor_ttfb_seconds", nil, 4}, // every request an upstream answered, the 400 it sent too
		{"rotor_tokens_total", []string{"account", "2", "model", "gpt-5", "type", "input"}, 3 * 1280},
		{"rotor_tokens_total", []string{"type", "cached"}, 3 * 1024},
		{"rotor_tokens_total", []string{"type", "output"}, 3 * 9},
		{"rotor_open_streams", nil, 0},
		{"rotor_open_websockets", nil, 0},
		{"rotor_account_state", []string{"account", "1", "state", "cooling-down:server-error"}, 1},
		{"rotor_account_state", []string{"account", "2", "state", "available"}, 1},
	} {
		if got := sample(fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// In-flight requests and open streams move while a slow stream is open,
// and fall back once it ends.
func TestMetricsGaugesFollowAnOpenStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	e.up.SetDefault(upstreamtest.Behavior{EventDelay: 100 * time.Millisecond})
	resp := e.do("POST", "/v1/responses", streamBody)
	buf := make([]byte, 1)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	fams, _ := e.scrape()
	if got := sample(fams, "rotor_requests_in_flight"); got != 1 {
		t.Errorf("in flight %v during the stream, want 1", got)
	}
	if got := sample(fams, "rotor_open_streams"); got != 1 {
		t.Errorf("open streams %v during the stream, want 1", got)
	}
	readAll(t, resp)
	eventually(t, 5*time.Second, "the gauges to fall back to 0", func() bool {
		fams, _ := e.scrape()
		return sample(fams, "rotor_requests_in_flight") == 0 && sample(fams, "rotor_open_streams") == 0 &&
			sample(fams, "rotor_requests_total", "status", "200") == 1
	})
}

// No label holds what a client sends per request: 200 requests with
// distinct ids, cache keys, sessions and models leave no trace of them,
// and the models collapse to "other" past the limit.
func TestMetricsLabelsStayBounded(t *testing.T) {
	t.Parallel()
	const secret = "sk-metrics-secret-0123456789"
	e := newEnv(t, []acct{{accounts.KindAPIKey, secret}})
	var ids []string
	for i := range 200 {
		body := fmt.Sprintf(`{"model":"model-%d","stream":false,"input":"hi","prompt_cache_key":"pck-%d"}`, i, i)
		resp := e.do("POST", "/v1/responses", body, "x-client-request-id", fmt.Sprintf("cid-%d", i),
			"session_id", fmt.Sprintf("sess-%d", i))
		readAll(t, resp)
		ids = append(ids, resp.Header.Get("x-request-id"))
	}
	var fams map[string]*dto.MetricFamily
	var raw string
	eventually(t, 5*time.Second, "200 requests counted", func() bool {
		fams, raw = e.scrape()
		return sample(fams, "rotor_requests_total") == 200
	})
	for _, leak := range append([]string{"pck-", "cid-", "sess-", secret, testKey}, ids...) {
		if strings.Contains(raw, leak) {
			t.Errorf("the exposition holds %q", leak)
		}
	}
	models := map[string]bool{}
	for _, m := range fams["rotor_requests_total"].Metric {
		for _, l := range m.Label {
			if l.GetName() == "model" {
				models[l.GetValue()] = true
			}
		}
	}
	if len(models) != metrics.MaxLabelValues+1 || !models[metrics.Other] {
		t.Errorf("%d model label values (other: %v), want %d and other", len(models), models[metrics.Other], metrics.MaxLabelValues+1)
	}
	if got := sample(fams, "rotor_requests_total", "model", metrics.Other); got != 200-metrics.MaxLabelValues {
		t.Errorf("other: %v requests, want %d", got, 200-metrics.MaxLabelValues)
	}
}

// /metrics takes the client key like every route: without it, 401.
func TestMetricsNeedTheClientKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	resp, err := testClient.Get(e.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	expectError(t, resp, 401, "runtime_rotation_proxy_unauthorized")
	req, _ := http.NewRequest("GET", e.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Origin", "http://evil.example")
	resp, err = testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	expectError(t, resp, 403, "runtime_rotation_proxy_forbidden_host")
}

// A model named with bytes that are not UTF-8 (the body is forwarded as
// sent) is counted, and the exposition still parses: its label value
// carries U+FFFD where the bad byte was.
func TestMetricsModelNotUTF8(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "sk-metrics-utf8-0123456789"}})
	resp := e.do("POST", "/v1/responses", "{\"model\":\"gpt-5\xff\",\"stream\":false,\"input\":\"hi\"}")
	readAll(t, resp)
	eventually(t, 5*time.Second, "the request counted", func() bool {
		fams, _ := e.scrape() // fails the test if the exposition does not parse
		return sample(fams, "rotor_requests_total", "model", "gpt-5\uFFFD") == 1
	})
}

// /metrics carries the whole meter (docs/selection.md): every limit family's
// windows under a limit label, each account's credit balance, and the
// requests served on credits, as the upstream counted them.
func TestMetricsShowTheMeter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "A"}, {accounts.KindChatGPT, "B"}})
	e.up.Set("A", upstreamtest.Behavior{Meter: &upstreamtest.Meter{Families: []upstreamtest.Family{mainFamily(100)},
		Credits: &upstreamtest.Credits{Balance: 12.5}, Cost: 0.5}})
	e.up.Set("B", upstreamtest.Behavior{Meter: &upstreamtest.Meter{Families: []upstreamtest.Family{mainFamily(97), sonicFamily(40)}, Step: 1}})
	var ur usageReader
	e.pass(&ur)
	// B's included quota first; once it is spent, A's credits.
	for range 6 {
		e.served("gpt-5-codex")
	}
	a := e.up.Metered("cg-A")
	if a.OnCredits == 0 {
		t.Fatal("A never served on credits: nothing to count")
	}
	var fams map[string]*dto.MetricFamily
	var raw string
	eventually(t, 5*time.Second, "6 requests counted", func() bool {
		fams, raw = e.scrape()
		return sample(fams, "rotor_requests_total") == 6
	})
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"rotor_credits_requests_total", []string{"account", "1"}, float64(a.OnCredits)},
		{"rotor_credits_requests_total", []string{"account", "2"}, 0},
		{"rotor_account_quota_used_ratio", []string{"account", "1", "limit", "codex", "window", "primary"}, 1},
		{"rotor_account_quota_used_ratio", []string{"account", "2", "limit", "codex", "window", "primary"}, 1},
		{"rotor_account_quota_used_ratio", []string{"account", "2", "limit", "codex_bengalfox", "window", "primary"}, 0.4},
		{"rotor_account_on_credits", []string{"account", "1"}, 1},
	} {
		if got := sample(fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// The balance the last answer reported: spent below 12.5, at most one
	// request's cost behind the upstream's own count (headers go first).
	if got := sample(fams, "rotor_credits_balance", "account", "1"); got >= 12.5 || got < a.Credits.Balance || fams["rotor_credits_balance"] == nil {
		t.Errorf("rotor_credits_balance{account=1} = %v, want the spent balance (upstream: %v)", got, a.Credits.Balance)
	}
	if f := fams["rotor_account_quota_resets_at_seconds"]; f == nil || len(f.Metric) != 3 {
		t.Errorf("resets_at: one sample per window of every family, want 3:\n%s", raw)
	}
	// B reported no credits: no balance, never a zero made up.
	if strings.Contains(raw, `rotor_credits_balance{account="2"`) {
		t.Errorf("a balance for account 2, which told none:\n%s", raw)
	}
}
