package main

import (
	"context"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts/home"
)

// tuneCollector sets serveGCPercent, unless GOGC is set: then the
// runtime's reading of it stands. Either way it says the goal in force.
func TestTuneCollectorUnlessGOGCIsSet(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)

	if got := tuneCollector(func(string) string { return "" }); got != serveGCPercent {
		t.Errorf("with GOGC unset tuneCollector says %d, want %d", got, serveGCPercent)
	}
	if got := debug.SetGCPercent(100); got != serveGCPercent {
		t.Errorf("with GOGC unset the goal is %d, want %d", got, serveGCPercent)
	}
	if got := tuneCollector(func(k string) string { return map[string]string{"GOGC": "200"}[k] }); got != 100 {
		t.Errorf("with GOGC set the goal became %d; the user's setting must stand", got)
	}
}

// A running serve collects at serveGCPercent, and at the user's GOGC
// when one is set: its debug log says the goal its runtime has.
func TestServeRunsTheCollectorAtItsGoal(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ gogc, want string }{{"", `"gogc":50,`}, {"200", `"gogc":200,`}} {
		h := newHome(t)
		h.addKey("a", "sk-a")
		h.unsetenv("GOGC")
		if c.gogc != "" {
			h.setenv("GOGC", c.gogc)
		}
		ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
		cmd, _, stderr := h.command(ctx, "", "serve", "--port", "0", "--log-format", "json", "--log-level", "debug")
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if in, err := home.ReadInfo(h.dir); err == nil && in.PID == cmd.Process.Pid {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				cancel()
				t.Fatalf("GOGC=%q: no proxy.json within 10s; stderr: %s", c.gogc, stderr)
			}
		}
		cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		cancel()
		if err != nil {
			t.Fatalf("GOGC=%q: serve after SIGTERM: %v; stderr: %s", c.gogc, err, stderr)
		}
		if line := logLine(stderr.String(), "collector goal"); !strings.Contains(line, c.want) {
			t.Errorf("GOGC=%q: the collector's log line is %q, want %s in it; stderr: %s", c.gogc, line, c.want, stderr)
		}
	}
}

// logLine is the first line of a log that has msg in it.
func logLine(log, msg string) string {
	for line := range strings.Lines(log) {
		if strings.Contains(line, msg) {
			return line
		}
	}
	return ""
}
