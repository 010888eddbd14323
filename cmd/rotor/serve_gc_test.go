package main

import (
	"runtime/debug"
	"testing"
)

// A serve collects at serveGCPercent, unless GOGC is set: then the
// runtime's reading of it stands.
func TestServeTunesTheCollectorUnlessGOGCIsSet(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)

	tuneCollector(func(string) string { return "" })
	if got := debug.SetGCPercent(100); got != serveGCPercent {
		t.Errorf("with GOGC unset the goal is %d, want %d", got, serveGCPercent)
	}
	tuneCollector(func(k string) string { return map[string]string{"GOGC": "200"}[k] })
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set the goal became %d; the user's setting must stand", got)
	}
}
