// Package clock is rotor's one source of time. It imports only the
// standard library, so every layer, down to accounts/oauth and
// accounts/checkup, takes the same Clock, and a test that moves it moves
// everything that decides or records by time.
package clock

import "time"

// Clock is rotor's one source of time: the present, and tickers. Code
// takes it as a dependency (never time.Now or time.NewTicker directly for
// what it decides or records), so tests inject a clock they move, or
// tick, by hand (accounts/clock/clocktest). Only deadlines that bound a
// real wait (a socket read, a lock poll) read the system time directly: a
// test clock cannot make the OS wait less.
type Clock interface {
	Now() time.Time
	// NewTicker delivers a tick every d on c until stop is called.
	NewTicker(d time.Duration) (c <-chan time.Time, stop func())
}

// System is the real clock.
type System struct{}

// Now returns time.Now().
func (System) Now() time.Time { return time.Now() }

// NewTicker is time.NewTicker.
func (System) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}
