package promtext

import (
	"bytes"
	"os"
	"strconv"
)

// clockTicks is USER_HZ, which is 100 on every Linux architecture Go
// supports.
const clockTicks = 100

// writeSystem writes what /proc says of this process: resident memory, CPU
// time and open files. A figure it cannot read is left out.
func writeSystem(w *Writer) {
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		// The fields after the command, which is in parentheses and may
		// hold spaces: utime and stime are the 12th and 13th, rss the 22nd.
		f := bytes.Fields(b[bytes.LastIndexByte(b, ')')+1:])
		if len(f) > 21 {
			ut, _ := strconv.ParseFloat(string(f[11]), 64)
			st, _ := strconv.ParseFloat(string(f[12]), 64)
			rss, _ := strconv.ParseFloat(string(f[21]), 64)
			w.Family("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.")
			w.Sample("process_cpu_seconds_total", (ut+st)/clockTicks)
			w.Family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.")
			w.Sample("process_resident_memory_bytes", rss*float64(os.Getpagesize()))
		}
	}
	if d, err := os.Open("/proc/self/fd"); err == nil {
		names, err := d.Readdirnames(-1)
		d.Close()
		if err == nil {
			w.Family("process_open_fds", "gauge", "Number of open file descriptors.")
			w.Sample("process_open_fds", float64(len(names)-1)) // less the one reading it
		}
	}
}
