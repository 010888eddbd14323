package proxy

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/rotation"
)

// metricsPath is where the metrics are served; it takes the client key
// or a dashboard cookie (SPEC §12).
const metricsPath = "/metrics"

// answerMetrics writes the registry in Prometheus's text format. The
// registry is gathered and encoded straight into the fasthttp response:
// no net/http adaptor stands in any request's way.
func (s *Server) answerMetrics(ctx *fasthttp.RequestCtx) {
	mfs, err := s.metrics.reg.Gather()
	if err != nil {
		// Gather returns what it could: a scrape with a gap beats none.
		s.deps.Log.Warn().Err(err).Msg("metrics: gathering")
	}
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	ctx.SetContentType(string(format))
	enc := expfmt.NewEncoder(ctx, format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			s.deps.Log.Warn().Err(err).Msg("metrics: encoding")
			return
		}
	}
}

// poolCollector reads the pool at scrape time, never on a request's way:
// each account's state, health and quota windows, and the open sockets.
type poolCollector struct {
	sel     *rotation.Selector
	sockets *socketSet
}

var (
	descState = prometheus.NewDesc("rotor_account_state",
		"1 for the state each account is in now: available, rate-limited, cooling-down:<reason>, circuit-open, disabled or flagged.",
		[]string{"account", "label", "state"}, nil)
	descHealth = prometheus.NewDesc("rotor_account_health",
		"Each account's health, 0 to 100.", []string{"account", "label"}, nil)
	descQuotaUsed = prometheus.NewDesc("rotor_account_quota_used_ratio",
		"The share of each quota window used, as the upstream last reported it (0 to 1).",
		[]string{"account", "label", "window"}, nil)
	descQuotaReset = prometheus.NewDesc("rotor_account_quota_resets_at_seconds",
		"When each quota window resets, in Unix seconds.", []string{"account", "label", "window"}, nil)
	descSockets = prometheus.NewDesc("rotor_open_websockets",
		"Client WebSockets open now.", nil, nil)
)

// Describe is prometheus.Collector's.
func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descHealth, descQuotaUsed, descQuotaReset, descSockets} {
		ch <- d
	}
}

// Collect is prometheus.Collector's: the pool as Selector.Status shows it.
func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descSockets, prometheus.GaugeValue, float64(c.sockets.count()))
	for _, as := range c.sel.Status() {
		account, label := strconv.Itoa(as.Index), as.Account.Label
		ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, 1, account, label, as.State)
		ch <- prometheus.MustNewConstMetric(descHealth, prometheus.GaugeValue, float64(as.Health), account, label)
		if as.Quota == nil {
			continue
		}
		for _, w := range []struct {
			name string
			w    *rotation.Window
		}{{"primary", as.Quota.Primary}, {"secondary", as.Quota.Secondary}} {
			if w.w == nil {
				continue
			}
			ch <- prometheus.MustNewConstMetric(descQuotaUsed, prometheus.GaugeValue, w.w.UsedPercent/100, account, label, w.name)
			if !w.w.ResetsAt.IsZero() {
				ch <- prometheus.MustNewConstMetric(descQuotaReset, prometheus.GaugeValue,
					float64(w.w.ResetsAt.Unix()), account, label, w.name)
			}
		}
	}
}
