package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/rotorproxy/rotor/accounts/checkup"
)

func cmdVerifyFlagged(a *app, args []string) error {
	fs := a.flags()
	dry := fs.Bool("dry-run", false, "only say what would be tried: no token refresh, no probe")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := a.noArgs(fs, args); err != nil {
		return err
	}
	dir, err := a.home()
	if err != nil {
		return err
	}
	res, err := a.checkup(dir).VerifyFlagged(context.Background(), *dry)
	if err != nil {
		return err
	}
	total, restored, still := res.Count()
	reports := res.Reports
	if *asJSON {
		err = a.exportJSON("verify-flagged", struct {
			Total        int                    `json:"total"`
			Restored     int                    `json:"restored"`
			StillFlagged int                    `json:"still_flagged"`
			DryRun       bool                   `json:"dry_run"`
			Reports      []checkup.VerifyReport `json:"reports"`
		}{total, restored, still, res.DryRun, reports})
	} else {
		err = printVerify(a, res, total, restored, still)
	}
	if err != nil {
		return err
	}
	if still > 0 {
		return diagExit1 // a flagged account still needs a person
	}
	return nil
}

// printVerify lists each flagged account, result first.
func printVerify(a *app, res checkup.VerifyResult, total, restored, still int) error {
	if total == 0 {
		_, err := fmt.Fprintln(a.stdout, "No account is flagged.")
		return err
	}
	if res.DryRun {
		fmt.Fprintln(a.stdout, "Dry run: no token was refreshed and nothing was changed.")
		fmt.Fprintln(a.stdout)
	}
	pal := a.palette()
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  %s\t#\tLABEL\tFLAG\tDETAIL\n", pal.header("RESULT"))
	for _, r := range res.Reports {
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\n", pal.state(r.Result), r.Index, r.Label, r.FlaggedReason, r.Detail)
	}
	tw.Flush()
	if res.DryRun {
		_, err := fmt.Fprintf(a.stdout, "\n%s would be verified. Run \"rotor verify-flagged\" to do it.\n",
			diagPlural(total, "flagged account", "flagged accounts"))
		return err
	}
	_, err := fmt.Fprintf(a.stdout, "\n%s: %d restored, %d still flagged.\n",
		diagPlural(total, "flagged account", "flagged accounts"), restored, still)
	return err
}
