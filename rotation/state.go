// Package rotation decides which account serves a request and remembers how
// each account is doing: health, rate limits, cooldowns, the circuit breaker
// and the last quota seen. That runtime state is shared through state.json by
// every rotor process on one ROTOR_HOME, so a limit one proxy learns is
// honored by all of them within a second.
package rotation

import (
	"maps"
	"slices"
	"time"
)

// Cooldown reasons, as shown in skip reasons (`cooling-down:<reason>`).
const (
	CooldownAuthFailure      = "auth-failure"
	CooldownServerError      = "server-error"
	CooldownNetworkError     = "network-error"
	CooldownTokenInvalidated = "token-invalidated"
)

// Window is one quota window as the x-codex-* headers describe it.
type Window struct {
	UsedPercent   float64   `json:"used_percent"`
	WindowMinutes int       `json:"window_minutes,omitempty"`
	ResetsAt      time.Time `json:"resets_at,omitzero"`
}

// Quota is the last quota snapshot seen for an account.
type Quota struct {
	Primary    *Window   `json:"primary,omitempty"`
	Secondary  *Window   `json:"secondary,omitempty"`
	PlanType   string    `json:"plan_type,omitempty"`
	ObservedAt time.Time `json:"observed_at"`
	// ResetCredits are the banked rate-limit reset credits the account's
	// backend reported (docs/selection.md); nil until a usage read told them.
	ResetCredits *int `json:"reset_credits,omitempty"`
	// Families are the account's limit families other than the main one
	// (docs/selection.md), each metering its own model.
	Families []Family `json:"families,omitempty"`
	// Credits are the account's credits as the backend last told them;
	// nil until it did.
	Credits *Credits `json:"credits,omitempty"`
	// Workspace: the backend's usage read had no windows for the account
	// (rate_limit null): a workspace that budgets instead, not an account
	// without quota.
	Workspace bool `json:"workspace,omitempty"`
	// Whole says the snapshot tells all the backend meters (a usage
	// read): SetQuota drops the families it leaves out. Never stored.
	Whole bool `json:"-"`
	// History is what SetQuota keeps of the windows' recent observations,
	// to learn their rates of use (rate.go). It merges with the snapshot
	// it came with, and is never changed in place.
	History *QuotaHistory `json:"history,omitempty"`
}

// AccountState is the shared runtime state of one account, as stored in
// state.json. Every field merges without coordination (see Merge), which is
// what lets several processes write the file without losing each other's
// news.
type AccountState struct {
	RateLimitedUntil time.Time `json:"rate_limited_until,omitzero"`
	// LimitReason is the backend's reached type of the usage limit that
	// ends at RateLimitedUntil, "" for an ordinary one. A workspace limit
	// (WorkspaceLimit) waits for a usage read, not for its time.
	LimitReason string `json:"limit_reason,omitempty"`
	// FamilyLimits are the usage limits of families other than the main
	// one (docs/selection.md), by family id: the account is limited until then for
	// the models that family meters only.
	FamilyLimits     map[string]time.Time `json:"family_limits,omitempty"`
	CooldownUntil    time.Time            `json:"cooldown_until,omitzero"`
	CooldownReason   string               `json:"cooldown_reason,omitempty"`
	CircuitOpenUntil time.Time            `json:"circuit_open_until,omitzero"`
	Failures         []time.Time          `json:"failures,omitempty"`
	Health           int                  `json:"health"`
	HealthAt         time.Time            `json:"health_at,omitzero"`
	LastUsed         time.Time            `json:"last_used,omitzero"`
	LastStatus       int                  `json:"last_status,omitempty"`
	Quota            *Quota               `json:"quota,omitempty"`
	// TokensAt is when a process last changed the account's secrets, so
	// the others know to read them again.
	TokensAt time.Time `json:"tokens_at,omitzero"`
	// UsageReadAt is when a serve last read the account's usage from its
	// backend (docs/selection.md), so the serves on one home share the reading.
	UsageReadAt time.Time `json:"usage_read_at,omitzero"`
	// Epoch counts deliberate clears of the deadlines (rotor fix,
	// verify-flagged). Deadlines merge by taking the later one, which alone
	// could never clear them; a higher epoch wins them outright.
	Epoch int64 `json:"epoch,omitempty"`
}

// maxFailures bounds the failure history kept per account; the circuit only
// needs the last few.
const maxFailures = 8

// Merge folds o into s: deadlines take the later value, health and quota the
// newer observation, failures the union. Merge is commutative and
// idempotent, so processes may merge in any order.
func (s *AccountState) Merge(o *AccountState) {
	switch {
	case o.Epoch > s.Epoch:
		s.Epoch = o.Epoch
		s.RateLimitedUntil, s.CooldownUntil, s.CooldownReason = o.RateLimitedUntil, o.CooldownUntil, o.CooldownReason
		s.CircuitOpenUntil, s.Failures = o.CircuitOpenUntil, slices.Clone(o.Failures)
		s.LimitReason, s.FamilyLimits = o.LimitReason, maps.Clone(o.FamilyLimits)
	case o.Epoch == s.Epoch:
		if o.RateLimitedUntil.After(s.RateLimitedUntil) {
			s.RateLimitedUntil, s.LimitReason = o.RateLimitedUntil, o.LimitReason
		}
		for id, until := range o.FamilyLimits {
			s.limitFamily(id, until)
		}
		if o.CooldownUntil.After(s.CooldownUntil) {
			s.CooldownUntil, s.CooldownReason = o.CooldownUntil, o.CooldownReason
		}
		s.CircuitOpenUntil = later(s.CircuitOpenUntil, o.CircuitOpenUntil)
		if len(o.Failures) > 0 {
			s.Failures = mergeTimes(s.Failures, o.Failures)
		}
	}
	if o.HealthAt.After(s.HealthAt) {
		s.Health, s.HealthAt = o.Health, o.HealthAt
	}
	if o.LastUsed.After(s.LastUsed) {
		s.LastUsed, s.LastStatus = o.LastUsed, o.LastStatus
	}
	s.TokensAt = later(s.TokensAt, o.TokensAt)
	s.UsageReadAt = later(s.UsageReadAt, o.UsageReadAt)
	if o.Quota != nil && (s.Quota == nil || o.Quota.ObservedAt.After(s.Quota.ObservedAt)) {
		q := *o.Quota
		s.Quota = &q
	}
}

// limitFamily limits family id until until, keeping the later of two.
// At most maxFamilies are kept: the earliest gives way to a new one.
func (s *AccountState) limitFamily(id string, until time.Time) {
	if s.FamilyLimits == nil {
		s.FamilyLimits = make(map[string]time.Time, 1)
	}
	if _, ok := s.FamilyLimits[id]; !ok && len(s.FamilyLimits) >= maxFamilies {
		first := ""
		for k, t := range s.FamilyLimits {
			if first == "" || t.Before(s.FamilyLimits[first]) {
				first = k
			}
		}
		delete(s.FamilyLimits, first)
	}
	s.FamilyLimits[id] = later(s.FamilyLimits[id], until)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func mergeTimes(a, b []time.Time) []time.Time {
	out := make([]time.Time, 0, len(a)+len(b))
	out = append(out, a...)
	for _, t := range b {
		if !slices.ContainsFunc(out, t.Equal) {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(x, y time.Time) int { return x.Compare(y) })
	if len(out) > maxFailures {
		out = out[len(out)-maxFailures:]
	}
	return out
}

// Clone returns a deep copy.
func (s *AccountState) Clone() AccountState {
	c := *s
	c.Failures = slices.Clone(s.Failures)
	c.FamilyLimits = maps.Clone(s.FamilyLimits)
	if s.Quota != nil {
		q := *s.Quota
		c.Quota = &q
	}
	return c
}

// Availability says whether an account can serve at now and, if not, why and
// until when. Reason is a skip reason of docs/selection.md ("" when available).
func (s *AccountState) Availability(now time.Time) (reason string, until time.Time) {
	switch {
	case s.CircuitOpenUntil.After(now):
		return "circuit-open", s.CircuitOpenUntil
	case s.RateLimitedUntil.After(now):
		return "rate-limited", s.RateLimitedUntil
	case s.CooldownUntil.After(now):
		return CoolingDown(s.CooldownReason), s.CooldownUntil
	}
	return "", time.Time{}
}

// AvailabilityFor is Availability for a request that family id meters
// (docs/selection.md): the main family's usage limit does not keep the account
// from another family's models, nor theirs from the main one's.
func (s *AccountState) AvailabilityFor(id string, now time.Time) (reason string, until time.Time) {
	if id == MainFamily || id == "" {
		return s.Availability(now)
	}
	switch lim := s.FamilyLimits[id]; {
	case s.CircuitOpenUntil.After(now):
		return "circuit-open", s.CircuitOpenUntil
	case lim.After(now):
		return "rate-limited", lim
	case s.CooldownUntil.After(now):
		return CoolingDown(s.CooldownReason), s.CooldownUntil
	}
	return "", time.Time{}
}

// CoolingDown is the skip reason of a cooldown with reason. The known
// reasons are constants so the selection loop never builds a string.
func CoolingDown(reason string) string {
	switch reason {
	case CooldownAuthFailure:
		return "cooling-down:" + CooldownAuthFailure
	case CooldownServerError:
		return "cooling-down:" + CooldownServerError
	case CooldownNetworkError:
		return "cooling-down:" + CooldownNetworkError
	case CooldownTokenInvalidated:
		return "cooling-down:" + CooldownTokenInvalidated
	}
	return "cooling-down:" + reason
}

// HealthAt returns the account's health (0-100) at now. Health lost to
// failures comes back by itself at healthRecovery points a minute, so an
// account that failed long ago is not punished forever.
func (s *AccountState) HealthNow(now time.Time) int {
	if s.HealthAt.IsZero() {
		return 100
	}
	h := s.Health + int(now.Sub(s.HealthAt)/time.Minute)*healthRecovery
	return min(max(h, 0), 100)
}

const (
	healthRecovery = 5
	healthOnFail   = 25
	healthOnOK     = 10
)

func (s *AccountState) adjustHealth(now time.Time, delta int) {
	s.Health = min(max(s.HealthNow(now)+delta, 0), 100)
	s.HealthAt = now
}

// headroom is the fraction (0-1) of quota left in the fuller window, and
// whether the account should be deferred: 5% or less left in a window that
// has not reset yet.
func (s *AccountState) headroom(now time.Time) (float64, bool) {
	if s.Quota == nil {
		return 1, false
	}
	l1, d1 := s.Quota.Primary.left(now)
	l2, d2 := s.Quota.Secondary.left(now)
	return min(l1, l2), d1 || d2
}

// left is the fraction of w still available at now (1 once w has reset or
// when unknown), and whether that is 5% or less.
func (w *Window) left(now time.Time) (float64, bool) {
	if w == nil || (!w.ResetsAt.IsZero() && !w.ResetsAt.After(now)) {
		return 1, false
	}
	l := max((100-w.UsedPercent)/100, 0)
	return l, l <= 0.05
}
