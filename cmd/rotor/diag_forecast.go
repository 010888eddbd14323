package main

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/view"
)

// forecastAccount is one account in `rotor forecast --json`.
type forecastAccount struct {
	Index int    `json:"index"`
	ID    string `json:"id"`
	Label string `json:"label"`
	Kind  string `json:"kind"`
	// Verdict is ready, delayed or unavailable.
	Verdict string `json:"verdict"`
	// State is the `rotation status` state word.
	State string `json:"state"`
	// Reason is the stable word for why it is not ready (null when ready);
	// Detail says it for a person.
	Reason *string `json:"reason"`
	Detail string  `json:"detail"`
	// WaitSeconds and ReadyAt: how long a delayed account waits; null
	// when ready, unavailable, or the end is unknown.
	WaitSeconds    *int64      `json:"wait_seconds"`
	ReadyAt        *string     `json:"ready_at"`
	Risk           int         `json:"risk"`
	RiskFactors    []string    `json:"risk_factors"`
	Health         int         `json:"health"`
	RecentFailures int         `json:"recent_failures"`
	Pinned         bool        `json:"pinned"`
	Quota          *view.Quota `json:"quota"`
}

type forecastSummary struct {
	Total       int `json:"total"`
	Ready       int `json:"ready"`
	Delayed     int `json:"delayed"`
	Unavailable int `json:"unavailable"`
}

// ForecastBody (exported so the JSON exporter reaches into it when embedded) is the forecast object shared by `forecast --json` and the
// `forecast` field of `report --json`.
type ForecastBody struct {
	PinnedAccountIndex *int              `json:"pinned_account_index"`
	PinSource          *string           `json:"pin_source"`
	Summary            forecastSummary   `json:"summary"`
	Recommendation     view.Pick         `json:"recommendation"`
	Accounts           []forecastAccount `json:"accounts"`
}

func toForecastBody(fc rotation.Forecast) ForecastBody {
	b := ForecastBody{
		PinnedAccountIndex: view.IndexOrNil(fc.PinnedIndex),
		Summary: forecastSummary{Total: fc.Summary.Total, Ready: fc.Summary.Ready,
			Delayed: fc.Summary.Delayed, Unavailable: fc.Summary.Unavailable},
		Recommendation: view.Pick{Index: view.IndexOrNil(fc.Recommendation.Index), Reason: fc.Recommendation.Reason},
		Accounts:       []forecastAccount{},
	}
	if fc.PinSource != "" {
		s := fc.PinSource
		b.PinSource = &s
	}
	for _, f := range fc.Accounts {
		fa := forecastAccount{
			Index: f.Index, ID: f.Account.ID, Label: f.Account.Label, Kind: string(f.Account.Kind),
			Verdict: f.Verdict, State: f.State, Detail: f.Detail, ReadyAt: view.TimeOrNil(f.ReadyAt),
			Risk: f.Risk, RiskFactors: f.RiskFactors, Health: f.Health, RecentFailures: f.RecentFailures,
			Pinned: f.Pinned,
		}
		if f.Reason != "" {
			r := f.Reason
			fa.Reason = &r
		}
		if !f.ReadyAt.IsZero() {
			s := int64(math.Ceil(max(f.Wait, 0).Seconds()))
			fa.WaitSeconds = &s
		}
		if f.Quota != nil {
			fa.Quota = view.QuotaOf(f.Quota)
		}
		b.Accounts = append(b.Accounts, fa)
	}
	return b
}

func cmdForecast(a *app, args []string) error {
	fs := a.flags()
	asJSON := fs.Bool("json", false, "print JSON")
	if err := a.noArgs(fs, args); err != nil {
		return err
	}
	_, sel, err := a.selector()
	if err != nil {
		return err
	}
	fc := sel.Forecast()
	if *asJSON {
		return a.exportJSON("forecast", struct {
			GeneratedAt string `json:"generated_at"`
			ForecastBody
		}{fc.At.UTC().Format(time.RFC3339), toForecastBody(fc)})
	}
	return printForecast(a.stdout, a.palette(), fc)
}

// printForecast writes the forecast for a person: who is next, then one
// row per account, verdict first.
func printForecast(w io.Writer, pal palette, fc rotation.Forecast) error {
	if fc.Recommendation.Index > 0 {
		a := fc.Accounts[fc.Recommendation.Index-1].Account
		fmt.Fprintf(w, "Next:   account %d (%s): %s\n", fc.Recommendation.Index, a.Label, fc.Recommendation.Reason)
	} else {
		fmt.Fprintf(w, "Next:   none: %s\n", fc.Recommendation.Reason)
	}
	if fc.PinnedIndex > 0 {
		fmt.Fprintf(w, "Pinned: account %d (%s); the others wait until \"rotor unpin\"\n", fc.PinnedIndex, fc.PinSource)
	}
	if len(fc.Accounts) == 0 {
		fmt.Fprintln(w, "\nNo accounts yet. Add one with \"rotor import codex\", \"rotor login\" or \"rotor add-key\".")
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  #\t%s\tWAIT\tRISK\tLABEL\t%s\t%s\tWHY\n", pal.header("FORECAST"), pal.header("PRIMARY QUOTA"), pal.header("SECONDARY QUOTA"))
	now := fc.At
	for _, f := range fc.Accounts {
		pin := " "
		if f.Pinned {
			pin = "*"
		}
		p, s := windows(f.Quota)
		fmt.Fprintf(tw, "%s %d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", pin, f.Index, pal.state(f.Verdict), waitText(f), f.Risk,
			f.Account.Label, pal.window(p, now), pal.window(s, now), orDash(f.Detail))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	s := fc.Summary
	_, err := fmt.Fprintf(w, "\n%s: %d ready, %d delayed, %d unavailable. RISK is 0-100 (higher fails sooner).\n",
		diagPlural(s.Total, "account", "accounts"), s.Ready, s.Delayed, s.Unavailable)
	return err
}

// waitText is how long a delayed account waits, "?" when unknown.
func waitText(f rotation.AccountForecast) string {
	switch {
	case f.Verdict != rotation.ForecastDelayed:
		return "-"
	case f.ReadyAt.IsZero():
		return "?"
	}
	return accounts.HumanDuration(f.Wait)
}
