package rotation

import (
	"math"
	"testing"
	"time"
)

// docs/selection.md in selection: limits per family, credits as a last resort,
// workspace limits that wait for a usage read, and numbers clamped at the
// one door quota enters by.

const sonic = "gpt-5.2-codex-sonic"

// quotaAt is a quota whose main five-hour window is used used percent,
// resetting in an hour, with credits c and families fams.
func quotaAt(now time.Time, used float64, c *Credits, fams ...Family) Quota {
	return Quota{
		Primary:  &Window{UsedPercent: used, WindowMinutes: 300, ResetsAt: now.Add(time.Hour)},
		Credits:  c,
		Families: fams,
	}
}

// A usage limit of the family that meters one model keeps the account for
// that model only: other models keep using it, and the refusal for the
// model is that family's reset.
func TestFamilyLimitKeepsTheAccountForOtherModels(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	now := f.clk.Now()
	fam := Family{ID: "codex_bengalfox", LimitName: sonic, Primary: &Window{UsedPercent: 100, WindowMinutes: 300, ResetsAt: now.Add(2 * time.Hour)}}
	f.rt.SetQuota(f.id(1), quotaAt(now, 10, nil, fam))
	f.rt.Record(f.id(1), Limited, 429, Limit{Family: "codex-bengalfox", Until: now.Add(2 * time.Hour)})

	if c, ref := f.sel.Pick(&Request{Model: "gpt-5-codex"}); ref != nil || c.Index != 1 || c.Family != MainFamily {
		t.Fatalf("another model: %+v %+v; want account 1 on the main family", c, ref)
	}
	_, ref := f.sel.Pick(&Request{Model: sonic})
	if ref == nil || ref.SkipReasons[1] != SkipRateLimited || !ref.AllRateLimited || !ref.ResetAt.Equal(now.Add(2*time.Hour)) || ref.Family != "codex_bengalfox" {
		t.Fatalf("the limited model: %+v; want rate-limited until its family resets", ref)
	}
	// The main family's limit does not keep the family's model either.
	f.rt.RateLimited(f.id(1), now.Add(5*time.Hour))
	f.clk.Advance(2*time.Hour + time.Second)
	if c, ref := f.sel.Pick(&Request{Model: sonic}); ref != nil || c.Family != "codex_bengalfox" {
		t.Fatalf("after the family's reset: %+v %+v", c, ref)
	}
	if _, ref := f.sel.Pick(&Request{Model: "gpt-5-codex"}); ref == nil || ref.SkipReasons[1] != SkipRateLimited {
		t.Fatalf("the main family is limited: %+v", ref)
	}
}

// last-resort: while any account has included quota left (even 3%, which
// the deferral counts as nearly spent), no request goes to an account
// that would spend credits; once none has, the credits account serves,
// and the choice says it spends credits.
func TestCreditsAreTheLastResort(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	now := f.clk.Now()
	f.rt.SetQuota(f.id(1), quotaAt(now, 100, &Credits{HasCredits: true, Balance: "12.50"}))
	f.rt.SetQuota(f.id(2), quotaAt(now, 97, nil))
	for i := range 6 {
		c, ref := f.sel.Pick(&Request{})
		if ref != nil || c.Index != 2 || c.OnCredits || c.Why != WhyDeferred {
			t.Fatalf("request %d: %+v %+v; want account 2 (quota left), not credits", i, c, ref)
		}
		f.clk.Advance(time.Second)
	}
	f.rt.RateLimited(f.id(2), now.Add(time.Hour))
	c, ref := f.sel.Pick(&Request{})
	if ref != nil || c.Index != 1 || !c.OnCredits || c.Why != WhyOnCredits {
		t.Fatalf("no quota left anywhere: %+v %+v; want account 1 on credits", c, ref)
	}
	if i, why := f.sel.Next(); i != 1 || why != WhyOnCredits {
		t.Errorf("Next = %d %q", i, why)
	}
}

// A conversation on an account that goes on credits moves to an account
// with quota under last-resort; with no such account it stays.
func TestAffinityYieldsToQuotaOverCredits(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	now := f.clk.Now()
	f.sel.Bind("conv", f.id(1))
	f.rt.SetQuota(f.id(1), quotaAt(now, 100, &Credits{Unlimited: true}))
	if c := f.pick(&Request{AffinityKey: "conv"}); c != 2 {
		t.Fatalf("picked %d; want 2, which has quota", c)
	}
	f.sel.Bind("conv2", f.id(1))
	f.rt.SetQuota(f.id(2), quotaAt(now, 100, nil))
	f.rt.RateLimited(f.id(2), now.Add(time.Hour))
	if c, _ := f.sel.Pick(&Request{AffinityKey: "conv2"}); c.Index != 1 || c.Why != WhyAffinity || !c.OnCredits {
		t.Fatalf("%+v; want account 1 by affinity, on credits", c)
	}
}

// never: an account on credits is skipped, and the refusal is a usage
// limit that says credits were held back, with the window's reset.
func TestCreditsNeverHeldBack(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	f.sel.SetCredits(CreditsNever)
	now := f.clk.Now()
	f.rt.SetQuota(f.id(1), quotaAt(now, 100, &Credits{HasCredits: true, Balance: "3"}))
	f.rt.RateLimited(f.id(2), now.Add(3*time.Hour))
	_, ref := f.sel.Pick(&Request{})
	if ref == nil || !ref.CreditsHeldBack || !ref.AllRateLimited || ref.SkipReasons[1] != SkipCreditsHeldBack ||
		!ref.ResetAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("refusal %+v; want credits held back, reset in an hour", ref)
	}
	// A balance of zero is no credits: the account is merely deferred.
	f.rt.SetQuota(f.id(1), quotaAt(now, 100, &Credits{HasCredits: true, Balance: "0"}))
	if c := f.pick(&Request{}); c != 1 {
		t.Fatalf("picked %d; want 1 (no credits to hold back)", c)
	}
}

// spend: credits count as quota, so an account on credits beats one that
// the deferral counts as nearly spent.
func TestCreditsSpend(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	f.sel.SetCredits(CreditsSpend)
	now := f.clk.Now()
	f.rt.SetQuota(f.id(1), quotaAt(now, 100, &Credits{HasCredits: true, Balance: "12.50"}))
	f.rt.SetQuota(f.id(2), quotaAt(now, 97, nil))
	if c, _ := f.sel.Pick(&Request{}); c.Index != 1 || !c.OnCredits || c.Why != WhyBestScore {
		t.Fatalf("%+v; want account 1, spending credits as quota", c)
	}
	if _, err := ParseCreditsPolicy("sometimes"); err == nil {
		t.Error("an unknown policy parsed")
	}
	if p, err := ParseCreditsPolicy(""); err != nil || p != CreditsLastResort {
		t.Errorf("default = %q, %v", p, err)
	}
}

// A workspace limit waits for a usage read, not a time: it holds for the
// longest wait, names its reason, and a lift ends it in every process.
func TestWorkspaceLimitWaitsForARead(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	now := f.clk.Now()
	f.rt.Record(f.id(1), Limited, 429, Limit{Until: now.Add(time.Minute), Reason: "workspace_owner_credits_depleted"})
	_, ref := f.sel.Pick(&Request{})
	if ref == nil || ref.LimitReason != "workspace_owner_credits_depleted" || !ref.ResetAt.Equal(now.Add(MaxRateLimit)) {
		t.Fatalf("refusal %+v; want the workspace reason, waiting for a read", ref)
	}
	if err := f.rt.Sync(nil); err != nil {
		t.Fatal(err)
	}
	other := NewRuntime(f.dir, f.clk)
	if err := other.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if st := other.Snapshot(f.id(1)); st.LimitReason != "workspace_owner_credits_depleted" {
		t.Fatalf("another process reads %+v", st)
	}
	f.rt.LiftRateLimit(f.id(1))
	if c := f.pick(&Request{}); c != 1 {
		t.Fatalf("after the lift: %d", c)
	}
	if err := f.rt.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if err := other.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if st := other.Snapshot(f.id(1)); st.LimitReason != "" || !st.RateLimitedUntil.IsZero() {
		t.Fatalf("the lift did not reach another process: %+v", st)
	}
}

// A snapshot that tells part of the meter (one family's event, credits
// alone) keeps the rest; a whole one (a usage read) replaces it.
func TestQuotaSnapshotsMerge(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	now := f.clk.Now()
	fam := Family{ID: "codex_bengalfox", LimitName: sonic, Primary: &Window{UsedPercent: 30}}
	f.rt.SetQuota(f.id(1), quotaAt(now, 40, &Credits{HasCredits: true, Balance: "5"}, fam))
	f.clk.Advance(time.Second)
	fam.Primary = &Window{UsedPercent: 35}
	f.rt.SetQuota(f.id(1), Quota{Families: []Family{fam}})
	q := f.rt.Snapshot(f.id(1)).Quota
	if q.Primary == nil || q.Primary.UsedPercent != 40 || q.Credits == nil || q.Credits.Balance != "5" ||
		q.Family("codex_bengalfox") == nil || q.Family("codex_bengalfox").Primary.UsedPercent != 35 {
		t.Fatalf("after a family's event: %+v", q)
	}
	f.clk.Advance(time.Second)
	f.rt.SetQuota(f.id(1), Quota{Workspace: true, Whole: true, Credits: &Credits{}})
	q = f.rt.Snapshot(f.id(1)).Quota
	if q.Primary != nil || len(q.Families) != 0 || !q.Workspace || q.Credits.HasCredits {
		t.Fatalf("after a whole read: %+v", q)
	}
}

// Numbers from the backend are clamped where quota enters: a used share
// within 0-100, reset credits and balances not below zero nor past a
// ceiling, and a family count bounded.
func TestHostileQuotaNumbersAreClamped(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	now := f.clk.Now()
	neg, huge := -5, math.MaxInt
	f.rt.SetQuota(f.id(1), Quota{
		Primary:      &Window{UsedPercent: -5, WindowMinutes: 300, ResetsAt: now.Add(time.Hour)},
		Secondary:    &Window{UsedPercent: 1e308, WindowMinutes: 10080, ResetsAt: now.Add(time.Hour)},
		ResetCredits: &neg,
		Credits:      &Credits{HasCredits: true, Balance: "-3"},
	})
	q := f.rt.Snapshot(f.id(1)).Quota
	if q.Primary.UsedPercent != 0 || q.Secondary.UsedPercent != 100 || *q.ResetCredits != 0 || q.Credits.Balance != "0" || q.Credits.Holds() {
		t.Fatalf("kept %+v %+v %d %+v", q.Primary, q.Secondary, *q.ResetCredits, q.Credits)
	}
	if q.FullUntil(MainFamily, now).IsZero() {
		t.Error("a share above 100 is a full window")
	}
	fams := make([]Family, 40)
	for i := range fams {
		fams[i] = Family{ID: "f" + string(rune('a'+i%26)) + string(rune('a'+i/26)), LimitName: "m"}
	}
	f.clk.Advance(time.Second)
	f.rt.SetQuota(f.id(1), Quota{ResetCredits: &huge, Credits: &Credits{Balance: "1e308"}, Families: fams})
	q = f.rt.Snapshot(f.id(1)).Quota
	if *q.ResetCredits != maxResetCredits || len(q.Families) != maxFamilies || q.Credits.Balance != "1000000000" {
		t.Fatalf("kept %d reset credits, %d families, balance %q", *q.ResetCredits, len(q.Families), q.Credits.Balance)
	}
}
