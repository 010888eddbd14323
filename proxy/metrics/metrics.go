// Package metrics keeps the counters GET /metrics shows (docs/cost.md) and
// writes their exposition: requests, tokens, failovers, time to first byte
// and duration, what is open now, the pool's gauges read at scrape time,
// and the dollars the usage comes to at the price table's prices.
//
// It guarantees two things the request path relies on. Counting a
// request costs atomic adds on counters resolved once, with no lock and
// no allocation once its label set has been seen. And every label is
// bounded: nothing a request carries (its id, key, cache key) is ever a
// label, and models and codes collapse to Other past MaxLabelValues.
//
// It knows nothing of proxy's types: the request path hands it a Request
// of plain values, the failover outcomes by index, the open sockets as a
// func and each account kind's meter as a func, and keeps the wiring.
package metrics

import (
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rotorproxy/rotor/proxy/promtext"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// Metrics are the counters GET /metrics shows (docs/cost.md). A request is
// counted once, as it finishes (Finished); the gauges of what is open move
// as it starts and as its stream opens.
//
// A request pays atomic adds on counters resolved once: the label set it
// falls in (account, model, status, code) is looked up in a read-mostly
// table, and only a label set never seen before takes a lock, to resolve
// its children of the vectors. Every label is bounded: account index and
// label come from the pool, models and codes collapse to Other past
// MaxLabelValues each, and nothing a request carries (its id, key, cache
// key) is ever a label.
type Metrics struct {
	reg       promtext.Registry
	requests  *promtext.CounterVec
	tokens    *promtext.CounterVec
	credits   *promtext.CounterVec
	ttfb      *promtext.Histogram
	duration  *promtext.Histogram
	inFlight  *promtext.Gauge
	streams   *promtext.Gauge
	failovers []*promtext.Counter // by the index Failover is given; nil: not one
	models    boundedNames
	codes     boundedNames
	series    readMostly[seriesKey, *series]
	sel       *rotation.Selector
}

// MaxLabelValues is how many distinct models (and codes) get a label
// value of their own; the rest are Other, so a client sending made-up
// model names cannot grow the exposition without bound.
const MaxLabelValues = 32

// Other is the label value of the models and codes past the limit.
const Other = "other"

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

// New registers rotor's metrics, the pool's gauges (read from sel at
// scrape time, with sockets saying how many client WebSockets are open)
// and the process's own, on a registry of its own.
//
// failovers names the outcomes an upstream attempt can come to, by the
// index the request path gives Failover: failovers[i] is the outcome
// label of index i when it moves a request on to another account, ""
// when it does not (it is not counted). The request path keeps its table
// of outcomes; this package only counts them.
func New(sel *rotation.Selector, sockets func() int, failovers []string) *Metrics {
	m := &Metrics{models: boundedNames{limit: MaxLabelValues}, codes: boundedNames{limit: MaxLabelValues}, sel: sel}
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
	outcomes := r.CounterVec("rotor_failovers_total",
		"Upstream attempts whose outcome moves the request on to another account, by outcome.", "outcome")
	m.failovers = make([]*promtext.Counter, len(failovers))
	for i, name := range failovers {
		if name != "" {
			m.failovers[i] = outcomes.With(name)
		}
	}
	pool := poolGauges{sel: sel, sockets: sockets}
	r.Func(pool.write)
	r.Func(promtext.Process)
	return m
}

// Request is a finished request as the counters see it: the values the
// request path hands Finished, none of them kept.
type Request struct {
	// AccountID and Index are the account that answered, or was tried
	// last; Index is its place in the pool, 0 for none.
	AccountID string
	Index     int
	Model     string // as the client sent it
	Status    int
	Code      string // the error code, "" for none
	Tokens    *usage.Tokens
	// TTFB is the time to the answer's first byte; 0 when none passed.
	TTFB time.Duration
	// Dur is the time from its arrival to its end.
	Dur time.Duration
	// Answered: an upstream answered it, if with an error passed on or
	// answered for.
	Answered bool
	// Counted: Started counted it in. Streamed: StreamOpened counted its
	// stream.
	Counted, Streamed bool
	// OnCredits: its account served it on credits (docs/selection.md).
	OnCredits bool
}

// Started counts a request read and on its way; Finished counts it out.
func (m *Metrics) Started() { m.inFlight.Inc() }

// StreamOpened counts a streamed answer whose relay has begun; Finished
// counts it out.
func (m *Metrics) StreamOpened() { m.streams.Inc() }

// Failover counts an upstream attempt that came to the outcome of index i
// of New's failovers, if that outcome moves a request on.
func (m *Metrics) Failover(i int) {
	if c := m.failovers[i]; c != nil {
		c.Inc()
	}
}

// Finished counts r out: the request path calls it once a request, as it
// ends, whatever the end.
func (m *Metrics) Finished(r Request) {
	se := m.series.get(seriesKey{id: r.AccountID, index: r.Index, status: r.Status,
		model: m.models.name(r.Model), code: m.codes.name(r.Code)}, m.newSeries)
	se.requests.Inc()
	if r.OnCredits {
		c := se.onCredits.Load()
		if c == nil {
			c = m.credits.With(se.account, se.label)
			se.onCredits.Store(c)
		}
		c.Inc()
	}
	if t := r.Tokens; t != nil {
		se.input.Add(float64(t.Input))
		se.cached.Add(float64(t.Cached))
		se.output.Add(float64(t.Output))
	}
	if r.Answered {
		// Every request an upstream answered, errors included: an error
		// passed on (or answered for) is the first byte of its answer,
		// sent as rotor finishes it; so is a relayed answer's end when
		// no byte of it passed.
		ttfb := r.TTFB
		if ttfb <= 0 {
			ttfb = r.Dur
		}
		m.ttfb.Observe(ttfb.Seconds())
	}
	if r.Counted {
		m.duration.Observe(r.Dur.Seconds())
		m.inFlight.Dec()
	}
	if r.Streamed {
		m.streams.Dec()
	}
}

// Registry is where the counters are registered, in the order /metrics
// writes them: NewCosts registers the dollars on it, and the request
// path writes it as the answer to GET /metrics.
func (m *Metrics) Registry() *promtext.Registry { return &m.reg }

// newSeries resolves the children of k's label set, with the account's
// label as the pool has it now. It is always kept: every part of the key
// is bounded.
func (m *Metrics) newSeries(k seriesKey, _ int) (*series, bool) {
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
// own and every later one Other.
type boundedNames struct {
	limit int
	known readMostly[string, string]
	full  atomic.Bool
}

// name is v's label value: v itself (a copy, so no request's memory is
// held), or Other once limit names are known.
func (b *boundedNames) name(v string) string {
	if n, ok := b.known.load(v); ok {
		return n
	}
	if b.full.Load() {
		return Other // no lock once full, whatever names come
	}
	return b.known.get(v, func(v string, held int) (string, bool) {
		if held >= b.limit {
			b.full.Store(true)
			return Other, false
		}
		return strings.Clone(v), true
	})
}
