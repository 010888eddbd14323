package main

import (
	"bytes"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The week generator (docs/PERFORMANCE.md): the same file makes the same weeks; the
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

// docs/PERFORMANCE.md's ratio: (blocked + 60 min) / (bound + 60 min), 1 when both
// are zero, near the plain ratio when both are hours.
func TestRatioToTheBound(t *testing.T) {
	t.Parallel()
	h := func(m float64) time.Duration { return time.Duration(m * float64(time.Minute)) }
	for _, c := range []struct {
		blocked, bound float64
		want           float64
	}{{0, 0, 1}, {60, 0, 2}, {540, 240, 2}, {0, 60, 0.5}} {
		if got := ratio(h(c.blocked), h(c.bound)); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("ratio(%v, %v) = %v, want %v", c.blocked, c.bound, got, c.want)
		}
	}
	if m := median([]float64{1, 2, 3, 4}); m != 2.5 {
		t.Errorf("median %v", m)
	}
}

// make sim prints, after the published weeks, a docs/PERFORMANCE.md table per workload
// with a line for every policy and rotor's verdict.
func TestRunPrintsTheTableAgainstTheBound(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(&out, &options{dir: workloads, only: "solo-2-plus"}); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if !strings.Contains(text, "### Against the offline bound") || !strings.Contains(text, "#### solo-2-plus, 64 weeks (weeks/1)") ||
		!strings.Contains(text, "rotor (--credits last-resort) against the targets:") ||
		!strings.Contains(text, "rotor with the pool's accounts listed the other way round") ||
		!strings.Contains(text, "rotor against each baseline alone, weeks no worse: round-robin ") {
		t.Fatalf("output:\n%s", text)
	}
	for _, p := range Policies {
		if strings.Count(text, "| "+p+" | ") != 2 {
			t.Errorf("%s: not in both tables", p)
		}
	}
}

// The mirrored pool holds the same accounts the other way round, and the
// workload it came from is left as it was.
func TestMirroredListsTheAccountsTheOtherWayRound(t *testing.T) {
	t.Parallel()
	w, err := LoadWorkload(filepath.Join(workloads, "team-6-mixed.json"))
	if err != nil {
		t.Fatal(err)
	}
	before := slices.Clone(w.Accounts)
	m := mirrored(w)
	if !slices.Equal(w.Accounts, before) {
		t.Fatal("mirrored changed the workload it read")
	}
	for i, a := range m.Accounts {
		if a != before[len(before)-1-i] {
			t.Fatalf("account %d of the mirror is %+v, want %+v", i, a, before[len(before)-1-i])
		}
	}
	if len(m.Accounts) != len(before) || m.Accounts[0] == m.Accounts[len(m.Accounts)-1] {
		t.Fatalf("the team's first and last accounts are alike, so the test proves nothing: %+v", m.Accounts)
	}
}
