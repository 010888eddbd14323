package rotation

import "time"

// StatusView is the pool as `rotor rotation status --json` prints it and
// the dashboard shows it: one source for both, so they cannot disagree.
type StatusView struct {
	PinnedAccountIndex *int          `json:"pinned_account_index"`
	PinSource          *string       `json:"pin_source"`
	Next               PickView      `json:"next"`
	Accounts           []AccountView `json:"accounts"`
}

// PickView is an account index and the reason it is (or would be) used;
// Index is nil when there is none.
type PickView struct {
	Index  *int   `json:"index"`
	Reason string `json:"reason"`
}

// AccountView is one account of a StatusView.
type AccountView struct {
	Index    int        `json:"index"`
	Label    string     `json:"label"`
	State    string     `json:"state"`
	Until    *string    `json:"until"`
	Reason   *string    `json:"reason"`
	Health   int        `json:"health"`
	LastUsed *string    `json:"last_used"`
	Quota    *QuotaView `json:"quota"`
}

// QuotaView is the last quota snapshot of an account.
type QuotaView struct {
	Primary   *WindowView `json:"primary"`
	Secondary *WindowView `json:"secondary"`
}

// WindowView is one quota window.
type WindowView struct {
	UsedPercent   float64 `json:"used_percent"`
	WindowMinutes int     `json:"window_minutes"`
	ResetsAt      *string `json:"resets_at"`
}

// View is the StatusView of the pool at the selector's clock, built from
// rows (as Status returns them).
func (s *Selector) View(rows []AccountStatus) StatusView {
	next, why := s.Next()
	v := StatusView{PinnedAccountIndex: IndexOrNil(s.Pool().Pinned()), Next: PickView{Index: IndexOrNil(next), Reason: why},
		Accounts: make([]AccountView, 0, len(rows))}
	if v.PinnedAccountIndex != nil {
		src := PinManual
		v.PinSource = &src
	}
	for _, r := range rows {
		av := AccountView{Index: r.Index, Label: r.Account.Label, State: r.State, Until: TimeOrNil(r.Until),
			Health: r.Health, LastUsed: TimeOrNil(r.LastUsed), Quota: r.Quota.View()}
		if r.Reason != "" {
			reason := r.Reason
			av.Reason = &reason
		}
		v.Accounts = append(v.Accounts, av)
	}
	return v
}

// View is q as JSON shows it; nil for nil.
func (q *Quota) View() *QuotaView {
	if q == nil {
		return nil
	}
	return &QuotaView{Primary: q.Primary.View(), Secondary: q.Secondary.View()}
}

// View is w as JSON shows it; nil for nil.
func (w *Window) View() *WindowView {
	if w == nil {
		return nil
	}
	return &WindowView{UsedPercent: w.UsedPercent, WindowMinutes: w.WindowMinutes, ResetsAt: TimeOrNil(w.ResetsAt)}
}

// IndexOrNil is i, or nil for 0 (no account): JSON's null.
func IndexOrNil(i int) *int {
	if i == 0 {
		return nil
	}
	return &i
}

// TimeOrNil is t in RFC 3339 (UTC), or nil for the zero time: JSON's null.
func TimeOrNil(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339)
	return &s
}
