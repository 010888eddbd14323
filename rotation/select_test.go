package rotation

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/clock/clocktest"
	"github.com/rotorproxy/rotor/accounts/home"
)

// Unit tests of selection (docs/selection.md Selection) with a fake clock and an
// in-memory pool: no network, no sleeping.

// newFakeClock is a clock the test moves by hand. It starts at a fixed
// instant in the past, so nothing may depend on the real time.
func newFakeClock() *clocktest.Fake {
	return clocktest.Frozen(time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC))
}

// fixture is a selector over n enabled API-key accounts.
type fixture struct {
	t     *testing.T
	clk   *clocktest.Fake
	rt    *Runtime
	sel   *Selector
	pool  *accounts.Pool
	dir   string
	index map[string]int
}

func newFixture(t *testing.T, n int) *fixture {
	t.Helper()
	clk := newFakeClock()
	dir := t.TempDir()
	rt := NewRuntime(dir, clk)
	sel := NewSelector(rt, clk, 7)
	p := &accounts.Pool{Version: 1}
	for i := range n {
		p.AddAPIKey(fmt.Sprintf("acct-%d", i+1), "", clk.Now())
	}
	sel.SetPool(p)
	f := &fixture{t: t, clk: clk, rt: rt, sel: sel, pool: p, dir: dir, index: map[string]int{}}
	for i, a := range p.Accounts {
		f.index[a.ID] = i + 1
	}
	return f
}

func (f *fixture) id(i int) string { return f.pool.Accounts[i-1].ID }

// update changes the pool (a copy, as the store would produce) and
// installs it.
func (f *fixture) update(fn func(p *accounts.Pool)) {
	p := *f.pool
	p.Accounts = slices.Clone(f.pool.Accounts)
	fn(&p)
	f.pool = &p
	f.sel.SetPool(&p)
}

// pick picks for req and fails the test on a refusal.
func (f *fixture) pick(req *Request) int {
	f.t.Helper()
	c, ref := f.sel.Pick(req)
	if ref != nil {
		f.t.Fatalf("refused: %+v", ref)
	}
	return c.Index
}

// setStates installs arbitrary runtime states, the way another process
// would: through state.json and Sync.
func (f *fixture) setStates(states map[string]*AccountState) {
	f.t.Helper()
	data, err := json.Marshal(map[string]any{"version": 1, "accounts": states})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, home.StateFile), data, 0o600); err != nil {
		f.t.Fatal(err)
	}
	if err := f.rt.Sync(nil); err != nil {
		f.t.Fatal(err)
	}
}

func TestPickNeverChoosesAnUnusableAccount(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(20250314, 1))
	reasons := []string{CooldownAuthFailure, CooldownServerError, CooldownNetworkError, CooldownTokenInvalidated}
	for iter := range 400 {
		n := 1 + r.IntN(8)
		f := newFixture(t, n)
		now := f.clk.Now()
		// A deadline in the past or in the future, or none.
		deadline := func() time.Time {
			switch r.IntN(3) {
			case 0:
				return time.Time{}
			case 1:
				return now.Add(-time.Duration(1+r.IntN(3600)) * time.Second)
			}
			return now.Add(time.Duration(1+r.IntN(3600)) * time.Second)
		}
		states := map[string]*AccountState{}
		var attempted []string
		f.update(func(p *accounts.Pool) {
			for i := range p.Accounts {
				a := &p.Accounts[i]
				a.Enabled = r.IntN(5) != 0
				if r.IntN(8) == 0 {
					a.SetFlag(accounts.FlagTokenInvalid)
				}
				st := &AccountState{RateLimitedUntil: deadline(), CooldownUntil: deadline(), CircuitOpenUntil: deadline()}
				if !st.CooldownUntil.IsZero() {
					st.CooldownReason = reasons[r.IntN(len(reasons))]
				}
				if r.IntN(3) == 0 {
					st.Health, st.HealthAt = r.IntN(101), now.Add(-time.Duration(r.IntN(600))*time.Second)
				}
				if r.IntN(3) == 0 {
					st.Quota = &Quota{Primary: &Window{UsedPercent: float64(r.IntN(101)), ResetsAt: deadline()}, ObservedAt: now}
				}
				states[a.ID] = st
				if r.IntN(4) == 0 {
					attempted = append(attempted, a.ID)
				}
			}
		})
		f.setStates(states)
		if r.IntN(3) == 0 {
			f.sel.Bind("s:conv", f.id(1+r.IntN(n)))
		}
		usable := func(i int) bool {
			a := &f.pool.Accounts[i-1]
			_, flagged := a.Flagged()
			why, _ := states[a.ID].Availability(now)
			return a.Enabled && !flagged && why == ""
		}
		req := &Request{AffinityKey: "s:conv", Attempted: attempted}
		c, ref := f.sel.Pick(req)
		if ref == nil {
			if !usable(c.Index) || slices.Contains(attempted, c.Account.ID) {
				t.Fatalf("iter %d: picked account %d (%+v, state %+v, attempted %v)", iter, c.Index, f.pool.Accounts[c.Index-1], states[c.Account.ID], slices.Contains(attempted, c.Account.ID))
			}
			continue
		}
		if ref.Pinned {
			t.Fatalf("iter %d: pinned refusal without a pin", iter)
		}
		live, limited := 0, 0
		var first time.Time
		for i := 1; i <= n; i++ {
			a := &f.pool.Accounts[i-1]
			if usable(i) && !slices.Contains(attempted, a.ID) {
				t.Fatalf("iter %d: refused although account %d could serve: %+v", iter, i, ref)
			}
			want := SkipAlreadyAttempted
			_, flagged := a.Flagged()
			why, until := states[a.ID].Availability(now)
			switch {
			case !a.Enabled:
				want = SkipDisabled
			case flagged:
				want = SkipFlagged
			case why != "":
				want = why
			}
			if ref.SkipReasons[i] != want {
				t.Fatalf("iter %d: skip reason of %d = %q, want %q", iter, i, ref.SkipReasons[i], want)
			}
			if want == SkipDisabled || want == SkipFlagged {
				continue
			}
			live++
			if want == SkipRateLimited {
				limited++
			}
			if !until.IsZero() && (first.IsZero() || until.Before(first)) {
				first = until
			}
		}
		if ref.AllRateLimited != (live > 0 && limited == live) {
			t.Fatalf("iter %d: AllRateLimited %v with %d live, %d limited", iter, ref.AllRateLimited, live, limited)
		}
		if !ref.ResetAt.Equal(first) || ref.RetryAfter != durationUntil(first, now) {
			t.Fatalf("iter %d: ResetAt %s RetryAfter %s, want %s", iter, ref.ResetAt, ref.RetryAfter, first)
		}
	}
}

func durationUntil(t, now time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return t.Sub(now)
}

func TestProcessPinIsExclusive(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3)
	f.sel.SetProcessPin(f.id(3))
	f.rt.Used(f.id(3), 200) // the pin is used even when it scores worst
	for range 20 {
		c, ref := f.sel.Pick(&Request{})
		if ref != nil || c.Index != 3 || c.PinSource != PinProcess || c.Why != WhyProcessPin {
			t.Fatalf("pick %+v refusal %+v", c, ref)
		}
	}
	// A manual pin does not override the process pin.
	f.update(func(p *accounts.Pool) { id := f.id(1); p.PinnedAccountID = &id })
	if i := f.pick(&Request{}); i != 3 {
		t.Fatalf("picked %d under a process pin on 3", i)
	}
	// The pinned account limited: refused, never rotated.
	until := f.clk.Now().Add(17 * time.Minute)
	f.rt.RateLimited(f.id(3), until)
	_, ref := f.sel.Pick(&Request{})
	if ref == nil || !ref.Pinned || ref.PinSource != PinProcess || ref.PinnedIndex != 3 || ref.PinReason != SkipRateLimited {
		t.Fatalf("refusal %+v", ref)
	}
	if !ref.ResetAt.Equal(until) || ref.RetryAfter != 17*time.Minute {
		t.Fatalf("ResetAt %s RetryAfter %s", ref.ResetAt, ref.RetryAfter)
	}
	if ref.SkipReasons[3] != SkipRateLimited || ref.SkipReasons[1] != "" || ref.SkipReasons[2] != "" {
		t.Fatalf("skip reasons %v", ref.SkipReasons)
	}
	// Explain says the same without picking.
	if ex := f.sel.Explain(&Request{}); !ex.Pinned || ex.PinReason != SkipRateLimited || ex.PinnedIndex != 3 {
		t.Fatalf("explain %+v", ex)
	}
	// Already attempted: refused too.
	f.sel.SetProcessPin(f.id(2))
	if _, ref := f.sel.Pick(&Request{Attempted: []string{f.id(2)}}); ref == nil || ref.PinReason != SkipAlreadyAttempted {
		t.Fatalf("refusal %+v", ref)
	}
	// A pin on an account that is gone.
	f.sel.SetProcessPin("acct_gone")
	if _, ref := f.sel.Pick(&Request{}); ref == nil || ref.PinReason != SkipMissing || ref.PinnedIndex != 0 {
		t.Fatalf("refusal %+v", ref)
	}
}

func TestManualPinIsExclusive(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3)
	f.update(func(p *accounts.Pool) { id := f.id(2); p.PinnedAccountID = &id })
	f.rt.Used(f.id(2), 200)
	for range 20 {
		c, ref := f.sel.Pick(&Request{AffinityKey: "s:x"})
		if ref != nil || c.Index != 2 || c.PinSource != PinManual || c.Why != WhyManualPin {
			t.Fatalf("pick %+v refusal %+v", c, ref)
		}
	}
	if i, why := f.sel.Next(); i != 2 || why != WhyManualPin {
		t.Fatalf("Next() = %d %q", i, why)
	}
	f.rt.Cooldown(f.id(2), CooldownAuthFailure, AuthFailureCooldown)
	_, ref := f.sel.Pick(&Request{})
	if ref == nil || !ref.Pinned || ref.PinSource != PinManual || ref.PinReason != "cooling-down:auth-failure" || ref.RetryAfter != AuthFailureCooldown {
		t.Fatalf("refusal %+v", ref)
	}
	if i, _ := f.sel.Next(); i != 0 {
		t.Fatalf("Next() = %d for an unusable pin", i)
	}
	// Disabled pinned account.
	f.update(func(p *accounts.Pool) { p.Accounts[1].Enabled = false })
	if _, ref := f.sel.Pick(&Request{}); ref == nil || ref.PinReason != SkipDisabled {
		t.Fatalf("refusal %+v", ref)
	}
	// Unpinned: the others serve again.
	f.update(func(p *accounts.Pool) { p.PinnedAccountID = nil })
	if i := f.pick(&Request{}); i == 2 {
		t.Fatal("picked the disabled account")
	}
}

func TestSpreadsLoadAcrossEqualAccounts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3)
	counts := make([]int, 4)
	const picks = 300
	for range picks {
		i := f.pick(&Request{})
		counts[i]++
		f.clk.Advance(150 * time.Millisecond)
		f.rt.Success(f.id(i), 200)
		f.clk.Advance(50 * time.Millisecond)
	}
	t.Logf("picks per account: %v", counts[1:])
	for i := 1; i <= 3; i++ {
		if share := float64(counts[i]) / picks; share < 0.20 || share > 0.45 {
			t.Errorf("account %d served %d of %d picks (%.0f%%): %v", i, counts[i], picks, share*100, counts[1:])
		}
	}
}

func TestSpreadsLoadWithoutAnyOutcome(t *testing.T) {
	t.Parallel()
	// Picks alone (no Success yet, as with parallel streams in flight)
	// must not pile onto one account.
	f := newFixture(t, 3)
	counts := make([]int, 4)
	for range 90 {
		counts[f.pick(&Request{})]++
		f.clk.Advance(10 * time.Millisecond) // a burst of 100 requests a second
	}
	for i := 1; i <= 3; i++ {
		if counts[i] < 18 || counts[i] > 41 {
			t.Errorf("counts %v", counts[1:])
		}
	}
}

func TestAffinityKeepsAConversationOnItsAccount(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3)
	f.sel.Bind("s:conv", f.id(2))
	for range 10 {
		c, _ := f.sel.Pick(&Request{AffinityKey: "s:conv"})
		if c.Index != 2 || c.Why != WhyAffinity {
			t.Fatalf("pick %+v", c)
		}
		f.rt.Success(f.id(2), 200) // recently used: would lose on score
		f.clk.Advance(time.Second)
	}
	// Other conversations are not bound.
	if c, _ := f.sel.Pick(&Request{AffinityKey: "s:other"}); c.Why != WhyBestScore {
		t.Fatalf("unbound key picked %+v", c)
	}
	// An attempted bound account is skipped.
	if c, _ := f.sel.Pick(&Request{AffinityKey: "s:conv", Attempted: []string{f.id(2)}}); c.Index == 2 {
		t.Fatalf("attempted account picked again: %+v", c)
	}
	// While unusable, the conversation goes elsewhere; once usable, back.
	f.rt.Cooldown(f.id(2), CooldownServerError, ServerErrorCooldown)
	if c, _ := f.sel.Pick(&Request{AffinityKey: "s:conv"}); c.Index == 2 {
		t.Fatalf("cooling-down bound account picked: %+v", c)
	}
	f.clk.Advance(ServerErrorCooldown + time.Second)
	if c, _ := f.sel.Pick(&Request{AffinityKey: "s:conv"}); c.Index != 2 {
		t.Fatalf("binding lost after a cooldown: %+v", c)
	}
	// A new affinity generation (switch/unpin) drops it.
	f.update(func(p *accounts.Pool) { p.AffinityGeneration++ })
	if c, _ := f.sel.Pick(&Request{AffinityKey: "s:conv"}); c.Why == WhyAffinity {
		t.Fatalf("binding survived a generation change: %+v", c)
	}
	// And bindings expire after the TTL.
	f.sel.Bind("s:conv", f.id(2))
	f.rt.Success(f.id(2), 200)
	f.clk.Advance(AffinityTTL + time.Minute)
	f.rt.Success(f.id(2), 200)
	if c, _ := f.sel.Pick(&Request{AffinityKey: "s:conv"}); c.Why == WhyAffinity {
		t.Fatalf("binding outlived its TTL: %+v", c)
	}
}

// A conversation forced off its account goes to the account the other
// running conversations leave the most room on, even against a better
// score, so it is not moved again soon (docs/PERFORMANCE.md).
func TestAMovedConversationGoesWhereOthersNeedTheRoomLeast(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3)
	f.sel.Bind("s:moving", f.id(1))
	for i := range 4 {
		f.sel.Bind(fmt.Sprintf("s:busy-%d", i), f.id(2))
	}
	f.rt.Success(f.id(3), 200) // just used: loses on score to account 2
	if i, _ := f.sel.NextFor(&Request{}); i != 2 {
		t.Fatalf("a new conversation would go to %d, want 2 (the test's premise)", i)
	}
	f.rt.Cooldown(f.id(1), CooldownServerError, ServerErrorCooldown)
	c, ref := f.sel.Pick(&Request{AffinityKey: "s:moving"})
	if ref != nil || c.Index != 3 || !c.Moved {
		t.Fatalf("moved conversation picked %+v (refusal %+v), want account 3, moved", c, ref)
	}
}

func TestAttemptedAccountsAreSkipped(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3)
	var attempted []string
	for range 3 {
		c, ref := f.sel.Pick(&Request{Attempted: attempted})
		if ref != nil || slices.Contains(attempted, c.Account.ID) {
			t.Fatalf("pick %+v refusal %+v after %v", c, ref, attempted)
		}
		attempted = append(attempted, c.Account.ID)
	}
	_, ref := f.sel.Pick(&Request{Attempted: attempted})
	if ref == nil {
		t.Fatal("picked although every account was attempted")
	}
	for i := 1; i <= 3; i++ {
		if ref.SkipReasons[i] != SkipAlreadyAttempted {
			t.Fatalf("skip reasons %v", ref.SkipReasons)
		}
	}
	if ref.AllRateLimited || ref.RetryAfter != 0 || !ref.ResetAt.IsZero() {
		t.Fatalf("refusal %+v", ref)
	}
}

func TestNearlyExhaustedQuotaDefersAnAccount(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	now := f.clk.Now()
	f.rt.SetQuota(f.id(1), Quota{Primary: &Window{UsedPercent: 96, WindowMinutes: 300, ResetsAt: now.Add(time.Hour)}})
	// Account 2 scores worse on everything else: it just failed.
	f.rt.Failure(f.id(2), CooldownServerError, time.Second)
	f.clk.Advance(2 * time.Second)
	for range 5 {
		c, _ := f.sel.Pick(&Request{})
		if c.Index != 2 || c.Why != WhyBestScore {
			t.Fatalf("pick %+v: an account with 4%% left was not deferred", c)
		}
		f.rt.Success(f.id(2), 200)
	}
	if i, why := f.sel.Next(); i != 2 || why != WhyBestScore {
		t.Fatalf("Next() = %d %q", i, why)
	}
	// Alone, the deferred account still serves.
	f.update(func(p *accounts.Pool) { p.Accounts[1].Enabled = false })
	if c, _ := f.sel.Pick(&Request{}); c.Index != 1 || c.Why != WhyDeferred {
		t.Fatalf("pick %+v", c)
	}
	// 6% left is not deferred (only scored lower).
	f.rt.SetQuota(f.id(1), Quota{Primary: &Window{UsedPercent: 94, ResetsAt: now.Add(time.Hour)}, ObservedAt: f.clk.Now()})
	if c, _ := f.sel.Pick(&Request{}); c.Index != 1 || c.Why != WhyBestScore {
		t.Fatalf("pick %+v: 6%% left deferred", c)
	}
	f.update(func(p *accounts.Pool) { p.Accounts[1].Enabled = true })
	// Once the window has reset, the old figures no longer count.
	f.rt.SetQuota(f.id(1), Quota{Primary: &Window{UsedPercent: 100, ResetsAt: now.Add(time.Hour)}, ObservedAt: f.clk.Now()})
	f.rt.Success(f.id(2), 200)
	if c, _ := f.sel.Pick(&Request{}); c.Index != 2 {
		t.Fatalf("pick %+v: a full window was not deferred", c)
	}
	f.clk.Advance(time.Hour)
	f.rt.Success(f.id(2), 200)
	if c, _ := f.sel.Pick(&Request{}); c.Index != 1 || c.Why != WhyBestScore {
		t.Fatalf("pick %+v: still deferred after the window reset", c)
	}
}

func TestRefusalExplainsEveryAccount(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 6)
	now := f.clk.Now()
	f.update(func(p *accounts.Pool) {
		p.Accounts[0].Enabled = false
		p.Accounts[1].SetFlag(accounts.FlagTokenInvalid)
	})
	f.rt.RateLimited(f.id(3), now.Add(10*time.Minute))
	for range CircuitFailures {
		f.rt.Failure(f.id(5), CooldownServerError, 0)
		f.clk.Advance(time.Millisecond)
	}
	now = f.clk.Now()
	f.rt.Cooldown(f.id(4), CooldownNetworkError, NetworkErrorCooldown)
	_, ref := f.sel.Pick(&Request{Attempted: []string{f.id(6)}})
	want := map[int]string{1: SkipDisabled, 2: SkipFlagged, 3: SkipRateLimited, 4: "cooling-down:network-error", 5: SkipCircuitOpen, 6: SkipAlreadyAttempted}
	if ref == nil || len(ref.SkipReasons) != 6 {
		t.Fatalf("refusal %+v", ref)
	}
	for i, w := range want {
		if ref.SkipReasons[i] != w {
			t.Errorf("skip reason of %d = %q, want %q", i, ref.SkipReasons[i], w)
		}
	}
	if ref.AllRateLimited || ref.RetryAfter != NetworkErrorCooldown || !ref.ResetAt.Equal(now.Add(NetworkErrorCooldown)) {
		t.Errorf("AllRateLimited %v RetryAfter %s ResetAt %s", ref.AllRateLimited, ref.RetryAfter, ref.ResetAt)
	}

	// Every live account limited: AllRateLimited, earliest reset.
	g := newFixture(t, 3)
	gnow := g.clk.Now()
	g.update(func(p *accounts.Pool) { p.Accounts[2].Enabled = false })
	g.rt.RateLimited(g.id(1), gnow.Add(3*time.Hour))
	g.rt.RateLimited(g.id(2), gnow.Add(45*time.Minute))
	_, ref = g.sel.Pick(&Request{})
	if ref == nil || !ref.AllRateLimited || ref.RetryAfter != 45*time.Minute || !ref.ResetAt.Equal(gnow.Add(45*time.Minute)) {
		t.Fatalf("refusal %+v", ref)
	}
	// And once the earliest reset passes, that account serves again.
	g.clk.Advance(45*time.Minute + time.Second)
	if i := g.pick(&Request{}); i != 2 {
		t.Fatalf("picked %d", i)
	}
}

func TestRateLimitIsClampedAndDefaulted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	now := f.clk.Now()
	f.rt.RateLimited(f.id(1), time.Time{})
	if got := f.rt.Snapshot(f.id(1)).RateLimitedUntil; !got.Equal(now.Add(DefaultRateLimit)) {
		t.Errorf("no reset: until %s, want now+60s", got)
	}
	f.rt.RateLimited(f.id(1), now.Add(30*24*time.Hour))
	if got := f.rt.Snapshot(f.id(1)).RateLimitedUntil; !got.Equal(now.Add(MaxRateLimit)) {
		t.Errorf("30 days: until %s, want now+7d", got)
	}
}

// randomState returns an AccountState whose times are all distinct.
func randomState(r *rand.Rand, base time.Time) AccountState {
	at := func() time.Time {
		if r.IntN(4) == 0 {
			return time.Time{}
		}
		return base.Add(time.Duration(r.Int64N(int64(2 * time.Hour))))
	}
	st := AccountState{RateLimitedUntil: at(), CooldownUntil: at(), CircuitOpenUntil: at(), HealthAt: at(), LastUsed: at(), TokensAt: at()}
	if !st.CooldownUntil.IsZero() {
		st.CooldownReason = []string{CooldownAuthFailure, CooldownServerError, CooldownNetworkError}[r.IntN(3)]
	}
	if !st.HealthAt.IsZero() {
		st.Health = r.IntN(101)
	}
	if !st.LastUsed.IsZero() {
		st.LastStatus = []int{200, 429, 500}[r.IntN(3)]
	}
	for range r.IntN(5) {
		st.Failures = append(st.Failures, base.Add(time.Duration(r.Int64N(int64(time.Hour)))))
	}
	slices.SortFunc(st.Failures, func(x, y time.Time) int { return x.Compare(y) })
	if r.IntN(2) == 0 {
		// SetQuota always stamps ObservedAt.
		st.Quota = &Quota{Primary: &Window{UsedPercent: float64(r.IntN(101)), WindowMinutes: 300},
			ObservedAt: base.Add(time.Duration(r.Int64N(int64(time.Hour))))}
	}
	return st
}

func stateJSON(t *testing.T, s AccountState) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMergeIsCommutativeAndIdempotent(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(42, 42))
	base := time.Date(2025, 3, 14, 0, 0, 0, 0, time.UTC)
	for iter := range 2000 {
		a, b, c := randomState(r, base), randomState(r, base), randomState(r, base)
		ab := a.Clone()
		ab.Merge(&b)
		ba := b.Clone()
		ba.Merge(&a)
		if x, y := stateJSON(t, ab), stateJSON(t, ba); x != y {
			t.Fatalf("iter %d: a+b != b+a\n a+b %s\n b+a %s", iter, x, y)
		}
		again := ab.Clone()
		again.Merge(&b)
		again.Merge(&a)
		if x, y := stateJSON(t, again), stateJSON(t, ab); x != y {
			t.Fatalf("iter %d: merging twice changed the result\n%s\n%s", iter, x, y)
		}
		self := a.Clone()
		self.Merge(&a)
		if x, y := stateJSON(t, self), stateJSON(t, a); x != y {
			t.Fatalf("iter %d: a+a != a\n%s\n%s", iter, x, y)
		}
		// Associative, so three processes may exchange news in any order.
		l := ab.Clone()
		l.Merge(&c)
		bc := b.Clone()
		bc.Merge(&c)
		rr := a.Clone()
		rr.Merge(&bc)
		if x, y := stateJSON(t, l), stateJSON(t, rr); x != y {
			t.Fatalf("iter %d: (a+b)+c != a+(b+c)\n%s\n%s", iter, x, y)
		}
		// A merge never loses a deadline.
		for _, p := range []struct {
			name     string
			got, in1 time.Time
			in2      time.Time
		}{
			{"rate_limited_until", ab.RateLimitedUntil, a.RateLimitedUntil, b.RateLimitedUntil},
			{"cooldown_until", ab.CooldownUntil, a.CooldownUntil, b.CooldownUntil},
			{"circuit_open_until", ab.CircuitOpenUntil, a.CircuitOpenUntil, b.CircuitOpenUntil},
		} {
			want := p.in1
			if p.in2.After(want) {
				want = p.in2
			}
			if !p.got.Equal(want) {
				t.Fatalf("iter %d: %s %s from %s and %s", iter, p.name, p.got, p.in1, p.in2)
			}
		}
	}
}

func TestSyncExchangesStateBetweenRuntimes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := newFakeClock()
	r1, r2 := NewRuntime(dir, clk), NewRuntime(dir, clk)
	p := &accounts.Pool{Version: 1}
	p.AddAPIKey("one", "", clk.Now())
	p.AddAPIKey("two", "", clk.Now())
	id1, id2 := p.Accounts[0].ID, p.Accounts[1].ID
	sel2 := NewSelector(r2, clk, 9)
	sel2.SetPool(p)

	until := clk.Now().Add(25 * time.Minute)
	r1.RateLimited(id1, until)
	if err := r1.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if err := r2.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if got := r2.Snapshot(id1).RateLimitedUntil; !got.Equal(until) {
		t.Fatalf("r2 sees rate_limited_until %s, want %s", got, until)
	}
	// The selector on r2 honors it at once.
	for range 5 {
		c, ref := sel2.Pick(&Request{})
		if ref != nil || c.Account.ID != id1 && c.Account.ID != id2 || c.Account.ID == id1 {
			t.Fatalf("r2 picked %+v (refusal %+v)", c, ref)
		}
	}

	// Both have news: each keeps its own and learns the other's.
	r1.Cooldown(id2, CooldownNetworkError, NetworkErrorCooldown)
	r2.SetQuota(id1, Quota{Primary: &Window{UsedPercent: 55}})
	for _, r := range []*Runtime{r2, r1, r2} {
		if err := r.Sync(nil); err != nil {
			t.Fatal(err)
		}
	}
	for name, r := range map[string]*Runtime{"r1": r1, "r2": r2} {
		s1, s2 := r.Snapshot(id1), r.Snapshot(id2)
		if !s1.RateLimitedUntil.Equal(until) || s1.Quota == nil || s1.Quota.Primary.UsedPercent != 55 ||
			s2.CooldownReason != CooldownNetworkError {
			t.Errorf("%s: account 1 %+v, account 2 %+v", name, s1, s2)
		}
	}
	// state.json is 0600.
	if fi, err := os.Stat(r1.Path()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("state.json mode %v (%v)", fi.Mode(), err)
	}
}

// A deliberate Clear reaches every process, although deadlines otherwise
// merge by keeping the later one.
func TestClearSurvivesSync(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := NewRuntime(dir, clock.System{})
	b := NewRuntime(dir, clock.System{})
	a.RateLimited("acct_1", time.Now().Add(time.Hour))
	if err := a.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if st := b.Snapshot("acct_1"); st.RateLimitedUntil.IsZero() {
		t.Fatal("b did not learn the rate limit")
	}
	b.Clear("acct_1")
	if err := b.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(nil); err != nil {
		t.Fatal(err)
	}
	for name, rt := range map[string]*Runtime{"a": a, "b": b} {
		if st := rt.Snapshot("acct_1"); !st.RateLimitedUntil.IsZero() {
			t.Fatalf("%s still holds the cleared rate limit until %s", name, st.RateLimitedUntil)
		}
	}
	// News after the clear merges as usual.
	a.RateLimited("acct_1", time.Now().Add(time.Minute))
	a.Sync(nil)
	b.Sync(nil)
	if st := b.Snapshot("acct_1"); st.RateLimitedUntil.IsZero() {
		t.Fatal("a rate limit after the clear did not reach b")
	}
}
