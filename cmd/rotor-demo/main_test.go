package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDemo runs the whole demo against a freshly built rotor and checks
// what a newcomer reads: the streamed answers, the failover away from the
// limited account, and what rotation status says about it afterwards.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds rotor and runs the demo (about 10 s)")
	}
	bin := filepath.Join(t.TempDir(), "rotor")
	build := exec.Command("go", "build", "-o", bin, "../rotor")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building rotor: %v\n%s", err, out)
	}
	var out bytes.Buffer
	if err := run(bin, "../../testdata", &out); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	text := out.String()
	t.Log(text)
	for _, want := range []string{
		"Added API-key account 3 (carol).",
		"rotor proxy listening on http://127.0.0.1:",
		"request 1: Hello from the fake upstream.",
		"request 3: Hello from the fake upstream.",
		"failover: trying another account",
		"outcome=usage-limit",
		"proxy stopped cleanly; demo done.",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	// Every request was answered: no HTTP error reached the user.
	if strings.Contains(text, "HTTP 4") || strings.Contains(text, "HTTP 5") {
		t.Errorf("a demo request failed:\n%s", text)
	}
	// rotation status shows alice (account 1) waiting for her reset, the
	// others available.
	if !regexp.MustCompile(`(?m)^\s+1\s+rate-limited for 1[45]m\d+s\s+alice`).MatchString(text) {
		t.Errorf("rotation status does not show alice rate-limited for ~15m:\n%s", text)
	}
	if !regexp.MustCompile(`(?m)^\s+2\s+available\s+bob`).MatchString(text) {
		t.Errorf("rotation status does not show bob available")
	}
	// No key of the demo accounts is ever printed.
	if strings.Contains(text, "sk-demo-") {
		t.Error("the demo printed an API key")
	}
}
