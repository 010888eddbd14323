// Package view is the pool as people and pages are shown it: the JSON
// shape of `rotor rotation status --json` and of the dashboard's snapshot
// (Status), and the pieces other --json outputs share (Pick, Quota,
// IndexOrNil, TimeOrNil). It only displays what package rotation decided,
// from one source, so the CLI and the page cannot disagree.
package view

import (
	"slices"
	"strings"
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
	// LimitReason is the backend's reached type of the usage limit the
	// account is rate-limited for (e.g. workspace_owner_credits_depleted),
	// null for an ordinary one; WaitsForWorkspace says only the
	// workspace's owner lifts it: the account waits for a usage read that
	// says it can serve, not for Until (docs/selection.md).
	LimitReason       *string `json:"limit_reason"`
	WaitsForWorkspace bool    `json:"waits_for_workspace"`
	// OnCredits: a main window is full and the account holds credits, so
	// what it serves now spends them.
	OnCredits bool `json:"on_credits"`
	// FamilyLimits are the usage limits of the account's other limit
	// families that have not ended: only their model waits.
	FamilyLimits []FamilyLimit `json:"family_limits"`
}

// FamilyLimit is a usage limit of one limit family other than the main
// one: the model it meters (null when the backend did not name it) waits
// until Until.
type FamilyLimit struct {
	ID    string  `json:"id"`
	Model *string `json:"model"`
	Until string  `json:"until"`
}

// Quota is the last quota snapshot of an account.
type Quota struct {
	Primary   *Window `json:"primary"`
	Secondary *Window `json:"secondary"`
	// ResetCredits are the banked rate-limit reset credits the backend
	// last reported (docs/selection.md); null until a usage read told them.
	ResetCredits *int `json:"reset_credits"`
	// Credits are the account's credits, spent once a window is full
	// (docs/selection.md); null until the backend told them.
	Credits *Credits `json:"credits"`
	// Workspace: the backend has no windows for the account (a Business,
	// Enterprise or Edu workspace that budgets instead), not no quota.
	Workspace bool `json:"workspace"`
	// Families are the limit families other than the main one, each
	// metering its own model with its own windows; [] when none.
	Families []Family `json:"families"`
}

// Credits are an account's credits as the backend told them.
type Credits struct {
	HasCredits bool `json:"has_credits"`
	Unlimited  bool `json:"unlimited"`
	// Balance is the backend's decimal string, null when it gave none.
	Balance *string `json:"balance"`
}

// Family is one limit family other than the main one: its id ("codex_"
// prefixed, as Codex names it), the model it meters (null when not
// named) and its windows.
type Family struct {
	ID        string  `json:"id"`
	Model     *string `json:"model"`
	Primary   *Window `json:"primary"`
	Secondary *Window `json:"secondary"`
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
		av.LimitReason, av.WaitsForWorkspace = stringOrNil(r.LimitReason), rotation.WorkspaceLimit(r.LimitReason)
		av.OnCredits, av.FamilyLimits = r.OnCredits, FamilyLimitsOf(r.FamilyLimits, r.Quota)
		v.Accounts = append(v.Accounts, av)
	}
	return v
}

// QuotaOf is q as JSON shows it; nil for nil.
func QuotaOf(q *rotation.Quota) *Quota {
	if q == nil {
		return nil
	}
	v := &Quota{Primary: WindowOf(q.Primary), Secondary: WindowOf(q.Secondary), ResetCredits: q.ResetCredits,
		Credits: CreditsOf(q.Credits), Workspace: q.Workspace, Families: make([]Family, 0, len(q.Families))}
	for _, f := range q.Families {
		v.Families = append(v.Families, Family{ID: f.ID, Model: stringOrNil(f.LimitName),
			Primary: WindowOf(f.Primary), Secondary: WindowOf(f.Secondary)})
	}
	return v
}

// CreditsOf is c as JSON shows it; nil for nil.
func CreditsOf(c *rotation.Credits) *Credits {
	if c == nil {
		return nil
	}
	return &Credits{HasCredits: c.HasCredits, Unlimited: c.Unlimited, Balance: stringOrNil(c.Balance)}
}

// FamilyLimitsOf is limits (by family id) as JSON shows them, by id,
// each with the model q says its family meters; [] for none.
func FamilyLimitsOf(limits map[string]time.Time, q *rotation.Quota) []FamilyLimit {
	out := make([]FamilyLimit, 0, len(limits))
	for id, until := range limits {
		fl := FamilyLimit{ID: id, Until: until.UTC().Format(time.RFC3339)}
		if f := q.Family(id); f != nil {
			fl.Model = stringOrNil(f.LimitName)
		}
		out = append(out, fl)
	}
	slices.SortFunc(out, func(a, b FamilyLimit) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func stringOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
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
