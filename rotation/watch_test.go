package rotation

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock/clocktest"
)

// fullDisk is a pool source on a disk that has run out of space: every
// read fails as an atomic write on a full disk does, naming a fresh
// temporary file each time, until fixed.
type fullDisk struct {
	path  string
	full  atomic.Bool
	tries atomic.Int32
}

func (d *fullDisk) Path() string { return d.path }

func (d *fullDisk) Load() (*accounts.Pool, error) {
	if d.full.Load() {
		n := d.tries.Add(1)
		return nil, fmt.Errorf("save pool: %w", &fs.PathError{Op: "write",
			Path: filepath.Join(filepath.Dir(d.path), fmt.Sprintf(".accounts.json.tmp%d", n)), Err: syscall.ENOSPC})
	}
	return &accounts.Pool{}, nil
}

// touch changes the file so the next look reads it again.
func (d *fullDisk) touch(t *testing.T, i int) {
	if err := os.WriteFile(d.path, []byte(fmt.Sprint(i, "        ")[:i%7+1]), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestWatchReportsAFailureOnceAndItsEnd(t *testing.T) {
	dir := t.TempDir()
	clk := clocktest.Real()
	sel := NewSelector(NewRuntime(dir, clk), clk, 1)
	d := &fullDisk{path: filepath.Join(dir, "accounts.json")}
	d.full.Store(true)
	d.touch(t, 0)
	stop := watchHearing(d, sel)
	for i := 1; i <= 20; i++ { // five seconds of a full disk
		d.touch(t, i)
		if !clk.Tick(5 * time.Second) {
			t.Fatal("the watcher took no tick")
		}
	}
	d.full.Store(false)
	for i := 21; i <= 24; i++ {
		d.touch(t, i)
		clk.Tick(5 * time.Second)
	}
	heard := stop()
	if d.tries.Load() < 10 {
		t.Fatalf("the source was read %d times: the test did not exercise the watch", d.tries.Load())
	}
	if len(heard) != 2 || heard[0] == nil || heard[1] != nil {
		t.Fatalf("want the failure once and its end once, heard %d: %v", len(heard), heard)
	}
}

// A bug met while syncing (here a follower that panics) is a failure like
// any other: reported once while it lasts, with its stack, and its end
// once; the watcher, and the serve it runs in, go on.
func TestWatchSurvivesABug(t *testing.T) {
	dir := t.TempDir()
	clk := clocktest.Real()
	sel := NewSelector(NewRuntime(dir, clk), clk, 1)
	d := &fullDisk{path: filepath.Join(dir, "accounts.json")}
	d.touch(t, 0)
	var buggy atomic.Bool
	buggy.Store(true)
	var calls atomic.Int32
	follow := func() error {
		calls.Add(1)
		if buggy.Load() {
			var m map[string]int
			m["boom"]++ // a nil map: the bug
		}
		return nil
	}
	stop := watchHearing(d, sel, follow)
	for range 5 {
		if !clk.Tick(5 * time.Second) {
			t.Fatal("the watcher took no tick")
		}
	}
	buggy.Store(false)
	for range 2 {
		clk.Tick(5 * time.Second)
	}
	heard := stop()
	if calls.Load() < 6 {
		t.Fatalf("the follower ran %d times: the watcher stopped", calls.Load())
	}
	if len(heard) != 2 || heard[0] == nil || heard[1] != nil {
		t.Fatalf("want the bug once and its end once, heard %d: %v", len(heard), heard)
	}
	if msg := heard[0].Error(); !strings.Contains(msg, "assignment to entry in nil map") || !strings.Contains(msg, "rotation.TestWatchSurvivesABug") {
		t.Errorf("the report names no panic or stack: %s", msg)
	}
}

// watchHearing runs Watch on d and sel (with followers also) until stop,
// which returns what onErr heard, in order.
func watchHearing(d *fullDisk, sel *Selector, also ...func() error) (stop func() []error) {
	var mu sync.Mutex
	var heard []error
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Watch(ctx, d, sel, time.Second, func(err error) {
			mu.Lock()
			heard = append(heard, err)
			mu.Unlock()
		}, also...)
	}()
	return func() []error {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return heard
	}
}
