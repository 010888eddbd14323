package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/rotorproxy/rotor/accounts/checkup"
)

// doctorSummary counts the checks of `doctor --json` by status.
type doctorSummary struct {
	OK    int `json:"ok"`
	Warn  int `json:"warn"`
	Error int `json:"error"`
}

func cmdDoctor(a *app, args []string) error {
	fs := a.flags()
	asJSON := fs.Bool("json", false, "print JSON")
	if err := a.noArgs(fs, args); err != nil {
		return err
	}
	dir, err := a.home()
	if err != nil {
		return err
	}
	res := a.checkup(dir).Doctor(context.Background())
	ok, warn, errs := res.Count()
	if *asJSON {
		err = a.exportJSON("doctor", struct {
			Summary doctorSummary   `json:"summary"`
			Checks  []checkup.Check `json:"checks"`
		}{doctorSummary{ok, warn, errs}, res.Checks})
	} else {
		pal := a.palette()
		tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  %s\tCHECK\tDETAIL\n", pal.header("STATUS"))
		for _, c := range res.Checks {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", pal.state(c.Status), c.Name, c.Detail)
		}
		tw.Flush()
		fmt.Fprintf(a.stdout, "\n%d ok, %s, %s.\n", ok, diagPlural(warn, "warning", "warnings"), diagPlural(errs, "error", "errors"))
	}
	if err != nil {
		return err
	}
	if res.Failed() {
		return diagExit1
	}
	return nil
}
