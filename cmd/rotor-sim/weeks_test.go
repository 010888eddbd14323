package main

import (
	"path/filepath"
	"slices"
	"testing"
)

// The week generator (SPEC §18): the same file makes the same weeks; the
// demand lands near what was drawn, within 0.8×-1.3×; some weeks have
// credits, some a model of its own, some both.
func TestWeeksAreFixedAndSpanTheDemand(t *testing.T) {
	t.Parallel()
	g, err := LoadWeeks(filepath.Join(workloads, "weeks", "weeks.json"))
	if err != nil {
		t.Fatal(err)
	}
	if g.Weeks < 64 {
		t.Fatalf("%d weeks, want 64 or more", g.Weeks)
	}
	ws, err := loadAll(workloads, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		credits, model, both := 0, 0, 0
		for i := range g.Weeks {
			d := g.Week(w, i)
			if again := g.Week(w, i); !slices.Equal(d.wk.reqs, again.wk.reqs) {
				t.Fatalf("%s week %d: not the same twice", w.Name, i)
			}
			if d.demand < 0.8 || d.demand > 1.3 || d.actual < 0.75 || d.actual > 1.35 {
				t.Errorf("%s week %d: demand drawn %.2f, got %.2f", w.Name, i, d.demand, d.actual)
			}
			c := slices.ContainsFunc(d.w.Accounts, func(a AccountSpec) bool { return a.Credits > 0 })
			if c {
				credits++
			}
			if d.w.Model != nil {
				model++
				if c {
					both++
				}
			}
		}
		if credits == 0 || model == 0 || both == 0 || credits == g.Weeks || model == g.Weeks {
			t.Errorf("%s: %d weeks with credits, %d with a model of its own, %d both, of %d", w.Name, credits, model, both, g.Weeks)
		}
		t.Logf("%s: %d weeks with credits, %d with a model of its own, %d both", w.Name, credits, model, both)
	}
}
