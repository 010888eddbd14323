package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// writeTable prints w's results as a heading, a line about the workload
// and a markdown table.
func writeTable(out io.Writer, w *Workload, results []Result) {
	fmt.Fprintf(out, "#### %s\n\n", w.Name)
	fmt.Fprintf(out, "%s %s; %d requests over %d days.\n\n", w.About, poolOf(w), results[0].Requests, w.Days)
	fmt.Fprintln(out, "| policy | requests served | minutes blocked | conversations moved | weekly quota expired |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|")
	for _, r := range results {
		fmt.Fprintf(out, "| %s | %d (%.1f%%) | %d | %d | %.0f%% |\n", r.Policy, r.Served,
			100*float64(r.Served)/float64(max(r.Requests, 1)), int(r.Blocked/time.Minute), r.Moved, 100*r.WeeklyExpired)
	}
}

// poolOf describes w's accounts: how many of each plan, and how many
// start with windows already running.
func poolOf(w *Workload) string {
	count := map[string]int{}
	var plans []string
	running := 0
	for _, a := range w.Accounts {
		if count[a.Plan] == 0 {
			plans = append(plans, a.Plan)
		}
		count[a.Plan]++
		if a.FiveHour != nil || a.Weekly != nil {
			running++
		}
	}
	parts := make([]string, len(plans))
	for i, p := range plans {
		parts[i] = fmt.Sprintf("%d %s", count[p], p)
	}
	s := fmt.Sprintf("Pool: %s", strings.Join(parts, ", "))
	if running > 0 {
		s += fmt.Sprintf(" (%d with windows already running)", running)
	}
	return s
}
