package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/rotation/view"
)

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
	st := view.StatusOf(sel, rows)
	if *asJSON {
		return a.exportJSON("rotation status", st)
	}
	pinned := pool.Pinned()
	if pinned > 0 {
		fmt.Fprintf(a.stdout, "Pinned: account %d (manual, \"rotor unpin\" to rotate)\n", pinned)
	} else {
		fmt.Fprintln(a.stdout, "Pinned: no (rotating)")
	}
	if st.Next.Index != nil {
		fmt.Fprintf(a.stdout, "Next:   account %d (%s)\n\n", *st.Next.Index, st.Next.Reason)
	} else {
		fmt.Fprintf(a.stdout, "Next:   none: %s\n\n", st.Next.Reason)
	}
	if len(rows) == 0 {
		fmt.Fprintln(a.stdout, "No accounts yet.")
		return nil
	}
	pal := a.palette()
	now := a.now()
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  #\t%s\tLABEL\tHEALTH\t%s\t%s\tLAST USED\tCREDITS\n", pal.header("STATE"), pal.header("PRIMARY QUOTA"), pal.header("SECONDARY QUOTA"))
	for _, r := range rows {
		p, s := pal.quotaCells(r.Quota, now)
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Index, pal.state(stateText(r, now)), r.Account.Label, r.Health,
			p, s, ago(r.LastUsed, now), creditsCell(r.Quota))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printMeterNotes(a.stdout, rows, now)
	return nil
}

func ago(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return accounts.HumanDuration(now.Sub(t)) + " ago"
}
