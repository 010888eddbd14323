package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/rotation"
)

// What list, rotation status and forecast show of the whole meter (docs/selection.md): credits, workspaces, limit families and the reason of a limit.

// workspaceNoWindows is what a workspace account's quota cells say: the
// backend budgets it without windows, which is not "no quota".
const workspaceNoWindows = "workspace, no windows"

// quotaCells are an account's two quota cells: the windows' bars, or
// "workspace, no windows" for a workspace account without them.
func (p palette) quotaCells(q *rotation.Quota, now time.Time) (primary, secondary string) {
	w1, w2 := windows(q)
	if q != nil && q.Workspace && w1 == nil && w2 == nil {
		return workspaceNoWindows, "-"
	}
	return p.window(w1, now), p.window(w2, now)
}

// creditsCell is the CREDITS cell: the balance, "unlimited", "yes" when
// the account has credits of unknown balance, "-" when unknown or none.
func creditsCell(q *rotation.Quota) string {
	if q == nil || q.Credits == nil {
		return "-"
	}
	c := q.Credits
	switch {
	case c.Unlimited:
		return "unlimited"
	case c.Balance != "":
		return c.Balance
	case c.HasCredits:
		return "yes"
	}
	return "-"
}

// limitReasonText says why a limited account waits, for a person: a
// workspace limit waits for the workspace's owner.
func limitReasonText(reason string) string {
	if rotation.WorkspaceLimit(reason) {
		return "waits for the workspace owner (" + reason + ")"
	}
	return reason
}

// windowShare is one window as a family line shows it: "40% of 5h".
func windowShare(w *rotation.Window, now time.Time) string {
	s := fmt.Sprintf("%.0f%%", min(max(w.UsedPercent, 0), 100))
	if w.WindowMinutes > 0 {
		s += " of " + accounts.HumanDuration(time.Duration(w.WindowMinutes)*time.Minute)
	}
	if !w.ResetsAt.IsZero() && w.ResetsAt.After(now) {
		s += " (resets in " + accounts.HumanDuration(w.ResetsAt.Sub(now)) + ")"
	}
	return s
}

// familyLines are an account's limit families other than the main one,
// one line each: the model, its windows, and until when it is limited.
// A family limited but never seen in a quota is named by its id.
func familyLines(q *rotation.Quota, limits map[string]time.Time, now time.Time) []string {
	var ids []string
	if q != nil {
		for _, f := range q.Families {
			ids = append(ids, f.ID)
		}
	}
	for id := range limits {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	lines := make([]string, 0, len(ids))
	for _, id := range ids {
		name, parts := id, []string{}
		if f := q.Family(id); f != nil {
			if f.LimitName != "" {
				name = f.LimitName
			}
			for _, w := range [2]*rotation.Window{f.Primary, f.Secondary} {
				if w != nil {
					parts = append(parts, windowShare(w, now))
				}
			}
		}
		if len(parts) == 0 {
			parts = append(parts, "no windows seen")
		}
		line := name + ": " + strings.Join(parts, ", ")
		if until, ok := limits[id]; ok && until.After(now) {
			line += "; usage limit reached, back in " + accounts.HumanDuration(until.Sub(now))
		}
		lines = append(lines, line)
	}
	return lines
}

// printMeterNotes writes, below a table of accounts, what its rows have
// no room for: each account's other limit families. Nothing when no
// account has one.
func printMeterNotes(w io.Writer, rows []rotation.AccountStatus, now time.Time) {
	first := true
	for _, r := range rows {
		lines := familyLines(r.Quota, r.FamilyLimits, now)
		if len(lines) == 0 {
			continue
		}
		if first {
			fmt.Fprintln(w, "\nModels with their own limits:")
			first = false
		}
		for _, l := range lines {
			fmt.Fprintf(w, "  %d %s  %s\n", r.Index, r.Account.Label, l)
		}
	}
}
