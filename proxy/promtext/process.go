package promtext

import (
	"runtime/metrics"
	"time"
)

// started is when the process started, as near as a package can tell.
var started = time.Now()

// runtimeGauges are the Go runtime's figures Process writes, under the
// names the Prometheus client's Go collector gives them.
var runtimeGauges = []struct{ name, help, sample string }{
	{"go_goroutines", "Number of goroutines that currently exist.", "/sched/goroutines:goroutines"},
	{"go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and still in use.", "/memory/classes/heap/objects:bytes"},
	{"go_memstats_sys_bytes", "Number of bytes obtained from the system.", "/memory/classes/total:bytes"},
}

// Process writes the process's own families: its goroutines and memory as
// the Go runtime counts them, when it started, and where the system tells
// (Linux), its resident memory, CPU time and open files.
func Process(w *Writer) {
	samples := make([]metrics.Sample, len(runtimeGauges))
	for i, g := range runtimeGauges {
		samples[i].Name = g.sample
	}
	metrics.Read(samples)
	for i, g := range runtimeGauges {
		if samples[i].Value.Kind() == metrics.KindUint64 {
			w.Family(g.name, "gauge", g.help)
			w.Sample(g.name, float64(samples[i].Value.Uint64()))
		}
	}
	w.Family("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.")
	w.Sample("process_start_time_seconds", float64(started.UnixNano())/1e9)
	writeSystem(w)
}
