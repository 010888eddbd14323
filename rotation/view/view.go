// Package view is the pool as people and pages are shown it: the JSON
// shape of `rotor rotation status --json` and of the dashboard's snapshot
// (Status), and the pieces other --json outputs share (Pick, Quota,
// IndexOrNil, TimeOrNil). It only displays what package rotation decided,
// from one source, so the CLI and the page cannot disagree.
package view

import (
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/rotation"
)

// Status is the pool as `rotor rotation status --json` prints it and
// the dashboard shows it: one source for both, so they cannot disagree.
type Status struct {
	PinnedAccountIndex *int      `json:"pinned_account_index"`
	PinSource          *string   `json:"pin_source"`
	Next               Pick      `json:"next"`
	Accounts           []Account `json:"accounts"`
}

// Pick is an account index and the reason it is (or would be) used;
// Index is nil when there is none.
type Pick struct {
	Index  *int   `json:"index"`
	Reason string `json:"reason"`
}

// Account is one account of a Status.
type Account struct {
	Index  int     `json:"index"`
	Label  string  `json:"label"`
	State  string  `json:"state"`
	Until  *string `json:"until"`
	Reason *string `json:"reason"`
	// Endpoint and EndpointError name the unreachable upstream endpoint
	// an account is skipped for, and the OS error of the last try.
	Endpoint      string  `json:"endpoint,omitempty"`
	EndpointError string  `json:"endpoint_error,omitempty"`
	Health        int     `json:"health"`
	LastUsed      *string `json:"last_used"`
	Quota         *Quota  `json:"quota"`
}

// Quota is the last quota snapshot of an account.
type Quota struct {
	Primary   *Window `json:"primary"`
	Secondary *Window `json:"secondary"`
	// ResetCredits are the banked rate-limit reset credits the backend
	// last reported (SPEC §15); null until a usage read told them.
	ResetCredits *int `json:"reset_credits"`
}

// Window is one quota window.
type Window struct {
	UsedPercent   float64 `json:"used_percent"`
	WindowMinutes int     `json:"window_minutes"`
	ResetsAt      *string `json:"resets_at"`
}

// Selector is what a Status shows of the live pool beyond its rows: the
// pool and the account the next request would get. *rotation.Selector is
// one.
type Selector interface {
	Pool() *accounts.Pool
	Next() (index int, why string)
}

// StatusOf is the Status of the pool sel selects from, at sel's clock,
// built from rows (as sel.Status returns them).
func StatusOf(sel Selector, rows []rotation.AccountStatus) Status {
	next, why := sel.Next()
	v := Status{PinnedAccountIndex: IndexOrNil(sel.Pool().Pinned()), Next: Pick{Index: IndexOrNil(next), Reason: why},
		Accounts: make([]Account, 0, len(rows))}
	if v.PinnedAccountIndex != nil {
		src := rotation.PinManual
		v.PinSource = &src
	}
	for _, r := range rows {
		av := Account{Index: r.Index, Label: r.Account.Label, State: r.State, Until: TimeOrNil(r.Until),
			Endpoint: r.Endpoint, EndpointError: r.Error,
			Health: r.Health, LastUsed: TimeOrNil(r.LastUsed), Quota: QuotaOf(r.Quota)}
		if r.Reason != "" {
			reason := r.Reason
			av.Reason = &reason
		}
		v.Accounts = append(v.Accounts, av)
	}
	return v
}

// QuotaOf is q as JSON shows it; nil for nil.
func QuotaOf(q *rotation.Quota) *Quota {
	if q == nil {
		return nil
	}
	return &Quota{Primary: WindowOf(q.Primary), Secondary: WindowOf(q.Secondary), ResetCredits: q.ResetCredits}
}

// WindowOf is w as JSON shows it; nil for nil.
func WindowOf(w *rotation.Window) *Window {
	if w == nil {
		return nil
	}
	return &Window{UsedPercent: w.UsedPercent, WindowMinutes: w.WindowMinutes, ResetsAt: TimeOrNil(w.ResetsAt)}
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
