package promtext

import (
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestExpositionParses writes every kind of family and reads it back with
// the Prometheus library's own parser: what a scraper sees.
func TestExpositionParses(t *testing.T) {
	var r Registry
	c := r.Counter("c_total", "A counter.\nSecond line with a \\ backslash.")
	g := r.Gauge("g", "A gauge.")
	h := r.Histogram("h_seconds", "A histogram.", []float64{0.1, 1, 10})
	v := r.CounterVec("v_total", "A labelled counter.", "model", "code")
	r.CounterVec("empty_total", "Never used.", "x")
	r.Func(Process)

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				c.Inc()
				g.Inc()
				v.With("gpt-5", "ok").Add(2)
			}
		})
	}
	wg.Wait()
	g.Dec()
	c.Add(-5) // ignored: a counter never goes down
	for _, x := range []float64{0.05, 0.1, 0.5, 3, 100} {
		h.Observe(x)
	}
	v.With(`we"ird\`+"\nname", "").Inc()
	v.With("bad\xffbyte é", "x").Inc() // a model as sent: not UTF-8

	text := string(r.Append(nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("does not parse: %v\n%s", err, text)
	}
	if got := fams["c_total"].Metric[0].Counter.GetValue(); got != 8000 {
		t.Errorf("counter %v, want 8000", got)
	}
	if got := fams["c_total"].GetHelp(); got != "A counter.\nSecond line with a \\ backslash." {
		t.Errorf("help %q", got)
	}
	if got := fams["g"].Metric[0].Gauge.GetValue(); got != 7999 {
		t.Errorf("gauge %v, want 7999", got)
	}
	hist := fams["h_seconds"].Metric[0].Histogram
	if hist.GetSampleCount() != 5 || hist.GetSampleSum() != 103.65 {
		t.Errorf("histogram count %d sum %v, want 5 and 103.65", hist.GetSampleCount(), hist.GetSampleSum())
	}
	var cum []uint64
	for _, b := range hist.Bucket {
		cum = append(cum, b.GetCumulativeCount())
	}
	if want := []uint64{2, 3, 4, 5}; !slices.Equal(cum, want) {
		t.Errorf("cumulative buckets (le 0.1, 1, 10, +Inf) %v, want %v (an observation equal to a bound counts in it)", cum, want)
	}
	vs := fams["v_total"].Metric
	if len(vs) != 3 {
		t.Fatalf("labelled counter has %d series, want 3:\n%s", len(vs), text)
	}
	found := map[string]float64{}
	for _, m := range vs {
		found[m.Label[0].GetValue()+"|"+m.Label[1].GetValue()] = m.Counter.GetValue()
	}
	if found["gpt-5|ok"] != 16000 || found[`we"ird\`+"\nname|"] != 1 || found["bad\uFFFDbyte é|x"] != 1 {
		t.Errorf("labelled series %v", found)
	}
	if _, ok := fams["empty_total"]; ok || strings.Contains(text, "empty_total") {
		t.Errorf("a labelled counter with no series was written:\n%s", text)
	}
	if fams["go_goroutines"].Metric[0].Gauge.GetValue() < 1 {
		t.Errorf("go_goroutines missing or zero:\n%s", text)
	}
}

// The process's own figures are there, under the Go collector's names, and
// on Linux /proc's: a resident size, CPU time and open files that are
// plausible for this test process.
func TestProcessFigures(t *testing.T) {
	var r Registry
	r.Func(Process)
	text := string(r.Append(nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("does not parse: %v\n%s", err, text)
	}
	value := func(name string) float64 {
		f := fams[name]
		if f == nil || len(f.Metric) != 1 {
			t.Fatalf("%s missing:\n%s", name, text)
		}
		if g := f.Metric[0].Gauge; g != nil {
			return g.GetValue()
		}
		return f.Metric[0].Counter.GetValue()
	}
	if v := value("go_memstats_sys_bytes"); v < 1<<20 {
		t.Errorf("go_memstats_sys_bytes %v, want at least 1 MiB", v)
	}
	if v := value("process_start_time_seconds"); v < float64(time.Now().Add(-time.Hour).Unix()) || v > float64(time.Now().Unix()+1) {
		t.Errorf("process_start_time_seconds %v, want within the last hour", v)
	}
	if runtime.GOOS != "linux" {
		return
	}
	if v := value("process_resident_memory_bytes"); v < 1<<20 || v > 1<<32 {
		t.Errorf("process_resident_memory_bytes %v, want between 1 MiB and 4 GiB", v)
	}
	if v := value("process_open_fds"); v < 3 {
		t.Errorf("process_open_fds %v, want at least stdin, stdout and stderr", v)
	}
	if v := value("process_cpu_seconds_total"); v < 0 || v > 3600 {
		t.Errorf("process_cpu_seconds_total %v", v)
	}
}
