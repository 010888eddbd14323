package rotation

import (
	"time"

	"github.com/rotorproxy/rotor/accounts"
)

// AccountStatus is what `rotor rotation status` and `rotor list` show of one
// account.
type AccountStatus struct {
	Index   int
	Account accounts.Account
	// State is available, rate-limited, cooling-down:<reason>,
	// circuit-open, disabled or flagged.
	State  string
	Until  time.Time // when the state ends, zero if open-ended or available
	Reason string    // the flag reason or cooldown reason, if any
	// Endpoint and Error, when the account is skipped because the
	// endpoint it is served from cannot be reached (docs/selection.md): which one,
	// and the OS error of the last try.
	Endpoint string
	Error    string
	Health   int
	LastUsed time.Time
	Quota    *Quota
	Pinned   bool
	// LimitReason is the backend's reached type of the usage limit the
	// account is rate-limited for ("" for an ordinary one, or when it is
	// not rate-limited); WorkspaceLimit says it waits for a usage read.
	LimitReason string
	// FamilyLimits are the usage limits of families other than the main
	// one that have not ended yet, by family id (docs/selection.md): the account
	// is limited until then for the model that family meters only.
	FamilyLimits map[string]time.Time
	// OnCredits: a main window is full and the account holds credits, so
	// the backend spends them for what it serves now (docs/selection.md).
	OnCredits bool
}

// Status describes every account of the pool at the selector's clock.
func (s *Selector) Status() []AccountStatus {
	v := s.cur.Load()
	now := s.clock.Now()
	pinned := 0
	if id, _, _, ok := s.pinOf(v); ok {
		pinned = v.pool.IndexOf(id)
	}
	endpointOf := s.endpointOf.Load()
	s.rt.mu.Lock()
	defer s.rt.mu.Unlock()
	out := make([]AccountStatus, len(v.pool.Accounts))
	for i := range v.pool.Accounts {
		a := &v.pool.Accounts[i]
		st := &v.entries[i].st
		as := AccountStatus{
			Index: i + 1, Account: *a, State: "available", Health: st.HealthNow(now),
			LastUsed: st.LastUsed, Pinned: pinned == i+1,
		}
		if st.Quota != nil {
			q := *st.Quota
			as.Quota = &q
			as.OnCredits = q.OnCredits(MainFamily, now)
		}
		for fam, until := range st.FamilyLimits {
			if until.After(now) {
				if as.FamilyLimits == nil {
					as.FamilyLimits = make(map[string]time.Time, len(st.FamilyLimits))
				}
				as.FamilyLimits[fam] = until
			}
		}
		flag, flagged := a.Flagged()
		reason, until := st.Availability(now)
		switch {
		case !a.Enabled:
			as.State = SkipDisabled
		case flagged:
			as.State, as.Reason = SkipFlagged, flag
		case reason != "":
			as.State, as.Until = reason, until
			if reason != SkipCircuitOpen && reason != SkipRateLimited {
				as.Reason = st.CooldownReason
			}
			if reason == SkipRateLimited {
				as.LimitReason = st.LimitReason
			}
		case endpointOf != nil:
			s.unreachable(&as, (*endpointOf)(a), now)
		}
		out[i] = as
	}
	return out
}

// unreachable marks as skipped when the endpoint ep it is served from is
// on record as unreachable: until it answers again, as docs/selection.md says, and
// Until is when the next request will try it (zero once that is due).
// Callers hold s.rt.mu.
func (s *Selector) unreachable(as *AccountStatus, ep string, now time.Time) {
	d, ok := s.rt.eps[ep]
	if !ok || d.Until.IsZero() {
		return
	}
	as.State, as.Reason = CoolingDown(CooldownNetworkError), CooldownNetworkError
	as.Endpoint, as.Error = ep, d.Error
	if d.Until.After(now) {
		as.Until = d.Until
	}
}
