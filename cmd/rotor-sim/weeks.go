package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"time"
)

// WeeksKind names the week generator and its version: a change to it
// that changes the weeks it makes gets a new name, in a commit of its
// own that says why (docs/PERFORMANCE.md: the generator is not tuned after seeing a
// result), and docs/PERFORMANCE.md keeps the table of every version.
const WeeksKind = "weeks/1"

// Weeks is testdata/sim/weeks/weeks.json: how the weeks of docs/PERFORMANCE.md are
// drawn from each workload. Week i of workload w is drawn from its own
// random stream (Seed+i, and w's name), so adding a workload or a week
// changes no other week. Each week keeps w's people, sessions, plans and
// accounts, and draws, always in this order and whether or not they are
// used:
//
//   - the generator's seed;
//   - for each account, whether a weekly window was already running at
//     the start (RunningProbability), its used percent (RunningUsed) and
//     its reset (a minute to seven days away);
//   - whether the week has a model of its own family (ModelProbability),
//     the share of conversations that use it (ModelShare) and its
//     windows' capacity as a share of the main ones (ModelCapacity);
//   - whether one account holds credits (CreditsProbability), which one,
//     and its balance as a share of what the pool's main windows hold in
//     the week (CreditsShare);
//   - the demand (Demand): the conversations an hour are scaled (twice,
//     from the week's own tokens) so that the week's tokens come near that
//     many times what the pool's windows hold in the week, and then every
//     request's tokens by what is left, so that they are exactly that.
//
// What the pool's windows hold in a week: for each account, what its
// running weekly window had left, and one whole weekly window if that one
// resets within the week (or none ran); and the same for the model's
// family when the week has one. Credits are not counted: they are there
// for when the windows are not enough.
type Weeks struct {
	Kind               string     `json:"kind"`
	About              string     `json:"about"`
	Weeks              int        `json:"weeks"`
	Seed               uint64     `json:"seed"`
	Demand             [2]float64 `json:"demand"`
	RunningProbability float64    `json:"running_probability"`
	RunningUsed        [2]float64 `json:"running_used_percent"`
	CreditsProbability float64    `json:"credits_probability"`
	CreditsShare       [2]float64 `json:"credits_share"`
	ModelProbability   float64    `json:"model_probability"`
	ModelName          string     `json:"model_name"`
	ModelID            string     `json:"model_id"`
	ModelShare         [2]float64 `json:"model_share"`
	ModelCapacity      [2]float64 `json:"model_capacity"`
}

// LoadWeeks reads and checks the week generator's file.
func LoadWeeks(path string) (*Weeks, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var g Weeks
	if err := dec.Decode(&g); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	switch {
	case g.Kind != WeeksKind:
		return nil, fmt.Errorf("%s: kind %q, want %q", path, g.Kind, WeeksKind)
	case g.Weeks < 1:
		return nil, fmt.Errorf("%s: no weeks", path)
	case g.Demand[0] <= 0 || g.Demand[1] < g.Demand[0] || g.CreditsShare[1] < g.CreditsShare[0] ||
		g.ModelShare[1] < g.ModelShare[0] || g.ModelCapacity[0] <= 0 || g.ModelCapacity[1] < g.ModelCapacity[0] ||
		g.RunningUsed[1] < g.RunningUsed[0]:
		return nil, fmt.Errorf("%s: a [low, high] range is empty or not positive", path)
	case g.ModelName == "" || g.ModelID == "":
		return nil, errors.New(path + ": model_name and model_id needed")
	}
	return &g, nil
}

// drawn is one generated week: the workload it replays, and the demand
// drawn for it and the one it got.
type drawn struct {
	w              *Workload
	wk             *week
	demand, actual float64
}

// Week is week i of w.
func (g *Weeks) Week(w *Workload, i int) *drawn {
	h := fnv.New64a()
	h.Write([]byte(w.Name))
	r := rand.New(rand.NewPCG(g.Seed+uint64(i), h.Sum64()))
	v := *w
	v.Generator.Seed = r.Uint64()
	v.Accounts = make([]AccountSpec, len(w.Accounts))
	for j, a := range w.Accounts {
		a.FiveHour, a.Weekly, a.Credits = nil, nil, 0
		running, used := r.Float64() < g.RunningProbability, between(r, g.RunningUsed[0], g.RunningUsed[1])
		resets := 1 + r.IntN(7*24*60)
		if running {
			a.Weekly = &RunningWindow{UsedPercent: used, ResetsInMinutes: resets}
		}
		v.Accounts[j] = a
	}
	hasModel := r.Float64() < g.ModelProbability
	share, capacity := between(r, g.ModelShare[0], g.ModelShare[1]), between(r, g.ModelCapacity[0], g.ModelCapacity[1])
	v.Model = nil
	if hasModel {
		v.Model = &ModelSpec{Name: g.ModelName, ID: g.ModelID, Share: share, Capacity: capacity}
	}
	hasCredits, holder := r.Float64() < g.CreditsProbability, r.IntN(len(v.Accounts))
	credits := between(r, g.CreditsShare[0], g.CreditsShare[1])
	if hasCredits {
		v.Accounts[holder].Credits = credits * v.holds(false)
	}
	d := &drawn{w: &v, demand: between(r, g.Demand[0], g.Demand[1])}
	want := d.demand * v.holds(true)
	for range 2 {
		d.wk = v.expand()
		if got := tokensOf(d.wk); got > 0 {
			v.Generator.ConversationsPerHour *= want / got
		}
	}
	d.wk = v.expand()
	// A new rate draws another week, so the rate only comes near: every
	// request's tokens are scaled by what is left.
	if got := tokensOf(d.wk); got > 0 {
		for j := range d.wk.reqs {
			d.wk.reqs[j].tokens *= want / got
		}
	}
	d.actual = tokensOf(d.wk) / v.holds(true)
	return d
}

// holds is what w's windows hold in its replay (see Weeks): the main
// ones, and with families the model's too.
func (w *Workload) holds(families bool) float64 {
	end := w.End()
	total := 0.0
	for _, a := range w.Accounts {
		p := w.Plans[a.Plan]
		switch r := a.Weekly; {
		case r == nil:
			total += p.WeeklyTokens
		case w.Start.Add(time.Duration(r.ResetsInMinutes) * time.Minute).Before(end):
			total += (1-r.UsedPercent/100)*p.WeeklyTokens + p.WeeklyTokens
		default:
			total += (1 - r.UsedPercent/100) * p.WeeklyTokens
		}
		if families && w.Model != nil {
			total += w.Model.Capacity * p.WeeklyTokens
		}
	}
	return total
}

func tokensOf(wk *week) float64 {
	t := 0.0
	for _, q := range wk.reqs {
		t += q.tokens
	}
	return t
}
