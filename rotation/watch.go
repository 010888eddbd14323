package rotation

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"runtime/debug"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/home"
)

// PoolSource is where the pool comes from: accounts.Store in rotor.
type PoolSource interface {
	Path() string
	Load() (*accounts.Pool, error)
}

// failureKind is what tells one failure from another, "" for none: the
// operation and the system's error of a file error, without the file's
// name, which for an atomic write is a fresh temporary one every time.
func failureKind(err error) string {
	if err == nil {
		return ""
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	var bug *bugError
	if errors.As(err, &bug) {
		return "panic: " + fmt.Sprint(bug.v) // the same bug, whatever its stack's addresses
	}
	return err.Error()
}

// bugError is a panic met while syncing: a bug in rotor, reported as a
// failure with its stack rather than ending the serve.
type bugError struct {
	v     any
	stack []byte
}

func (e *bugError) Error() string {
	return fmt.Sprintf("a bug while syncing with ROTOR_HOME (panic: %v)\n%s", e.v, e.stack)
}

// WatchInterval is how often a proxy looks for changes made by other rotor
// processes. Each look is two stat calls; files are read only when changed.
const WatchInterval = 250 * time.Millisecond

// Refresh brings sel up to date with src and the state file once: the pool
// when accounts.json changed since stamp, then an exchange of runtime
// state. It returns the stamp to pass next time. An unreadable store keeps
// the last good pool in use.
func Refresh(src PoolSource, sel *Selector, stamp home.Stamp) (home.Stamp, error) {
	var firstErr error
	if st := home.StatStamp(src.Path()); st != stamp {
		p, err := src.Load()
		if err == nil {
			sel.SetPool(p)
			stamp = st
		} else {
			firstErr = err
		}
	}
	v := sel.cur.Load()
	keep := func(id string) bool { return v.indexOf(id) > 0 }
	if err := sel.Runtime().Sync(keep); err != nil && firstErr == nil {
		firstErr = err
	}
	return stamp, firstErr
}

// Watch calls Refresh on every tick of the selector's clock (every
// interval, on the real one) until ctx ends, then once more so the
// last news of this process reaches state.json. A broken store must not
// stop the proxy, only be reported: onErr hears each kind of failure once
// while it lasts (a full disk is one, whatever temporary file each write
// tried), and nil once when syncing works again. Each of also follows one
// more file of the home (aliases.json) on the same ticks, its failures
// reported with the pool's: one watcher keeps one rhythm, which the
// tests' hand-ticked clock drives.
func Watch(ctx context.Context, src PoolSource, sel *Selector, interval time.Duration, onErr func(error), also ...func() error) {
	tick, stop := sel.clock.NewTicker(interval)
	defer stop()
	stamp := home.Stamp{}
	var last string // the kind of the failure being reported, "" while in sync
	for {
		var err error
		stamp, err = look(src, sel, stamp, also)
		switch kind := failureKind(err); {
		case kind == last:
		case kind == "":
			onErr(nil) // recovered
		default:
			onErr(err)
		}
		last = failureKind(err)
		select {
		case <-ctx.Done():
			if err := sel.Runtime().Sync(nil); err != nil {
				onErr(err)
			}
			return
		case <-tick:
		}
	}
}

// look is one of Watch's looks: Refresh, then each follower. Watch runs on
// a goroutine of its own, outside any request's recover, so a bug met
// here (a panic) is returned as a bugError, a failure like any other.
func look(src PoolSource, sel *Selector, stamp home.Stamp, also []func() error) (next home.Stamp, err error) {
	next = stamp
	defer func() {
		if v := recover(); v != nil {
			err = &bugError{v: v, stack: debug.Stack()}
		}
	}()
	next, err = Refresh(src, sel, stamp)
	for _, follow := range also {
		err = errors.Join(err, follow())
	}
	return next, err
}
