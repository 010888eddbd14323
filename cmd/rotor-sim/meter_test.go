package main

import (
	"testing"
	"time"
)

// docs/selection.md in the model: an account with credits keeps answering once a
// window is full, spending them, until the balance is gone; then 429. A
// model with a family of its own fills only its own windows. rotor's
// selector (--credits last-resort) sends a request to credits only when
// no account has included quota left.
func TestCreditsAndAFamilyOfItsOwn(t *testing.T) {
	t.Parallel()
	w := tiny()
	w.Accounts[0].Credits = 150_000 // a: credits; b: none
	w.Model = &ModelSpec{Name: "gpt-5.2-codex-sonic", ID: "codex_bengalfox", Share: 0.5, Capacity: 0.5}
	nine := monday.Add(9 * time.Hour)
	wk := &week{working: [][]span{{{nine, nine.Add(5 * time.Hour)}}}}
	s, err := newSim(t.TempDir(), w, wk, PolicyRotor)
	if err != nil {
		t.Fatal(err)
	}
	s.clk.Advance(nine.Sub(s.clk.Now()))
	at := func(m int) time.Time { return nine.Add(time.Duration(m) * time.Minute) }
	req := func(m int, conv string, fam int, tokens float64) {
		s.clk.Advance(at(m).Sub(s.clk.Now()))
		s.request(request{at: at(m), conv: conv, tokens: tokens, fam: fam})
	}
	// The model's family holds 50,000 tokens in five hours on each
	// account: two requests of 60,000 fill both, the main windows stay
	// empty.
	req(0, "m1", 1, 60_000)
	req(1, "m2", 1, 60_000)
	for _, a := range s.accts {
		if a.fams[0][0].used != 0 || !a.fams[1][0].full() {
			t.Fatalf("%s: main used %v, family full %v", a.label, a.fams[0][0].used, a.fams[1][0].full())
		}
	}
	// A main-model request still finds room; no credits spent yet.
	req(2, "c1", 0, 10_000)
	if s.res.Served != 3 || s.res.Credits != 0 {
		t.Fatalf("served %d, credits %v", s.res.Served, s.res.Credits)
	}
	// The next model request: every account's family is full; only a's
	// credits can serve it (last resort), and does.
	req(3, "m3", 1, 100_000)
	if s.res.Served != 4 || s.res.Credits != 100_000 || s.res.CreditRequests != 1 || s.accts[0].credits != 50_000 {
		t.Fatalf("served %d, credits %v in %d, balance %v", s.res.Served, s.res.Credits, s.res.CreditRequests, s.accts[0].credits)
	}
	// The request that crosses the balance is served; the one after is
	// refused until the family's window resets: blocked until 14:00.
	req(4, "m3", 1, 100_000)
	req(5, "m3", 1, 1)
	if s.res.Served != 5 || s.accts[0].credits != 0 {
		t.Fatalf("served %d, balance %v", s.res.Served, s.accts[0].credits)
	}
	if want := 5*time.Hour - 5*time.Minute; s.res.Blocked != want {
		t.Fatalf("blocked %s, want %s", s.res.Blocked, want)
	}
}

// With room left on an account without credits, rotor does not spend
// the credits of a full one; a baseline that does not know of them does.
func TestRotorSpendsCreditsOnlyAsALastResort(t *testing.T) {
	t.Parallel()
	w := tiny()
	w.Accounts[0].Credits = 1_000_000
	w.Accounts[0].FiveHour = &RunningWindow{UsedPercent: 100, ResetsInMinutes: 300}
	nine := monday.Add(time.Hour) // a's five-hour window full until 5:00
	wk := &week{working: [][]span{{{nine, nine.Add(time.Hour)}}}}
	for i := range 10 {
		wk.reqs = append(wk.reqs, request{at: nine.Add(time.Duration(i) * time.Minute), conv: "c" + string(rune('a'+i)), tokens: 5000})
	}
	rotor, err := Replay(w, wk, PolicyRotor)
	if err != nil {
		t.Fatal(err)
	}
	fill, err := Replay(w, wk, PolicyFillFirst)
	if err != nil {
		t.Fatal(err)
	}
	if rotor.Served != 10 || rotor.Credits != 0 {
		t.Fatalf("rotor served %d, on credits %v tokens", rotor.Served, rotor.Credits)
	}
	if fill.Served != 10 || fill.Credits != 50_000 {
		t.Fatalf("fill-first served %d, on credits %v tokens %+v", fill.Served, fill.Credits, fill)
	}
}
