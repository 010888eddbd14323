package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/rotorproxy/rotor/accounts/checkup"
)

func cmdFix(a *app, args []string) error {
	fs := a.flags()
	dry := fs.Bool("dry-run", false, "only list what would be repaired; change nothing")
	prune := fs.Bool("prune-secrets", false, "also delete secrets that no account in the store or its backups names")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := a.noArgs(fs, args); err != nil {
		return err
	}
	dir, err := a.home()
	if err != nil {
		return err
	}
	res := a.checkup(dir).Fix(context.Background(), checkup.FixOptions{DryRun: *dry, PruneSecrets: *prune})
	actions := res.Actions
	if *asJSON {
		err = a.exportJSON("fix", struct {
			DryRun  bool             `json:"dry_run"`
			Changed bool             `json:"changed"`
			Actions []checkup.Action `json:"actions"`
		}{res.DryRun, res.Changed(), actions})
	} else {
		err = printFix(a, res)
	}
	if err != nil {
		return err
	}
	if res.Failed() {
		return diagExit1
	}
	return nil
}

// printFix lists the actions, outcome first.
func printFix(a *app, res checkup.FixResult) error {
	if len(res.Actions) == 0 {
		_, err := fmt.Fprintln(a.stdout, "Nothing to fix.")
		return err
	}
	if res.DryRun {
		fmt.Fprintln(a.stdout, "Dry run: nothing was changed. \"rotor fix\" would:")
		fmt.Fprintln(a.stdout)
	}
	pal := a.palette()
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  %s\tACTION\tTARGET\tDETAIL\n", pal.header("STATUS"))
	done, bad := 0, 0
	for _, act := range res.Actions {
		detail := act.Detail
		switch act.Status {
		case checkup.ActionDone:
			done++
		case checkup.ActionFailed:
			bad++
			if detail != "" {
				detail += ": "
			}
			detail += act.Error
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", pal.state(act.Status), act.Action, act.Target, orDash(detail))
	}
	tw.Flush()
	switch {
	case res.DryRun:
		fmt.Fprintf(a.stdout, "\n%s planned. Run \"rotor fix\" to apply.\n", diagPlural(len(res.Actions), "repair", "repairs"))
	default:
		fmt.Fprintf(a.stdout, "\n%s made, %s.\n", diagPlural(done, "change", "changes"), diagPlural(bad, "failure", "failures"))
	}
	return nil
}
