package rotation

import (
	"fmt"
	"strings"
	"time"

	"github.com/rotorproxy/rotor/accounts"
)

// Forecast verdicts: whether an account can serve now, will be able to
// after a wait, or needs a person first.
const (
	ForecastReady       = "ready"
	ForecastDelayed     = "delayed"
	ForecastUnavailable = "unavailable"
)

// ReasonQuotaDeferred is the forecast reason of an account that could serve
// but has 5% or less left in a quota window: the selector passes it over
// until the window resets, unless no other account has headroom.
const ReasonQuotaDeferred = "quota-deferred"

// FailureHorizon is how far back failures count as recent in the risk score.
const FailureHorizon = 10 * time.Minute

// AccountForecast is one account's outlook.
type AccountForecast struct {
	Index   int // 1-based
	Account accounts.Account
	// Verdict is ForecastReady, ForecastDelayed or ForecastUnavailable.
	Verdict string
	// State is the `rotor rotation status` state word.
	State string
	// Reason is why the account is delayed or unavailable, as a stable
	// word: a skip reason (disabled, flagged, rate-limited,
	// cooling-down:<reason>, circuit-open) or ReasonQuotaDeferred; "" when
	// ready. Detail says the same for a person, with what to do.
	Reason string
	Detail string
	// Wait is how long a delayed account waits, and ReadyAt when it ends;
	// both zero when ready, unavailable, or the end is unknown.
	Wait    time.Duration
	ReadyAt time.Time
	// Risk (0-100) is how likely the account is to fail or be unusable
	// soon, and RiskFactors name what raised it (see riskRules).
	Risk           int
	RiskFactors    []string
	Health         int
	RecentFailures int
	Quota          *Quota
	Pinned         bool
	// PrimaryRate and SecondaryRate are the windows' recent rates of use,
	// in percent of the window per hour (rate.go); nil when unknown.
	PrimaryRate, SecondaryRate *float64
	// Outlook is the account at those rates (an Outlook* constant; "" for
	// an unavailable account or one without quota windows). RunsOutAt is
	// when its RunsOutWindow ("primary" or "secondary") first fills
	// before it resets, within the horizon; zero when none does.
	Outlook       string
	RunsOutAt     time.Time
	RunsOutWindow string
	// OnCredits, LimitReason and FamilyLimits are as in AccountStatus
	// (docs/selection.md): credits spent now, the reached type of the usage limit
	// it waits on, and its other families' limits.
	OnCredits    bool
	LimitReason  string
	FamilyLimits map[string]time.Time
}

// ForecastSummary counts the accounts by verdict.
type ForecastSummary struct {
	Total, Ready, Delayed, Unavailable int
}

// Recommendation is the account a request without session affinity would
// get now (Index 0: none), and why: what Selector.Next says.
type Recommendation struct {
	Index  int
	Reason string
}

// Forecast is the outlook of the whole pool at one instant.
type Forecast struct {
	At             time.Time
	PinnedIndex    int    // 0 when nothing is pinned
	PinSource      string // PinProcess or PinManual when pinned
	Summary        ForecastSummary
	Recommendation Recommendation
	Accounts       []AccountForecast
	// RunsOutNext and Pool are where the pool heads at the recent rates
	// of use (outlook.go).
	RunsOutNext RunsOut
	Pool        PoolOutlook
}

// verdictOf maps a `rotation status` state to its verdict: states that end
// by themselves are delays, the others need a person.
func verdictOf(state string) string {
	switch state {
	case "available":
		return ForecastReady
	case SkipDisabled, SkipFlagged:
		return ForecastUnavailable
	default: // rate-limited, cooling-down:<reason>, circuit-open
		return ForecastDelayed
	}
}

// riskInput is what one risk rule looks at.
type riskInput struct {
	a   *accounts.Account
	st  *AccountState
	now time.Time
}

// riskRules each score one signal of an account's state; the risk is their
// sum, capped at 100. An account that cannot serve without a person scores
// 100 outright; waits weigh by how badly they predict the next failure; a
// used-up quota window predicts a usage limit. factor is shown only when
// the rule scored.
var riskRules = []struct {
	name  string
	score func(in riskInput) (points int, factor string)
}{
	{"disabled", func(in riskInput) (int, string) {
		if !in.a.Enabled {
			return 100, "disabled"
		}
		return 0, ""
	}},
	{"flagged", func(in riskInput) (int, string) {
		if r, ok := in.a.Flagged(); ok {
			return 100, "flagged " + r
		}
		return 0, ""
	}},
	{"circuit-open", func(in riskInput) (int, string) {
		if in.st.CircuitOpenUntil.After(in.now) {
			return 60, "circuit open"
		}
		return 0, ""
	}},
	{"rate-limited", func(in riskInput) (int, string) {
		if in.st.RateLimitedUntil.After(in.now) {
			return 50, "rate-limited"
		}
		return 0, ""
	}},
	{"cooling-down", func(in riskInput) (int, string) {
		if in.st.CooldownUntil.After(in.now) {
			return 35, "cooling down (" + in.st.CooldownReason + ")"
		}
		return 0, ""
	}},
	{"primary quota", func(in riskInput) (int, string) { return quotaRisk(in, "primary") }},
	{"secondary quota", func(in riskInput) (int, string) { return quotaRisk(in, "secondary") }},
	{"recent failures", func(in riskInput) (int, string) {
		n := recentFailures(in.st, in.now)
		if n == 0 {
			return 0, ""
		}
		return min(10*n, 30), fmt.Sprintf("%d failure(s) in the last %s", n, FailureHorizon)
	}},
}

// quotaRisk scores one quota window that has not reset yet: up to 30
// points, in proportion to how much of it is used.
func quotaRisk(in riskInput, which string) (int, string) {
	if in.st.Quota == nil {
		return 0, ""
	}
	w := in.st.Quota.Primary
	if which == "secondary" {
		w = in.st.Quota.Secondary
	}
	if w == nil || (!w.ResetsAt.IsZero() && !w.ResetsAt.After(in.now)) {
		return 0, ""
	}
	used := min(max(w.UsedPercent, 0), 100)
	points := int(used * 0.3)
	if used < 50 {
		return points, "" // scored, but not worth a mention
	}
	return points, fmt.Sprintf("%s quota %.0f%% used", which, used)
}

func recentFailures(st *AccountState, now time.Time) int {
	n := 0
	for _, t := range st.Failures {
		if now.Sub(t) <= FailureHorizon {
			n++
		}
	}
	return n
}

// risk scores a by riskRules.
func risk(in riskInput) (int, []string) {
	total := 0
	var factors []string
	for _, r := range riskRules {
		p, f := r.score(in)
		total += p
		if p > 0 && f != "" {
			factors = append(factors, f)
		}
	}
	return min(total, 100), factors
}

// quotaDeferral says until when a usable account is deferred by quota:
// the last reset among its windows with 5% or less left (zero when a window
// names no reset).
func quotaDeferral(st *AccountState, now time.Time) (until time.Time, which string) {
	if st.Quota == nil {
		return time.Time{}, ""
	}
	unknown := false
	for _, w := range []struct {
		name string
		w    *Window
	}{{"primary", st.Quota.Primary}, {"secondary", st.Quota.Secondary}} {
		if w.w == nil || (!w.w.ResetsAt.IsZero() && !w.w.ResetsAt.After(now)) || w.w.UsedPercent < 95 {
			continue
		}
		if which == "" {
			which = w.name
		} else {
			which = "primary and secondary"
		}
		if w.w.ResetsAt.IsZero() {
			unknown = true
		}
		until = later(until, w.w.ResetsAt)
	}
	if unknown {
		until = time.Time{}
	}
	return until, which
}

// cooldownWords say what a cooling-down state is about, for a person.
var cooldownWords = map[string]string{
	CooldownAuthFailure:      "cooling down after an authentication failure",
	CooldownServerError:      "cooling down after a server error",
	CooldownNetworkError:     "cooling down after a network error",
	CooldownTokenInvalidated: "cooling down: the upstream said its token was invalidated",
}

// detailOf explains a forecast to a person, with the command that helps
// when one does. The cmd layer shows the wait beside it.
func detailOf(f *AccountForecast, st *AccountState, deferredWindow string, policy CreditsPolicy) string {
	switch {
	case f.State == SkipDisabled:
		return fmt.Sprintf("disabled; \"rotor enable %d\" to use it again", f.Index)
	case f.State == SkipFlagged:
		r, _ := f.Account.Flagged()
		return fmt.Sprintf("flagged %s; \"rotor verify-flagged\" re-checks it, or sign in again", r)
	case f.State == SkipRateLimited && WorkspaceLimit(f.LimitReason):
		return "usage limit reached (" + f.LimitReason + "): waits for the workspace owner; back when a usage read says it can serve"
	case f.State == SkipRateLimited && f.LimitReason != "":
		return "usage limit reached (" + f.LimitReason + "); back when it resets"
	case f.State == SkipRateLimited:
		return "usage limit reached; back when it resets"
	case f.State == SkipCircuitOpen:
		return "repeated failures opened its circuit; tried again when it closes"
	case f.Reason == SkipCreditsHeldBack:
		return "on credits: its included quota is used up and --credits never holds credits back; back when the window resets"
	case f.OnCredits && f.Verdict == ForecastReady && policy == CreditsSpend:
		return "on credits: its included quota is used up; spends credits as quota (--credits spend)"
	case f.OnCredits && f.Verdict == ForecastReady:
		return "on credits: its included quota is used up; spends credits only when no other account has included quota left"
	case f.Reason == ReasonQuotaDeferred:
		return "5% or less left in its " + deferredWindow + " quota window; used only when no other account has headroom"
	case f.Verdict == ForecastDelayed:
		if w, ok := cooldownWords[st.CooldownReason]; ok {
			return w
		}
		return "cooling down after a failure"
	}
	return strings.Join(f.RiskFactors, ", ")
}

// Forecast describes every account's outlook at the selector's clock, and
// recommends the account Next would pick.
func (s *Selector) Forecast() Forecast {
	v := s.cur.Load()
	now := s.clock.Now()
	fc := Forecast{At: now, Accounts: make([]AccountForecast, 0, len(v.pool.Accounts))}
	policy := s.Credits()
	if id, src, _, ok := s.pinOf(v); ok {
		if fc.PinnedIndex = v.pool.IndexOf(id); fc.PinnedIndex > 0 {
			fc.PinSource = src
		}
	}
	// Status and Next take the runtime lock themselves, so the state they
	// do not expose is read under it separately, by account id: a pool
	// swapped in meanwhile cannot pair a row with another account's state.
	rows := s.Status()
	states := make([]AccountState, len(rows))
	s.rt.mu.Lock()
	for i, r := range rows {
		if e := s.rt.m[r.Account.ID]; e != nil {
			states[i] = e.st.Clone()
		}
	}
	s.rt.mu.Unlock()
	for i, r := range rows {
		st := &states[i]
		window := ""
		f := AccountForecast{
			Index: r.Index, Account: r.Account, State: r.State, Verdict: verdictOf(r.State),
			Health: r.Health, Quota: r.Quota, Pinned: fc.PinnedIndex == r.Index,
			RecentFailures: recentFailures(st, now),
			OnCredits:      r.OnCredits, LimitReason: r.LimitReason, FamilyLimits: r.FamilyLimits,
		}
		f.Risk, f.RiskFactors = risk(riskInput{a: &f.Account, st: st, now: now})
		switch f.Verdict {
		case ForecastUnavailable:
			f.Reason = r.State
			if flag, ok := r.Account.Flagged(); ok && r.State == SkipFlagged {
				f.Reason = SkipFlagged + ":" + flag
			}
		case ForecastDelayed:
			f.Reason, f.ReadyAt = r.State, r.Until
		case ForecastReady:
			// An account on credits is judged by the credits policy, not
			// by its full window's headroom (docs/selection.md).
			if f.OnCredits && policy == CreditsNever {
				f.Verdict, f.Reason = ForecastDelayed, SkipCreditsHeldBack
				f.ReadyAt = r.Quota.FullUntil(MainFamily, now)
			} else if _, deferred := st.headroom(now); deferred && !f.OnCredits {
				f.Verdict, f.Reason = ForecastDelayed, ReasonQuotaDeferred
				f.ReadyAt, window = quotaDeferral(st, now)
			}
		}
		if !f.ReadyAt.IsZero() {
			f.Wait = f.ReadyAt.Sub(now)
		}
		f.Detail = detailOf(&f, st, window, policy)
		switch f.Verdict {
		case ForecastReady:
			fc.Summary.Ready++
		case ForecastDelayed:
			fc.Summary.Delayed++
		default:
			fc.Summary.Unavailable++
		}
		fc.Accounts = append(fc.Accounts, f)
	}
	fc.Summary.Total = len(fc.Accounts)
	foresee(&fc, states)
	fc.Recommendation.Index, fc.Recommendation.Reason = s.Next()
	return fc
}
