package main

import (
	"fmt"
	"io"
	"math"
	"strings"
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
	// RatePerHour is each window's recent rate of use, in percent of the
	// window per hour (null: unknown).
	RatePerHour forecastRates `json:"rate_per_hour"`
	// Outlook is runs-out, lasts or unknown at those rates (null for an
	// unavailable account or one without quota windows); RunsOutAt and
	// RunsOutWindow say when and which window fills first.
	Outlook       *string `json:"outlook"`
	RunsOutAt     *string `json:"runs_out_at"`
	RunsOutWindow *string `json:"runs_out_window"`
	// The whole meter (docs/selection.md; the quota's credits, workspace and
	// families are in Quota): OnCredits, the usage limits of other
	// families, and the reached type of the limit it waits on.
	OnCredits         bool               `json:"on_credits"`
	FamilyLimits      []view.FamilyLimit `json:"family_limits"`
	LimitReason       *string            `json:"limit_reason"`
	WaitsForWorkspace bool               `json:"waits_for_workspace"`
}

type forecastRates struct {
	Primary   *float64 `json:"primary"`
	Secondary *float64 `json:"secondary"`
}

// forecastRunsOut is the account that runs out next at the recent rates.
type forecastRunsOut struct {
	Index     int    `json:"index"`
	Window    string `json:"window"`
	At        string `json:"at"`
	InSeconds int64  `json:"in_seconds"`
}

// forecastPool is when the whole pool would be blocked at the recent
// rates: verdict blocked (at, until: null when no end is in view),
// not-before (at is the earliest), not-blocked (within horizon_seconds)
// or unknown.
type forecastPool struct {
	Verdict             string  `json:"verdict"`
	At                  *string `json:"at"`
	InSeconds           *int64  `json:"in_seconds"`
	Until               *string `json:"until"`
	HorizonSeconds      int64   `json:"horizon_seconds"`
	UnknownRateAccounts []int   `json:"unknown_rate_accounts"`
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
	// RunsOutNext is null when no account runs out within the horizon
	// at the recent rates, or none has a rate yet.
	RunsOutNext *forecastRunsOut `json:"runs_out_next"`
	Pool        forecastPool     `json:"pool"`
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
			Pinned: f.Pinned, OnCredits: f.OnCredits, FamilyLimits: view.FamilyLimitsOf(f.FamilyLimits, f.Quota),
			LimitReason: stringOrNil(f.LimitReason), WaitsForWorkspace: rotation.WorkspaceLimit(f.LimitReason),
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
		fa.rates(f)
		b.Accounts = append(b.Accounts, fa)
	}
	b.outlook(fc)
	return b
}

// rates fills fa's rates and outlook from f.
func (fa *forecastAccount) rates(f rotation.AccountForecast) {
	round := func(r *float64) *float64 {
		if r == nil {
			return nil
		}
		v := math.Round(*r*100) / 100
		return &v
	}
	fa.RatePerHour = forecastRates{Primary: round(f.PrimaryRate), Secondary: round(f.SecondaryRate)}
	fa.Outlook, fa.RunsOutWindow = stringOrNil(f.Outlook), stringOrNil(f.RunsOutWindow)
	fa.RunsOutAt = view.TimeOrNil(f.RunsOutAt)
}

// outlook fills b's pool-wide outlook from fc.
func (b *ForecastBody) outlook(fc rotation.Forecast) {
	seconds := func(t time.Time) int64 { return int64(math.Ceil(max(t.Sub(fc.At), 0).Seconds())) }
	if r := fc.RunsOutNext; r.Index > 0 {
		b.RunsOutNext = &forecastRunsOut{Index: r.Index, Window: r.Window, At: r.At.UTC().Format(time.RFC3339), InSeconds: seconds(r.At)}
	}
	p := fc.Pool
	b.Pool = forecastPool{Verdict: p.Verdict, At: view.TimeOrNil(p.At), Until: view.TimeOrNil(p.Until),
		HorizonSeconds: int64(p.Horizon / time.Second), UnknownRateAccounts: append([]int{}, p.Unknown...)}
	if !p.At.IsZero() {
		in := seconds(p.At)
		b.Pool.InSeconds = &in
	}
}

// stringOrNil is s, or null when empty.
func stringOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
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
	fmt.Fprintf(tw, "  #\t%s\tWAIT\tRISK\tLABEL\t%s\t%s\tRUNS OUT\tCREDITS\tWHY\n", pal.header("FORECAST"), pal.header("PRIMARY QUOTA"), pal.header("SECONDARY QUOTA"))
	now := fc.At
	for _, f := range fc.Accounts {
		pin := " "
		if f.Pinned {
			pin = "*"
		}
		p, s := windows(f.Quota)
		pc, sc := pal.quotaCells(f.Quota, now)
		fmt.Fprintf(tw, "%s %d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", pin, f.Index, pal.state(f.Verdict), waitText(f), f.Risk,
			f.Account.Label, pc+rateText(p, f.PrimaryRate), sc+rateText(s, f.SecondaryRate),
			runsOutText(f, now), creditsCell(f.Quota), orDash(f.Detail))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	rows := make([]rotation.AccountStatus, len(fc.Accounts))
	for i, f := range fc.Accounts {
		rows[i] = rotation.AccountStatus{Index: f.Index, Account: f.Account, Quota: f.Quota, FamilyLimits: f.FamilyLimits}
	}
	printMeterNotes(w, rows, now)
	printOutlook(w, fc)
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

// rateText follows a window's bar with its recent rate of use: ", +12%/h",
// or ", +?%/h" while it is unknown (nothing for no window).
func rateText(w *rotation.Window, rate *float64) string {
	switch {
	case w == nil:
		return ""
	case rate == nil:
		return ", +?%/h"
	}
	return fmt.Sprintf(", +%s%%/h", rateFigure(*rate))
}

// rateFigure writes a rate with the precision it deserves: 12, 2.5, 0.25.
func rateFigure(r float64) string {
	switch {
	case r >= 10:
		return fmt.Sprintf("%.0f", r)
	case r >= 1:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", r), ".0")
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", r), "0"), ".")
}

// runsOutText is the RUNS OUT cell: in how long a window of the account
// fills before it resets at the recent rates, "no" when none does within
// the horizon, "?" when no rate is known, "-" when not forecast.
func runsOutText(f rotation.AccountForecast, now time.Time) string {
	switch f.Outlook {
	case rotation.OutlookRunsOut:
		return inText(f.RunsOutAt, now)
	case rotation.OutlookLasts:
		return "no"
	case rotation.OutlookUnknown:
		return "?"
	}
	return "-"
}

// inText is how long until t: "in 2h30m", or "now".
func inText(t, now time.Time) string {
	if !t.After(now) {
		return "now"
	}
	return "in " + accounts.HumanDuration(t.Sub(now))
}

// printOutlook says where the pool heads at the recent rates: the account
// that runs out next and when the pool as a whole would be blocked.
func printOutlook(w io.Writer, fc rotation.Forecast) {
	now, p := fc.At, fc.Pool
	horizon := accounts.HumanDuration(p.Horizon)
	next := "unknown: no account has a recent rate yet"
	if r := fc.RunsOutNext; r.Index > 0 {
		next = fmt.Sprintf("account %d (%s), its %s window full %s", r.Index, fc.Accounts[r.Index-1].Account.Label, r.Window, inText(r.At, now))
	} else if p.Verdict != rotation.PoolUnknown {
		next = "none within " + horizon
		if len(p.Unknown) > 0 {
			next += " of the accounts with a recent rate"
		}
	}
	var pool string
	switch p.Verdict {
	case rotation.PoolBlocked:
		pool = inText(p.At, now) + ", with no end in view"
		if !p.Until.IsZero() {
			pool = fmt.Sprintf("%s, for %s", inText(p.At, now), accounts.HumanDuration(p.Until.Sub(p.At)))
		}
	case rotation.PoolNotBefore:
		pool = inText(p.At, now) + " at the soonest"
	case rotation.PoolNotBlocked:
		pool = "not at the recent rate (looking " + horizon + " ahead)"
	default:
		pool = "unknown"
	}
	if len(p.Unknown) > 0 {
		ids := make([]string, len(p.Unknown))
		for i, n := range p.Unknown {
			ids[i] = fmt.Sprint(n)
		}
		word := "account"
		if len(ids) > 1 {
			word = "accounts"
		}
		pool += fmt.Sprintf("; no recent rate yet for %s %s", word, strings.Join(ids, ", "))
	}
	fmt.Fprintf(w, "\nAt the recent rates of use (percent of a window per hour, from the last observations):\n")
	fmt.Fprintf(w, "  Runs out next: %s\n  Pool blocked:  %s\n", next, pool)
}
