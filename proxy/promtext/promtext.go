// Package promtext keeps counters, gauges and histograms and writes them in
// Prometheus's text exposition format (version 0.0.4).
//
// It is what rotor's /metrics needs and nothing more: a counter or gauge is
// one atomic word, a labelled counter resolves its label values once and
// then costs the same, and a scrape writes straight into one byte slice.
// Doing without the Prometheus client library keeps its protobuf, procfs and
// regexp code out of every serve's binary and resident memory.
package promtext

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// ContentType is the Content-Type of what Registry.Append writes.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// value is a float64 updated atomically.
type value struct{ bits atomic.Uint64 }

func (v *value) add(d float64) {
	for {
		old := v.bits.Load()
		if v.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

func (v *value) load() float64 { return math.Float64frombits(v.bits.Load()) }

// A Counter only goes up. Its methods are safe for concurrent use.
type Counter struct{ v value }

// Inc adds 1.
func (c *Counter) Inc() { c.v.add(1) }

// Add adds d; a negative d is ignored, so the counter never goes down.
func (c *Counter) Add(d float64) {
	if d > 0 {
		c.v.add(d)
	}
}

// Value is the counter's value now.
func (c *Counter) Value() float64 { return c.v.load() }

// A Gauge goes up and down. Its methods are safe for concurrent use.
type Gauge struct{ v value }

// Inc adds 1.
func (g *Gauge) Inc() { g.v.add(1) }

// Dec subtracts 1.
func (g *Gauge) Dec() { g.v.add(-1) }

// A Histogram counts observations in buckets. Its methods are safe for
// concurrent use; a scrape sees every bucket, the sum and the count of the
// same observations up to the ones racing with it.
type Histogram struct {
	upper  []float64       // bucket upper bounds (inclusive), ascending
	counts []atomic.Uint64 // per bucket, not cumulative; the last is +Inf's
	sum    value
}

// Observe counts v in the first bucket whose upper bound is at least v.
func (h *Histogram) Observe(v float64) {
	h.counts[sort.SearchFloat64s(h.upper, v)].Add(1)
	h.sum.add(v)
}

// A CounterVec is a counter per set of label values. Its methods are safe
// for concurrent use. Its label values must be bounded by the caller: each
// set is kept for the life of the process.
type CounterVec struct {
	labels []string
	mu     sync.Mutex
	series map[string]*labeled
}

type labeled struct {
	values []string
	c      Counter
}

// With returns the counter of values, one per label name, in order. It
// takes a lock: callers on a hot path resolve their counters once.
func (v *CounterVec) With(values ...string) *Counter {
	if len(values) != len(v.labels) {
		panic("promtext: " + strconv.Itoa(len(values)) + " label values for " + strconv.Itoa(len(v.labels)) + " labels")
	}
	key := strings.Join(values, "\xff")
	v.mu.Lock()
	defer v.mu.Unlock()
	s := v.series[key]
	if s == nil {
		s = &labeled{values: slices.Clone(values)}
		v.series[key] = s
	}
	return &s.c
}

// A Registry holds metrics and writes them, in the order they were
// registered. Register everything before the first scrape.
type Registry struct {
	fams []func(w *Writer)
}

// Counter registers and returns a counter.
func (r *Registry) Counter(name, help string) *Counter {
	c := new(Counter)
	r.Func(func(w *Writer) {
		w.Family(name, "counter", help)
		w.Sample(name, c.Value())
	})
	return c
}

// Gauge registers and returns a gauge.
func (r *Registry) Gauge(name, help string) *Gauge {
	g := new(Gauge)
	r.Func(func(w *Writer) {
		w.Family(name, "gauge", help)
		w.Sample(name, g.v.load())
	})
	return g
}

// Histogram registers and returns a histogram with the given ascending
// bucket upper bounds (+Inf is implied).
func (r *Registry) Histogram(name, help string, buckets []float64) *Histogram {
	h := &Histogram{upper: slices.Clone(buckets), counts: make([]atomic.Uint64, len(buckets)+1)}
	r.Func(func(w *Writer) {
		w.Family(name, "histogram", help)
		var cum uint64
		for i := range h.counts {
			cum += h.counts[i].Load()
			le := math.Inf(1)
			if i < len(h.upper) {
				le = h.upper[i]
			}
			w.Sample(name+"_bucket", float64(cum), "le", formatFloat(le))
		}
		w.Sample(name+"_sum", h.sum.load())
		w.Sample(name+"_count", float64(cum))
	})
	return h
}

// CounterVec registers and returns a counter per set of values of labels.
// A family with no set yet is not written.
func (r *Registry) CounterVec(name, help string, labels ...string) *CounterVec {
	v := &CounterVec{labels: slices.Clone(labels), series: map[string]*labeled{}}
	r.Func(func(w *Writer) {
		v.mu.Lock()
		series := make([]*labeled, 0, len(v.series))
		for _, s := range v.series {
			series = append(series, s)
		}
		v.mu.Unlock()
		slices.SortFunc(series, func(a, b *labeled) int { return slices.Compare(a.values, b.values) })
		w.Family(name, "counter", help)
		pairs := make([]string, 2*len(v.labels))
		for _, s := range series {
			for i, l := range v.labels {
				pairs[2*i], pairs[2*i+1] = l, s.values[i]
			}
			w.Sample(name, s.c.Value(), pairs...)
		}
	})
	return v
}

// Func registers fn, which writes families of its own at every scrape
// (values read at scrape time, such as a pool's state).
func (r *Registry) Func(fn func(w *Writer)) { r.fams = append(r.fams, fn) }

// Append appends every registered family to b in the text format.
func (r *Registry) Append(b []byte) []byte {
	w := Writer{b: b}
	for _, fn := range r.fams {
		fn(&w)
	}
	return w.b
}

// A Writer writes families of samples. A family's # HELP and # TYPE lines
// are written with its first sample, so a family with no sample leaves no
// trace; its samples must follow Family before the next one.
type Writer struct {
	b               []byte
	name, typ, help string
	headerOwed      bool
}

// Family starts the family name of type typ ("counter", "gauge",
// "histogram").
func (w *Writer) Family(name, typ, help string) {
	w.name, w.typ, w.help, w.headerOwed = name, typ, help, true
}

// Sample writes one sample of the current family: name (the family's, or
// with a suffix such as _bucket), its value, and labels as name, value
// pairs.
func (w *Writer) Sample(name string, v float64, labels ...string) {
	if w.headerOwed {
		w.b = append(w.b, "# HELP "...)
		w.b = append(w.b, w.name...)
		w.b = append(w.b, ' ')
		w.b = appendEscaped(w.b, w.help, false)
		w.b = append(w.b, "\n# TYPE "...)
		w.b = append(w.b, w.name...)
		w.b = append(w.b, ' ')
		w.b = append(w.b, w.typ...)
		w.b = append(w.b, '\n')
		w.headerOwed = false
	}
	w.b = append(w.b, name...)
	for i := 0; i+1 < len(labels); i += 2 {
		if i == 0 {
			w.b = append(w.b, '{')
		} else {
			w.b = append(w.b, ',')
		}
		w.b = append(w.b, labels[i]...)
		w.b = append(w.b, `="`...)
		w.b = appendEscaped(w.b, labels[i+1], true)
		w.b = append(w.b, '"')
		if i+2 >= len(labels) {
			w.b = append(w.b, '}')
		}
	}
	w.b = append(w.b, ' ')
	w.b = append(w.b, formatFloat(v)...)
	w.b = append(w.b, '\n')
}

// appendEscaped escapes backslashes and line feeds (and, in a label
// value, double quotes) as the text format requires, and writes bytes that
// are not UTF-8 as U+FFFD: a label value can come from a request (the
// model as sent), and one bad byte would make a scraper refuse the whole
// exposition.
func appendEscaped(b []byte, s string, quote bool) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			b = append(b, `\\`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '"' && quote:
			b = append(b, `\"`...)
		case c < utf8.RuneSelf:
			b = append(b, c)
		default:
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				b = utf8.AppendRune(b, utf8.RuneError)
			} else {
				b = append(b, s[i:i+n]...)
			}
			i += n
			continue
		}
		i++
	}
	return b
}

// formatFloat writes v as the text format spells it.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
