package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"time"
)

// Workload is one file of testdata/sim: the pool, and the generator and
// seed that make its week of requests.
type Workload struct {
	Name  string `json:"name"`
	About string `json:"about"`
	// Start is the first instant of the replay (in testdata/sim, a Monday
	// at midnight UTC).
	Start    time.Time       `json:"start"`
	Days     int             `json:"days"`
	Plans    map[string]Plan `json:"plans"`
	Accounts []AccountSpec   `json:"accounts"`
	// Model, when set, is a model metered by a limit family of its own
	// (docs/selection.md) that some conversations use.
	Model     *ModelSpec `json:"model,omitempty"`
	Generator Generator  `json:"generator"`
}

// ModelSpec is a model the backend meters against a limit family of its
// own (docs/selection.md): every account has that family's five-hour and weekly
// windows beside its main ones, each Capacity times the main window's
// capacity of its plan, starting at first use like them. Share of the
// conversations use the model (each drawn on its own, from a stream of
// its own, so a week with the model has the same requests at the same
// times as the week without it).
type ModelSpec struct {
	Name     string  `json:"name"` // the family's limit name: the model
	ID       string  `json:"id"`   // the family's limit id
	Share    float64 `json:"share"`
	Capacity float64 `json:"capacity"`
}

// mainModel is the model every other conversation asks for: the main
// family meters it.
const mainModel = "gpt-5.3-codex"

// Plan is what one account of a plan may use: tokens per five-hour window
// and per weekly window.
type Plan struct {
	FiveHourTokens float64 `json:"five_hour_tokens"`
	WeeklyTokens   float64 `json:"weekly_tokens"`
}

// AccountSpec is one account of the pool. FiveHour and Weekly, when set,
// are windows already running when the replay starts (the account was
// used before it), as rotor's usage read at serve start sees them.
type AccountSpec struct {
	Label    string         `json:"label"`
	Plan     string         `json:"plan"`
	FiveHour *RunningWindow `json:"five_hour,omitempty"`
	Weekly   *RunningWindow `json:"weekly,omitempty"`
	// Credits, when positive, is the account's credits balance in tokens
	// (docs/selection.md): once a window of a family is full the backend keeps
	// answering and spends them, until the balance is gone.
	Credits float64 `json:"credits_tokens,omitempty"`
}

// RunningWindow is a window that started before the replay.
type RunningWindow struct {
	UsedPercent     float64 `json:"used_percent"`
	ResetsInMinutes int     `json:"resets_in_minutes"`
}

// GeneratorKind names the one generator, and its version: a change to
// the generator that changes its output gets a new name.
const GeneratorKind = "coding-week/1"

// Generator makes a week of bursty coding from Seed: every person of
// People works the sessions of the day (weekday or weekend); each
// session's conversations start at random (a Poisson process at
// ConversationsPerHour times the person's intensity that day, drawn from
// Intensity), so conversations overlap the way parallel agents do; each
// conversation has Turns turns, TurnGapMinutes apart, each a request of
// TokensPerTurn tokens (input, cached input and output together).
type Generator struct {
	Kind                 string        `json:"kind"`
	Seed                 uint64        `json:"seed"`
	People               int           `json:"people"`
	Weekday              []SessionSpec `json:"weekday"`
	Weekend              []SessionSpec `json:"weekend"`
	Intensity            [2]float64    `json:"intensity"`
	ConversationsPerHour float64       `json:"conversations_per_hour"`
	Turns                [2]int        `json:"turns"`
	TurnGapMinutes       [2]float64    `json:"turn_gap_minutes"`
	TokensPerTurn        [2]float64    `json:"tokens_per_turn"`
}

// SessionSpec is a stretch of work that happens on a day with
// Probability, starting at Start (hh:mm) give or take JitterMinutes and
// lasting Minutes give or take the same.
type SessionSpec struct {
	Start         string  `json:"start"`
	Minutes       int     `json:"minutes"`
	JitterMinutes int     `json:"jitter_minutes"`
	Probability   float64 `json:"probability"`
}

// request is one request of the replay: a turn of a conversation.
type request struct {
	at     time.Time
	conv   string
	tokens float64
	fam    int // 0: the main family; 1: the workload's Model
}

// span is a stretch of time, [from, to).
type span struct{ from, to time.Time }

// week is a workload expanded: its requests in time order, and for each
// person the stretches when they were working (a session, until the last
// turn of the conversations started in it), merged, in time order.
type week struct {
	reqs    []request
	working [][]span
}

// LoadWorkload reads and checks a workload file.
func LoadWorkload(path string) (*Workload, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var w Workload
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := w.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &w, nil
}

// check refuses a workload the replay could not make sense of.
func (w *Workload) check() error {
	g := &w.Generator
	switch {
	case w.Name == "":
		return errors.New("no name")
	case w.Days < 1 || w.Days > 28:
		return errors.New("days must be 1 to 28")
	case len(w.Accounts) < 1:
		return errors.New("no account")
	case g.Kind != GeneratorKind:
		return fmt.Errorf("generator %q, want %q", g.Kind, GeneratorKind)
	case g.People < 1 || g.ConversationsPerHour <= 0:
		return errors.New("generator: people and conversations_per_hour must be positive")
	case g.Turns[0] < 1 || g.Turns[1] < g.Turns[0] || g.TurnGapMinutes[1] < g.TurnGapMinutes[0] ||
		g.TokensPerTurn[0] <= 0 || g.TokensPerTurn[1] < g.TokensPerTurn[0] || g.Intensity[1] < g.Intensity[0]:
		return errors.New("generator: a [low, high] range is empty")
	}
	for _, a := range w.Accounts {
		p, ok := w.Plans[a.Plan]
		if !ok {
			return fmt.Errorf("account %q: unknown plan %q", a.Label, a.Plan)
		}
		if p.FiveHourTokens <= 0 || p.WeeklyTokens <= 0 {
			return fmt.Errorf("plan %q: capacities must be positive", a.Plan)
		}
		if a.Credits < 0 {
			return fmt.Errorf("account %q: credits must not be negative", a.Label)
		}
	}
	if m := w.Model; m != nil && (m.Name == "" || m.ID == "" || m.Share < 0 || m.Share > 1 || m.Capacity <= 0) {
		return errors.New("model: name and id needed, share 0 to 1, capacity positive")
	}
	for _, s := range slices.Concat(g.Weekday, g.Weekend) {
		if _, err := time.Parse("15:04", s.Start); err != nil {
			return fmt.Errorf("session start %q: %w", s.Start, err)
		}
		if s.Minutes < 0 || s.JitterMinutes < 0 || s.Probability < 0 || s.Probability > 1 {
			return fmt.Errorf("session at %s: minutes and jitter must not be negative, probability 0 to 1", s.Start)
		}
	}
	return nil
}

// End is the instant the replay stops.
func (w *Workload) End() time.Time { return w.Start.Add(time.Duration(w.Days) * 24 * time.Hour) }

// expand runs the generator: the week's requests and working time.
func (w *Workload) expand() *week {
	g := &w.Generator
	r := rand.New(rand.NewPCG(g.Seed, 0x5eed))
	models := rand.New(rand.NewPCG(g.Seed, 0x40de1)) // which conversations use w.Model
	wk := &week{working: make([][]span, g.People)}
	conv := 0
	for d := range w.Days {
		day := w.Start.AddDate(0, 0, d)
		specs := g.Weekday
		if wd := day.Weekday(); wd == time.Saturday || wd == time.Sunday {
			specs = g.Weekend
		}
		for p := range g.People {
			rate := g.ConversationsPerHour * between(r, g.Intensity[0], g.Intensity[1])
			for _, s := range specs {
				if r.Float64() >= s.Probability {
					continue
				}
				from, to := s.span(r, day)
				work := span{from, to}
				for t := from.Add(arrival(r, rate)); t.Before(to); t = t.Add(arrival(r, rate)) {
					conv++
					turns := g.conversation(r, t, fmt.Sprintf("p%d-c%d", p+1, conv))
					if w.Model != nil && models.Float64() < w.Model.Share {
						for i := range turns {
							turns[i].fam = 1
						}
					}
					wk.reqs = append(wk.reqs, turns...)
					work.to = later(work.to, turns[len(turns)-1].at.Add(time.Minute))
				}
				wk.working[p] = append(wk.working[p], work)
			}
		}
	}
	end := w.End()
	wk.reqs = slices.DeleteFunc(wk.reqs, func(q request) bool { return !q.at.Before(end) })
	slices.SortStableFunc(wk.reqs, func(a, b request) int { return a.at.Compare(b.at) })
	for p := range wk.working {
		wk.working[p] = merge(wk.working[p], end)
	}
	return wk
}

// merge sorts spans, joins those that overlap and cuts them at end.
func merge(spans []span, end time.Time) []span {
	slices.SortFunc(spans, func(a, b span) int { return a.from.Compare(b.from) })
	var out []span
	for _, s := range spans {
		s.to = earlier(s.to, end)
		if !s.from.Before(s.to) {
			continue
		}
		if n := len(out); n > 0 && !s.from.After(out[n-1].to) {
			out[n-1].to = later(out[n-1].to, s.to)
			continue
		}
		out = append(out, s)
	}
	return out
}

// within is how much of [from, to) falls in spans.
func within(spans []span, from, to time.Time) time.Duration {
	var d time.Duration
	for _, s := range spans {
		a, b := later(s.from, from), earlier(s.to, to)
		if a.Before(b) {
			d += b.Sub(a)
		}
	}
	return d
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// conversation is the turns of one conversation that starts at t.
func (g *Generator) conversation(r *rand.Rand, t time.Time, key string) []request {
	n := g.Turns[0] + r.IntN(g.Turns[1]-g.Turns[0]+1)
	out := make([]request, 0, n)
	for i := range n {
		if i > 0 {
			gap := between(r, g.TurnGapMinutes[0], g.TurnGapMinutes[1])
			t = t.Add(time.Duration(gap * float64(time.Minute)))
		}
		out = append(out, request{at: t, conv: key, tokens: between(r, g.TokensPerTurn[0], g.TokensPerTurn[1])})
	}
	return out
}

// span is when the session happens on day: its start and end, jittered.
func (s *SessionSpec) span(r *rand.Rand, day time.Time) (time.Time, time.Time) {
	hm, _ := time.Parse("15:04", s.Start)
	jitter := func() time.Duration {
		return time.Duration(r.IntN(2*s.JitterMinutes+1)-s.JitterMinutes) * time.Minute
	}
	from := day.Add(time.Duration(hm.Hour())*time.Hour + time.Duration(hm.Minute())*time.Minute + jitter())
	return from, from.Add(time.Duration(s.Minutes)*time.Minute + jitter())
}

// arrival is the wait for the next conversation of a Poisson process of
// rate conversations an hour.
func arrival(r *rand.Rand, rate float64) time.Duration {
	return time.Duration(r.ExpFloat64() / rate * float64(time.Hour))
}

func between(r *rand.Rand, lo, hi float64) float64 { return lo + r.Float64()*(hi-lo) }
