package main

import (
	"cmp"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/checkup"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/accounts/prices"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/usage"
	"github.com/rotorproxy/rotor/rotation/view"
)

// usageCounts is one set of usage totals in `report --json`.
type usageCounts struct {
	Requests     int64            `json:"requests"`
	Errors       int64            `json:"errors"`
	ErrorsByCode map[string]int64 `json:"errors_by_code"`
	ByStatus     map[string]int64 `json:"by_status"`
	Tokens       usage.Tokens     `json:"tokens"`
	// CacheHitRate is cached ÷ input tokens, null without input (docs/cost.md).
	CacheHitRate *float64       `json:"cache_hit_rate"`
	Affinity     affinityCounts `json:"affinity"`
	// Credits are the requests served on credits, past a full window's
	// included quota, and their tokens (docs/selection.md).
	Credits creditsCounts `json:"credits"`
	// FastRequests and FlexRequests count the requests that asked for
	// the priority service tier (Codex's Fast) and for flex.
	FastRequests int64 `json:"fast_requests"`
	FlexRequests int64 `json:"flex_requests"`
	// Money is the usage in dollars at the report's prices (docs/cost.md).
	Money prices.Sum `json:"money"`
}

// affinityCounts are the requests session affinity kept on their
// conversation's account and those it moved to another.
type affinityCounts struct {
	Kept  int64 `json:"kept"`
	Moved int64 `json:"moved"`
}

// creditsCounts are the requests an account served on credits and their
// tokens.
type creditsCounts struct {
	Requests int64        `json:"requests"`
	Tokens   usage.Tokens `json:"tokens"`
}

func toUsageCounts(c *usage.Counts, money prices.Sum) usageCounts {
	out := usageCounts{Requests: c.Requests, Errors: c.Errors, ErrorsByCode: map[string]int64{},
		ByStatus: map[string]int64{}, Tokens: c.Tokens, Affinity: affinityCounts{c.AffinityKept, c.AffinityMoved}, Money: money,
		Credits: creditsCounts{c.CreditsRequests, c.CreditsTokens}, FastRequests: c.FastRequests, FlexRequests: c.FlexRequests}
	if rate, ok := c.Tokens.CacheHitRate(); ok {
		out.CacheHitRate = &rate
	}
	for k, v := range c.ErrorsByCode {
		out.ErrorsByCode[k] = v
	}
	for k, v := range c.ByStatus {
		out.ByStatus[strconv.Itoa(k)] = v
	}
	return out
}

// usageAccount is one account's usage; Index and Label are null for an
// account no longer in the pool, and AccountID too for the requests no
// account served (refused with no-account: their records name none).
type usageAccount struct {
	Index     *int    `json:"index"`
	AccountID *string `json:"account_id"`
	Label     *string `json:"label"`
	usageCounts
}

type usageModel struct {
	Model string `json:"model"`
	usageCounts
}

type usageWindow struct {
	Since     string         `json:"since"`
	Total     usageCounts    `json:"total"`
	ByAccount []usageAccount `json:"by_account"`
	ByModel   []usageModel   `json:"by_model"`
}

// usageBody is the `usage` field of `report --json`: one entry per window
// ("1h", "24h", "7d").
type usageBody struct {
	Path string `json:"path"`
	// Records is how many records were read; SkippedLines how many lines
	// were not records (a write cut short).
	Records      int64 `json:"records"`
	SkippedLines int64 `json:"skipped_lines"`
	// OldestRecord is the oldest record on disk: the log is rotated, so a
	// window reaching further back is incomplete.
	OldestRecord *string                `json:"oldest_record"`
	Windows      map[string]usageWindow `json:"windows"`
	Error        *string                `json:"error"`
	// Prices are where the prices of every money field come from.
	Prices pricesBody `json:"prices"`
}

// noAccount is how the report names the requests no account served: a
// request refused before any account took it (503 no-account) is
// recorded with no account id, which names no account, removed or not.
const noAccount = "(no account)"

// accountName is how the report's text names account id: its index and
// label, the id of an account no longer in pool, or noAccount.
func accountName(pool *accounts.Pool, id string) string {
	if id == "" {
		return noAccount
	}
	if i, label := accountRef(pool, id); i != nil {
		return fmt.Sprintf("%d %s", *i, *label)
	}
	return id + " (removed)"
}

// accountOrder orders account ids as the report lists them: pool order,
// removed accounts after (by id), the requests no account served last.
func accountOrder(pool *accounts.Pool, x, y string) int {
	rank := func(id string) int {
		if id == "" {
			return 1<<30 + 1
		}
		i, _ := accountRef(pool, id)
		return indexOr(i)
	}
	return cmp.Or(cmp.Compare(rank(x), rank(y)), strings.Compare(x, y))
}

// accountRef finds an account id's index and label in pool (nil: removed,
// or no account).
func accountRef(pool *accounts.Pool, id string) (*int, *string) {
	if pool == nil {
		return nil, nil
	}
	i := pool.IndexOf(id)
	if i == 0 {
		return nil, nil
	}
	label := pool.At(i).Label
	return &i, &label
}

func toUsageBody(dir string, rep usage.Report, err error, pool *accounts.Pool, pr pricing, money []windowMoney) usageBody {
	b := usageBody{Path: filepath.Join(dir, home.UsageFile), Records: rep.Records, SkippedLines: rep.Skipped,
		OldestRecord: view.TimeOrNil(rep.Oldest), Windows: map[string]usageWindow{}, Prices: pr.body()}
	if err != nil {
		msg := err.Error()
		b.Error = &msg
	}
	for i, w := range rep.Windows {
		m := &money[i]
		uw := usageWindow{Since: w.Since.UTC().Format(time.RFC3339), Total: toUsageCounts(&w.Total, m.Total),
			ByAccount: []usageAccount{}, ByModel: []usageModel{}}
		ids := make([]string, 0, len(w.ByAccount))
		for id := range w.ByAccount {
			ids = append(ids, id)
		}
		slices.SortFunc(ids, func(x, y string) int { return accountOrder(pool, x, y) })
		for _, id := range ids {
			idx, label := accountRef(pool, id)
			var aid *string
			if id != "" {
				aid = &id
			}
			uw.ByAccount = append(uw.ByAccount, usageAccount{Index: idx, AccountID: aid, Label: label, usageCounts: toUsageCounts(w.ByAccount[id], sumOr(m.ByAccount[id]))})
		}
		for model, c := range w.ByModel {
			uw.ByModel = append(uw.ByModel, usageModel{Model: model, usageCounts: toUsageCounts(c, sumOr(m.ByModel[model]))})
		}
		// Busiest model first.
		slices.SortFunc(uw.ByModel, func(x, y usageModel) int {
			return cmp.Or(cmp.Compare(y.Requests, x.Requests), strings.Compare(x.Model, y.Model))
		})
		b.Windows[w.Window.Name] = uw
	}
	return b
}

func indexOr(i *int) int {
	if i == nil {
		return 1 << 30
	}
	return *i
}

func cmdReport(a *app, args []string) error {
	fs := a.flags()
	asJSON := fs.Bool("json", false, "print JSON")
	if err := a.noArgs(fs, args); err != nil {
		return err
	}
	st, err := a.store()
	if err != nil {
		return err
	}
	now := a.now()
	health := a.checkup(st.Dir()).Store()
	// An unreadable store leaves no forecast, but the rest of the report is
	// still worth printing; the command then exits 1.
	var fc *rotation.Forecast
	var pool *accounts.Pool
	if health.Readable {
		if pool, err = st.Load(); err != nil {
			return err
		}
		sel, err := a.runtime(st, pool)
		if err != nil {
			return err
		}
		f := sel.Forecast()
		fc = &f
	}
	rep, uerr := usage.Summarize(st.Dir(), now, usage.ReportWindows)
	pr := loadPricing(st.Dir())
	money := priceReport(rep, pr.tab, pool)
	usage := toUsageBody(st.Dir(), rep, uerr, pool, pr, money)
	if *asJSON {
		var fb *ForecastBody
		if fc != nil {
			b := toForecastBody(*fc)
			fb = &b
		}
		err = a.exportJSON("report", struct {
			GeneratedAt string              `json:"generated_at"`
			Store       checkup.StoreHealth `json:"store"`
			Forecast    *ForecastBody       `json:"forecast"`
			Usage       usageBody           `json:"usage"`
		}{now.UTC().Format(time.RFC3339), health, fb, usage})
	} else {
		err = printReport(a.stdout, a.palette(), now, health, fc, rep, uerr, pool, usageMoney{pr, money})
	}
	if err != nil {
		return err
	}
	if !health.Readable {
		return diagExit1
	}
	return nil
}

// usageMoney is the usage priced for the report, window by window, and
// the prices that did it.
type usageMoney struct {
	pr    pricing
	money []windowMoney
}

func printReport(w io.Writer, pal palette, now time.Time, h checkup.StoreHealth, fc *rotation.Forecast, rep usage.Report, uerr error, pool *accounts.Pool, um usageMoney) error {
	fmt.Fprintf(w, "rotor report, %s\n\n", now.Format("2006-01-02 15:04 MST"))
	printStoreHealth(w, h)
	if fc != nil {
		fmt.Fprintln(w)
		if err := printForecast(w, pal, *fc); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	return printUsage(w, now, rep, uerr, pool, um)
}

func printStoreHealth(w io.Writer, h checkup.StoreHealth) {
	if !h.Readable {
		fmt.Fprintf(w, "Store:   UNREADABLE: %s\n", *h.Error)
		if h.GoodBackups > 0 {
			fmt.Fprintf(w, "         %s; \"rotor fix\" restores the newest.\n", diagPlural(h.GoodBackups, "readable backup", "readable backups"))
		} else {
			fmt.Fprintln(w, "         No readable backup: repair the file by hand, or move it away and add the accounts again.")
		}
		return
	}
	fmt.Fprintf(w, "Store:   %s (%d enabled, %d disabled, %d flagged), %s of accounts.json\n",
		diagPlural(h.Accounts, "account", "accounts"), h.Enabled, h.Disabled, h.Flagged, diagPlural(h.GoodBackups, "good backup", "good backups"))
	backend := "unavailable"
	if h.SecretsBackend != nil {
		backend = *h.SecretsBackend
	}
	fmt.Fprintf(w, "Secrets: %s backend", backend)
	if h.OrphanedSecrets != nil && h.MissingSecrets != nil {
		fmt.Fprintf(w, ", %s without a secret, %s", diagPlural(len(h.MissingSecrets), "account", "accounts"),
			diagPlural(*h.OrphanedSecrets, "orphaned secret", "orphaned secrets"))
	}
	fmt.Fprintln(w)
	var issues []string
	if len(h.MissingSecrets) > 0 {
		issues = append(issues, fmt.Sprintf("no secret for %s", indexList(h.MissingSecrets)))
	}
	if h.OrphanedSecrets != nil && *h.OrphanedSecrets > 0 {
		issues = append(issues, "orphaned secrets (\"rotor fix\" removes them)")
	}
	for _, g := range h.Duplicates {
		issues = append(issues, fmt.Sprintf("%s are the same login (\"rotor fix\" merges them)", indexList(g)))
	}
	if !h.PinValid {
		issues = append(issues, "the pin names a removed account (\"rotor unpin\")")
	}
	if len(issues) > 0 {
		fmt.Fprintf(w, "Issues:  %s; \"rotor doctor\" explains.\n", strings.Join(issues, "; "))
	}
}

// indexList is "account 3" or "accounts 1, 2".
func indexList(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	if len(s) == 1 {
		return "account " + s[0]
	}
	return "accounts " + strings.Join(s, ", ")
}

// usageCols are the columns of every usage table, after its first.
// ON CREDITS is requests/tokens served on credits (docs/selection.md); FAST the
// requests that asked for the priority tier.
const usageCols = "REQUESTS\tERRORS\tINPUT\tCACHED\tCACHE HIT\tOUTPUT\tREASONING\tAFFINITY KEPT/MOVED\tON CREDITS REQ/TOK\tFAST"

func usageRow(c *usage.Counts) string {
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s/%s\t%s/%s\t%s", diagCount(c.Requests), diagCount(c.Errors), diagCount(c.Tokens.Input),
		diagCount(c.Tokens.Cached), hitRate(&c.Tokens), diagCount(c.Tokens.Output), diagCount(c.Tokens.Reasoning),
		diagCount(c.AffinityKept), diagCount(c.AffinityMoved), diagCount(c.CreditsRequests), diagCount(c.CreditsTokens.Total),
		diagCount(c.FastRequests))
}

// hitRate is the prompt cache's hit rate as a percentage, "-" without
// input.
func hitRate(t *usage.Tokens) string {
	rate, ok := t.CacheHitRate()
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*rate)
}

// printUsage writes the totals per window and what they come to in
// dollars, then, for each window with requests, the split by account and
// by model and the errors by code.
func printUsage(w io.Writer, now time.Time, rep usage.Report, uerr error, pool *accounts.Pool, um usageMoney) error {
	if uerr != nil {
		fmt.Fprintf(w, "Usage:   cannot read the usage log: %v\n", uerr)
		return nil
	}
	if rep.Records == 0 {
		fmt.Fprintln(w, "Usage:   no requests recorded yet.")
		return nil
	}
	fmt.Fprintf(w, "Usage:   %s recorded, the oldest %s ago\n\n", diagPlural(int(rep.Records), "request", "requests"), accounts.HumanDuration(now.Sub(rep.Oldest)))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  LAST\t"+usageCols)
	for i := range rep.Windows {
		s := &rep.Windows[i]
		fmt.Fprintf(tw, "  %s\t%s\n", s.Window.Name, usageRow(&s.Total))
	}
	tw.Flush()
	printMoney(w, rep, um.money, um.pr)
	shown := int64(-1)
	for i := range rep.Windows {
		s := &rep.Windows[i]
		if s.Total.Requests == 0 {
			continue
		}
		if s.Total.Requests == shown {
			// Same records as the smaller window above: nothing new to split.
			fmt.Fprintf(w, "\nLast %s: the same requests as above.\n", s.Window.Name)
			continue
		}
		shown = s.Total.Requests
		printWindow(w, s, pool, &um.money[i])
	}
	return nil
}

// printWindow writes one window's split by account and by model, each
// with its dollars, and its errors by code.
func printWindow(w io.Writer, s *usage.Summary, pool *accounts.Pool, m *windowMoney) {
	fmt.Fprintf(w, "\nLast %s:\n", s.Window.Name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  ACCOUNT\t"+usageCols+"\tUSD")
	ids := make([]string, 0, len(s.ByAccount))
	for id := range s.ByAccount {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(x, y string) int { return accountOrder(pool, x, y) })
	for _, id := range ids {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", accountName(pool, id), usageRow(s.ByAccount[id]), accountMoney(m.ByAccount[id]))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  MODEL\t"+usageCols+"\tAT API PRICES")
	models := make([]string, 0, len(s.ByModel))
	for m := range s.ByModel {
		models = append(models, m)
	}
	slices.SortFunc(models, func(x, y string) int {
		return cmp.Or(cmp.Compare(s.ByModel[y].Requests, s.ByModel[x].Requests), strings.Compare(x, y))
	})
	for _, model := range models {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", orDash(model), usageRow(s.ByModel[model]), modelMoney(m.ByModel[model]))
	}
	tw.Flush()
	if len(s.Total.ErrorsByCode) > 0 {
		codes := make([]string, 0, len(s.Total.ErrorsByCode))
		for c := range s.Total.ErrorsByCode {
			codes = append(codes, c)
		}
		slices.SortFunc(codes, func(x, y string) int {
			return cmp.Or(cmp.Compare(s.Total.ErrorsByCode[y], s.Total.ErrorsByCode[x]), strings.Compare(x, y))
		})
		parts := make([]string, len(codes))
		for i, c := range codes {
			parts[i] = fmt.Sprintf("%s %d", c, s.Total.ErrorsByCode[c])
		}
		fmt.Fprintf(w, "  errors: %s\n", strings.Join(parts, ", "))
	}
}
