package main

import (
	"math"
	"strconv"
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

// account is one account of the model: a five-hour and a weekly window
// for each limit family (docs/selection.md: the main one first, then the model
// of the workload's own family, when it has one), and credits.
type account struct {
	id    string
	label string
	// fams holds each family's windows: five-hour, weekly. fams[0] is
	// the main family.
	fams [][2]window
	// hasCredits: the account holds credits (the workload gave it a
	// balance); credits is the balance left, in tokens, and spent what
	// requests served on credits used.
	hasCredits     bool
	credits, spent float64
}

// at brings every window to now.
func (a *account) at(now time.Time) {
	for f := range a.fams {
		for i := range a.fams[f] {
			a.fams[f][i].at(now)
		}
	}
}

// fullUntil is when family f's windows can serve again: zero when none
// is full, else the latest reset among its full windows.
func (a *account) fullUntil(f int) time.Time {
	var until time.Time
	for i := range a.fams[f] {
		if w := &a.fams[f][i]; w.full() && w.resetsAt.After(until) {
			until = w.resetsAt
		}
	}
	return until
}

// blockedUntil is when a can serve a request of family f again: zero
// when it can now (a window has room, or it is full and the account
// still has credits to spend, as the backend does), else the latest
// reset among the family's full windows.
func (a *account) blockedUntil(f int) time.Time {
	if a.credits > 0 {
		return time.Time{}
	}
	return a.fullUntil(f)
}

// serve charges a request of tokens to family f's windows, or, when one
// of them is full, to the credits (the request that crosses the balance
// is still served); it reports whether it was served on credits.
func (a *account) serve(now time.Time, f int, tokens float64) (onCredits bool) {
	if !a.fullUntil(f).IsZero() {
		a.credits = max(a.credits-tokens, 0)
		a.spent += tokens
		return true
	}
	for i := range a.fams[f] {
		a.fams[f][i].use(now, tokens)
	}
	return false
}

// quota is what the answer's headers tell the proxy about a: the main
// windows, each other family's (named by the model it meters), and the
// credits.
func (a *account) quota(now time.Time, m *ModelSpec) rotation.Quota {
	q := rotation.Quota{Primary: a.fams[0][0].report(), Secondary: a.fams[0][1].report(), ObservedAt: now}
	if m != nil && len(a.fams) > 1 {
		q.Families = []rotation.Family{{ID: m.ID, LimitName: m.Name, Primary: a.fams[1][0].report(), Secondary: a.fams[1][1].report()}}
	}
	if a.hasCredits {
		q.Credits = &rotation.Credits{HasCredits: a.credits > 0, Balance: strconv.FormatFloat(a.credits, 'f', -1, 64)}
	}
	return q
}
