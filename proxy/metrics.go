package proxy

import (
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rotorproxy/rotor/proxy/promtext"
	"github.com/rotorproxy/rotor/rotation"
)

// metrics are the counters GET /metrics shows (docs/cost.md). finish is the
// one place that counts a request; commit and serve only move the gauges
// of what is open.
//
// A request pays atomic adds on counters resolved once: the label set it
// falls in (account, model, status, code) is looked up in a read-mostly
// table, and only a label set never seen before takes a lock, to resolve
// its children of the vectors. Every label is bounded: account index and
// label come from the pool, models and codes collapse to "other" past
// maxLabelValues each, and nothing a request carries (its id, key, cache
// key) is ever a label.
type metrics struct {
	reg       promtext.Registry
	requests  *promtext.CounterVec
	tokens    *promtext.CounterVec
	credits   *promtext.CounterVec
	ttfb      *promtext.Histogram
	duration  *promtext.Histogram
	inFlight  *promtext.Gauge
	streams   *promtext.Gauge
	failovers [verdictCount]*promtext.Counter
	models    boundedNames
	codes     boundedNames
	series    readMostly[seriesKey, *series]
	sel       *rotation.Selector
}

// maxLabelValues is how many distinct models (and codes) get a label
// value of their own; the rest are "other", so a client sending made-up
// model names cannot grow the exposition without bound.
const maxLabelValues = 32

// otherLabel is the label value of the models and codes past the limit.
const otherLabel = "other"

// noAccount is the account label of a request no account served (refused
// before a pick, or with none left to pick).
const noAccount = "none"

// seriesKey is the label set a finished request is counted under; id
// tells apart the accounts that held an index over time.
type seriesKey struct {
	id            string
	index, status int
	model, code   string
}

// series are the counters of one label set, resolved once.
type series struct {
	requests              *promtext.Counter
	input, cached, output *promtext.Counter
	// account and label name the series' account; onCredits is its
	// counter of requests served on credits, resolved on the first one.
	account, label string
	onCredits      atomic.Pointer[promtext.Counter]
}

// newMetrics registers rotor's metrics, the pool's gauges (read from sel
// at scrape time) and the process's own, on a registry of the Server's
// own.
func newMetrics(sel *rotation.Selector, sockets *socketSet) *metrics {
	m := &metrics{models: boundedNames{limit: maxLabelValues}, codes: boundedNames{limit: maxLabelValues}, sel: sel}
	r := &m.reg
	m.requests = r.CounterVec("rotor_requests_total",
		"Finished requests by the account that answered (or was tried last), model as sent, status and error code.",
		"account", "label", "model", "status", "code")
	m.tokens = r.CounterVec("rotor_tokens_total",
		"Tokens the upstream reported, by account, model and type (input, cached input, output).",
		"account", "label", "model", "type")
	m.credits = r.CounterVec("rotor_credits_requests_total",
		"Requests an account answered on credits, past a full window's included quota (docs/selection.md).",
		"account", "label")
	m.ttfb = r.Histogram("rotor_ttfb_seconds",
		"Time from a request's arrival to the first byte of its answer, for every request an upstream answered (errors included).",
		[]float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120})
	m.duration = r.Histogram("rotor_request_duration_seconds",
		"Time from a request's arrival to its end, streams included.",
		[]float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600})
	m.inFlight = r.Gauge("rotor_requests_in_flight", "Requests read and not yet finished.")
	m.streams = r.Gauge("rotor_open_streams", "Streamed answers being relayed now.")
	failovers := r.CounterVec("rotor_failovers_total",
		"Upstream attempts whose outcome moves the request on to another account, by outcome.", "outcome")
	for v := range verdictCount {
		if failover[v].rotate {
			m.failovers[v] = failovers.With(failover[v].name)
		}
	}
	pool := poolGauges{sel: sel, sockets: sockets}
	r.Func(pool.write)
	r.Func(promtext.Process)
	return m
}

// started counts a request read and on its way; finished counts it out.
func (m *metrics) started() { m.inFlight.Inc() }

// streamOpened counts a streamed answer whose relay has begun; finished
// counts it out.
func (m *metrics) streamOpened() { m.streams.Inc() }

// finished counts r, ended as e after dur, on the account id at index
// (0: none), served on credits or not: called by finish alone.
func (m *metrics) finished(r *request, e *ending, id string, index int, dur time.Duration, onCredits bool) {
	se := m.series.get(seriesKey{id: id, index: index, status: e.status,
		model: m.models.name(r.model), code: m.codes.name(e.code)}, m.newSeries)
	se.requests.Inc()
	if onCredits {
		c := se.onCredits.Load()
		if c == nil {
			c = m.credits.With(se.account, se.label)
			se.onCredits.Store(c)
		}
		c.Inc()
	}
	if t := e.tokens; t != nil {
		se.input.Add(float64(t.Input))
		se.cached.Add(float64(t.Cached))
		se.output.Add(float64(t.Output))
	}
	if e.choice != nil || e.answered {
		// Every request an upstream answered, errors included: an error
		// passed on (or answered for) is the first byte of its answer,
		// sent as rotor finishes it; so is a relayed answer's end when
		// no byte of it passed.
		ttfb := e.ttfb
		if ttfb <= 0 {
			ttfb = dur
		}
		m.ttfb.Observe(ttfb.Seconds())
	}
	if r.counted {
		m.duration.Observe(dur.Seconds())
		m.inFlight.Dec()
	}
	if r.streaming {
		m.streams.Dec()
	}
	for _, v := range r.verdicts {
		if c := m.failovers[v]; c != nil {
			c.Inc()
		}
	}
}

// newSeries resolves the children of k's label set, with the account's
// label as the pool has it now. It is always kept: every part of the key
// is bounded.
func (m *metrics) newSeries(k seriesKey, _ int) (*series, bool) {
	account, label := noAccount, ""
	if k.index > 0 {
		account = strconv.Itoa(k.index)
		if a := m.sel.Pool().At(k.index); a != nil && a.ID == k.id {
			label = a.Label
		}
	}
	status := strconv.Itoa(k.status)
	return &series{
		requests: m.requests.With(account, label, k.model, status, k.code),
		input:    m.tokens.With(account, label, k.model, "input"),
		cached:   m.tokens.With(account, label, k.model, "cached"),
		output:   m.tokens.With(account, label, k.model, "output"),
		account:  account, label: label,
	}, true
}

// readMostly is a map read by every request and written only when a key
// is new: a read is an atomic load and a map lookup, with no lock; a
// write copies the map under a lock. Its keys must be bounded.
type readMostly[K comparable, V any] struct {
	mu sync.Mutex
	m  atomic.Pointer[map[K]V]
}

// load returns k's value, if it has one.
func (c *readMostly[K, V]) load(k K) (V, bool) {
	var v V
	m := c.m.Load()
	if m == nil {
		return v, false
	}
	v, ok := (*m)[k]
	return v, ok
}

// get returns k's value. The first time, newV makes it from k and the
// number of keys held so far, and says whether to keep it.
func (c *readMostly[K, V]) get(k K, newV func(k K, held int) (V, bool)) V {
	if v, ok := c.load(k); ok {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.load(k); ok {
		return v
	}
	var old map[K]V
	if p := c.m.Load(); p != nil {
		old = *p
	}
	v, keep := newV(k, len(old))
	if keep {
		next := maps.Clone(old)
		if next == nil {
			next = map[K]V{}
		}
		next[k] = v
		c.m.Store(&next)
	}
	return v
}

// boundedNames gives the first limit distinct names a label value of their
// own and every later one otherLabel.
type boundedNames struct {
	limit int
	known readMostly[string, string]
	full  atomic.Bool
}

// name is v's label value: v itself (a copy, so no request's memory is
// held), or otherLabel once limit names are known.
func (b *boundedNames) name(v string) string {
	if n, ok := b.known.load(v); ok {
		return n
	}
	if b.full.Load() {
		return otherLabel // no lock once full, whatever names come
	}
	return b.known.get(v, func(v string, held int) (string, bool) {
		if held >= b.limit {
			b.full.Store(true)
			return otherLabel, false
		}
		return strings.Clone(v), true
	})
}
