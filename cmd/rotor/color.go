package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/rotation"
)

// palette colours state words in human tables. Its zero value leaves text
// plain, which is what pipes, files and NO_COLOR get.
type palette struct{ on bool }

// ANSI colours. Each code, and the reset, has the same length whatever
// the colour, so a coloured column still lines up in text/tabwriter (which
// counts bytes): every cell of the column carries the same 9 extra bytes.
const (
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
	ansiRed    = "\x1b[31m"
	ansiPlain  = "\x1b[39m" // the terminal's own colour
	ansiReset  = "\x1b[0m"
)

// palette is the colouring for this run's stdout: on only for a terminal,
// and never with NO_COLOR (https://no-color.org) or TERM=dumb.
func (a *app) palette() palette {
	return palette{on: a.stdoutTTY && a.getenv("NO_COLOR") == "" && a.getenv("TERM") != "dumb"}
}

// stateColours maps the first word of a state (up to ':' or ' ') to its
// colour: serving green, waiting yellow, out of the rotation red.
var stateColours = map[string]string{
	"available": ansiGreen, "ready": ansiGreen, "ok": ansiGreen, "restored": ansiGreen, "done": ansiGreen,
	"rate-limited": ansiYellow, "cooling-down": ansiYellow, "circuit-open": ansiYellow,
	"delayed": ansiYellow, "warn": ansiYellow, "planned": ansiYellow,
	"disabled": ansiRed, "flagged": ansiRed, "unavailable": ansiRed, "missing": ansiRed,
	"error": ansiRed, "failed": ansiRed, "still-flagged": ansiRed,
}

// header is a column heading over a coloured column: plain, but carrying
// the same escape bytes as the cells below it so the column lines up.
func (p palette) header(s string) string {
	if !p.on {
		return s
	}
	return ansiPlain + s + ansiReset
}

// state colours a state cell by its first word.
func (p palette) state(s string) string {
	if !p.on {
		return s
	}
	word := s
	if i := strings.IndexAny(s, ": "); i >= 0 {
		word = s[:i]
	}
	c, ok := stateColours[word]
	if !ok {
		c = ansiPlain
	}
	return c + s + ansiReset
}

// barCells is how many cells a quota bar has: one per 10%.
const barCells = 10

// window draws a quota window as a bar of what is used, its percentage
// and the time to its reset: "███████░░░ 70% used, resets in 2h10m". On a
// terminal the bar is green, yellow or red by the headroom left, with
// the same escape bytes in every cell (a "-" included) so columns line up.
func (p palette) window(w *rotation.Window, now time.Time) string {
	if w == nil {
		return p.paint(ansiPlain, "-")
	}
	used := min(max(w.UsedPercent, 0), 100)
	full := int(used/100*barCells + 0.5)
	bar := strings.Repeat("█", full) + strings.Repeat("░", barCells-full)
	text := fmt.Sprintf(" %3.0f%% used", used)
	if !w.ResetsAt.IsZero() && w.ResetsAt.After(now) {
		text += ", resets in " + accounts.HumanDuration(w.ResetsAt.Sub(now))
	}
	return p.paint(headroomColour(used), bar) + text
}

// headroomColour is green below 70% used, yellow below 90%, red above.
func headroomColour(used float64) string {
	switch {
	case used >= 90:
		return ansiRed
	case used >= 70:
		return ansiYellow
	}
	return ansiGreen
}

// paint wraps s in colour c when the palette is on.
func (p palette) paint(c, s string) string {
	if !p.on {
		return s
	}
	return c + s + ansiReset
}

// windows are q's primary and secondary windows; nil for what is unknown.
func windows(q *rotation.Quota) (primary, secondary *rotation.Window) {
	if q == nil {
		return nil, nil
	}
	return q.Primary, q.Secondary
}
