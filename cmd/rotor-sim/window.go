package main

import (
	"math"
	"time"

	"github.com/rotorproxy/rotor/rotation"
)

// Window lengths of the model: the backend's primary and secondary windows
// as x-codex-primary-window-minutes and x-codex-secondary-window-minutes
// report them.
const (
	fiveHours = 5 * time.Hour
	oneWeek   = 7 * 24 * time.Hour
)

// window is one usage window of an account: a capacity in tokens, used up
// by requests, that starts at the first request after it was last reset
// and resets (empties) when its length has passed.
type window struct {
	length   time.Duration
	capacity float64
	used     float64   // tokens
	resetsAt time.Time // zero while the window has not started
	// expired counts tokens of capacity a reset threw away unused: the
	// quota that was lost.
	expired float64
}

// at brings w to now: a window whose time is up resets, and stays
// unstarted until its next use.
func (w *window) at(now time.Time) {
	if !w.resetsAt.IsZero() && !now.Before(w.resetsAt) {
		w.expired += max(w.capacity-w.used, 0)
		w.used, w.resetsAt = 0, time.Time{}
	}
}

// full reports whether w refuses requests until it resets. The request
// that crosses the capacity is still served, as the backend does.
func (w *window) full() bool { return w.used >= w.capacity }

// use charges tokens to w, starting it if it had not started.
func (w *window) use(now time.Time, tokens float64) {
	if w.resetsAt.IsZero() {
		w.resetsAt = now.Add(w.length)
	}
	w.used += tokens
}

// report is w as the backend's x-codex-* headers show it: a whole used
// percent, the length in minutes, the reset to the second; nil before
// the window has started, when there is nothing to report.
func (w *window) report() *rotation.Window {
	if w.resetsAt.IsZero() {
		return nil
	}
	return &rotation.Window{
		UsedPercent:   min(math.Round(w.used/w.capacity*100), 100),
		WindowMinutes: int(w.length / time.Minute),
		ResetsAt:      w.resetsAt.Truncate(time.Second),
	}
}

// account is one account of the model: a five-hour and a weekly window.
type account struct {
	id      string
	label   string
	windows [2]window // five-hour, weekly
}

// at brings both windows to now.
func (a *account) at(now time.Time) {
	for i := range a.windows {
		a.windows[i].at(now)
	}
}

// blockedUntil is when a can serve again: zero when it can now, else the
// latest reset among its full windows.
func (a *account) blockedUntil() time.Time {
	var until time.Time
	for i := range a.windows {
		if w := &a.windows[i]; w.full() && w.resetsAt.After(until) {
			until = w.resetsAt
		}
	}
	return until
}

// serve charges a request of tokens to both windows.
func (a *account) serve(now time.Time, tokens float64) {
	for i := range a.windows {
		a.windows[i].use(now, tokens)
	}
}

// quota is what the answer's headers tell the proxy about a.
func (a *account) quota(now time.Time) rotation.Quota {
	return rotation.Quota{Primary: a.windows[0].report(), Secondary: a.windows[1].report(), ObservedAt: now}
}
