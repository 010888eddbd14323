package metrics

import (
	"strconv"

	"github.com/rotorproxy/rotor/proxy/promtext"
	"github.com/rotorproxy/rotor/rotation"
)

// poolGauges reads the pool at scrape time, never on a request's way:
// each account's state, health and quota windows, and the open sockets.
type poolGauges struct {
	sel     *rotation.Selector
	sockets func() int
}

// write writes the pool as Selector.Status shows it, one family at a
// time.
func (g poolGauges) write(w *promtext.Writer) {
	w.Family("rotor_open_websockets", "gauge", "Client WebSockets open now.")
	w.Sample("rotor_open_websockets", float64(g.sockets()))
	status := g.sel.Status()
	w.Family("rotor_account_state", "gauge",
		"1 for the state each account is in now: available, rate-limited, cooling-down:<reason>, circuit-open, disabled or flagged.")
	for _, as := range status {
		w.Sample("rotor_account_state", 1, "account", strconv.Itoa(as.Index), "label", as.Account.Label, "state", as.State)
	}
	w.Family("rotor_account_health", "gauge", "Each account's health, 0 to 100.")
	for _, as := range status {
		w.Sample("rotor_account_health", float64(as.Health), "account", strconv.Itoa(as.Index), "label", as.Account.Label)
	}
	windows(w, status, "rotor_account_quota_used_ratio",
		"The share of each quota window used, as the upstream last reported it (0 to 1), by limit family (codex: the main one).",
		func(win *rotation.Window) (float64, bool) { return win.UsedPercent / 100, true })
	windows(w, status, "rotor_account_quota_resets_at_seconds", "When each quota window resets, in Unix seconds, by limit family.",
		func(win *rotation.Window) (float64, bool) {
			return float64(win.ResetsAt.Unix()), !win.ResetsAt.IsZero()
		})
	w.Family("rotor_credits_balance", "gauge", "Each account's credit balance as its backend last reported it (docs/selection.md); none while unknown or unlimited.")
	for _, as := range status {
		if as.Quota == nil || as.Quota.Credits == nil || as.Quota.Credits.Unlimited {
			continue
		}
		if amt, ok := as.Quota.Credits.Amount(); ok {
			w.Sample("rotor_credits_balance", amt, "account", strconv.Itoa(as.Index), "label", as.Account.Label)
		}
	}
	w.Family("rotor_account_on_credits", "gauge",
		"1 for an account whose main window is full while it holds credits: what it serves now spends them.")
	for _, as := range status {
		if as.Quota != nil && as.Quota.Credits != nil {
			on := 0.0
			if as.OnCredits {
				on = 1
			}
			w.Sample("rotor_account_on_credits", on, "account", strconv.Itoa(as.Index), "label", as.Account.Label)
		}
	}
}

// windows writes the gauge family name with a sample for each quota window
// of each limit family of each account in status (limit "codex" for the
// main windows, the family's id for the others), valued by v (none where
// v says so).
func windows(w *promtext.Writer, status []rotation.AccountStatus, name, help string, v func(*rotation.Window) (float64, bool)) {
	w.Family(name, "gauge", help)
	for _, as := range status {
		q := as.Quota
		if q == nil {
			continue
		}
		sample := func(limit string, primary, secondary *rotation.Window) {
			for _, qw := range []struct {
				name string
				w    *rotation.Window
			}{{"primary", primary}, {"secondary", secondary}} {
				if qw.w == nil {
					continue
				}
				if x, ok := v(qw.w); ok {
					w.Sample(name, x, "account", strconv.Itoa(as.Index), "label", as.Account.Label, "limit", limit, "window", qw.name)
				}
			}
		}
		sample(rotation.MainFamily, q.Primary, q.Secondary)
		for _, f := range q.Families {
			sample(f.ID, f.Primary, f.Secondary)
		}
	}
}
