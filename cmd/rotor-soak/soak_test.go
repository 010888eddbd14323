package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSoakShort is make soak in brief, for make test: a real serve, faults
// at random, hundreds of concurrent streams, pins moving and a second
// serve killed with SIGKILL, for a few seconds; every invariant must hold.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("soak")
	}
	bin := filepath.Join(t.TempDir(), "rotor")
	build := exec.Command("go", "build", "-o", bin, "./cmd/rotor")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building rotor: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := Run(ctx, Config{Rotor: bin, Testdata: filepath.Join("..", "..", "testdata"), Duration: 10 * time.Second, Streams: 300})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	sum.Print(&b)
	t.Log("\n" + b.String())
	if !sum.OK() {
		t.Errorf("the soak found broken invariants:\n%s", b.String())
	}
	if sum.Outcomes["200 completed (streamed)"] == 0 {
		t.Error("no stream completed")
	}
}
