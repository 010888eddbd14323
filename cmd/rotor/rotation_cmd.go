package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/rotation"
)

type jsonWindow struct {
	UsedPercent   float64 `json:"used_percent"`
	WindowMinutes int     `json:"window_minutes"`
	ResetsAt      *string `json:"resets_at"`
}

type jsonQuota struct {
	Primary   *jsonWindow `json:"primary"`
	Secondary *jsonWindow `json:"secondary"`
}

type rotationAccount struct {
	Index    int        `json:"index"`
	Label    string     `json:"label"`
	State    string     `json:"state"`
	Until    *string    `json:"until"`
	Reason   *string    `json:"reason"`
	Health   int        `json:"health"`
	LastUsed *string    `json:"last_used"`
	Quota    *jsonQuota `json:"quota"`
}

type pick struct {
	Index  *int   `json:"index"`
	Reason string `json:"reason"`
}

func toJSONWindow(w *rotation.Window) *jsonWindow {
	if w == nil {
		return nil
	}
	return &jsonWindow{UsedPercent: w.UsedPercent, WindowMinutes: w.WindowMinutes, ResetsAt: rfc3339(w.ResetsAt)}
}

func cmdRotation(a *app, args []string) error {
	fs := a.flags()
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "status" {
		return rerr.Validation("subcommand", "Usage: rotor rotation status [--json]")
	}
	pool, sel, err := a.selector()
	if err != nil {
		return err
	}
	rows := sel.Status()
	next, why := sel.Next()
	pinned := pool.Pinned()
	var source *string
	if pinned > 0 {
		s := rotation.PinManual
		source = &s
	}
	if *asJSON {
		out := struct {
			Command            string            `json:"command"`
			PinnedAccountIndex *int              `json:"pinned_account_index"`
			PinSource          *string           `json:"pin_source"`
			Next               pick              `json:"next"`
			Accounts           []rotationAccount `json:"accounts"`
		}{Command: "rotation status", PinnedAccountIndex: nonZero(pinned), PinSource: source,
			Next: pick{Index: nonZero(next), Reason: why}, Accounts: []rotationAccount{}}
		for _, r := range rows {
			ra := rotationAccount{Index: r.Index, Label: r.Account.Label, State: r.State, Until: rfc3339(r.Until),
				Health: r.Health, LastUsed: rfc3339(r.LastUsed)}
			if r.Reason != "" {
				reason := r.Reason
				ra.Reason = &reason
			}
			if r.Quota != nil {
				ra.Quota = &jsonQuota{Primary: toJSONWindow(r.Quota.Primary), Secondary: toJSONWindow(r.Quota.Secondary)}
			}
			out.Accounts = append(out.Accounts, ra)
		}
		return a.printJSON(out)
	}
	if pinned > 0 {
		fmt.Fprintf(a.stdout, "Pinned: account %d (manual, \"rotor unpin\" to rotate)\n", pinned)
	} else {
		fmt.Fprintln(a.stdout, "Pinned: no (rotating)")
	}
	if next > 0 {
		fmt.Fprintf(a.stdout, "Next:   account %d (%s)\n\n", next, why)
	} else {
		fmt.Fprintf(a.stdout, "Next:   none: %s\n\n", why)
	}
	if len(rows) == 0 {
		fmt.Fprintln(a.stdout, "No accounts yet.")
		return nil
	}
	pal := a.palette()
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  #\t%s\tLABEL\tHEALTH\tPRIMARY QUOTA\tSECONDARY QUOTA\tLAST USED\n", pal.header("STATE"))
	for _, r := range rows {
		var p, s *rotation.Window
		if r.Quota != nil {
			p, s = r.Quota.Primary, r.Quota.Secondary
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%s\t%s\t%s\n", r.Index, pal.state(stateText(r)), r.Account.Label, r.Health,
			windowText(p), windowText(s), ago(r.LastUsed))
	}
	return tw.Flush()
}

func windowText(w *rotation.Window) string {
	if w == nil {
		return "-"
	}
	s := fmt.Sprintf("%.0f%% used", w.UsedPercent)
	if !w.ResetsAt.IsZero() && time.Until(w.ResetsAt) > 0 {
		s += ", resets in " + rotation.HumanDuration(time.Until(w.ResetsAt))
	}
	return s
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return rotation.HumanDuration(time.Since(t)) + " ago"
}
