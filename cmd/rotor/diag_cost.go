package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/prices"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// pricing is the price table `rotor report` prices usage with (docs/cost.md):
// the home's (the shipped one, prices.json over it), or the shipped one
// alone when prices.json cannot be read (err says why).
type pricing struct {
	tab *prices.Table
	err error
}

// loadPricing reads the home dir's prices. A damaged prices.json does not
// stop the report: it is named, and the shipped prices stand in.
func loadPricing(dir string) pricing {
	tab, err := prices.Load(dir)
	if err != nil {
		return pricing{tab: prices.Shipped(), err: err}
	}
	return pricing{tab: tab}
}

// pricesBody is the `usage.prices` field of `report --json`: where the
// prices come from, and why prices.json was not used (null when it was,
// or when there is none).
type pricesBody struct {
	prices.About
	Error *string `json:"error"`
}

func (p pricing) body() pricesBody {
	b := pricesBody{About: p.tab.About()}
	if p.err != nil {
		msg := p.err.Error()
		b.Error = &msg
	}
	return b
}

// windowMoney is one window's usage in dollars: in total, per account id
// and per model.
type windowMoney struct {
	Total     prices.Sum
	ByAccount map[string]*prices.Sum
	ByModel   map[string]*prices.Sum
}

// priceWindow prices s's tokens with tab, each account's as its kind in
// pool says (unknown when it is no longer there, or pool is nil).
func priceWindow(s *usage.Summary, tab *prices.Table, pool *accounts.Pool) windowMoney {
	m := windowMoney{ByAccount: map[string]*prices.Sum{}, ByModel: map[string]*prices.Sum{}}
	for k, t := range s.Tokens {
		var one prices.Sum
		tab.Add(&one, kindOf(pool, k.AccountID), k.Model, t.Input, t.Cached, t.Output)
		m.Total.Merge(&one)
		for _, kv := range []struct {
			m   map[string]*prices.Sum
			key string
		}{{m.ByAccount, k.AccountID}, {m.ByModel, k.Model}} {
			sum := kv.m[kv.key]
			if sum == nil {
				sum = &prices.Sum{}
				kv.m[kv.key] = sum
			}
			sum.Merge(&one)
		}
	}
	return m
}

// priceReport prices every window of rep.
func priceReport(rep usage.Report, tab *prices.Table, pool *accounts.Pool) []windowMoney {
	out := make([]windowMoney, len(rep.Windows))
	for i := range rep.Windows {
		out[i] = priceWindow(&rep.Windows[i], tab, pool)
	}
	return out
}

// kindOf is the kind of account id in pool, "" when it is not there.
func kindOf(pool *accounts.Pool, id string) accounts.Kind {
	if pool == nil {
		return ""
	}
	if i := pool.IndexOf(id); i > 0 {
		return pool.At(i).Kind
	}
	return ""
}

// sumOr is *s, or no money for a key with no priced usage.
func sumOr(s *prices.Sum) prices.Sum {
	if s == nil {
		return prices.Sum{}
	}
	return *s
}

// usd is an amount as the report prints it: cents from a dollar up, and
// below it up to hundredths of a cent, so that a few requests still show
// ($0.45, $0.2375, $0.0005).
func usd(v prices.USD) string {
	switch x := float64(v); {
	case x == 0:
		return "$0"
	case math.Abs(x) < 0.00005:
		return "<$0.0001"
	case math.Abs(x) < 1:
		s := fmt.Sprintf("%.4f", x)
		for strings.HasSuffix(s, "0") && len(s)-strings.IndexByte(s, '.') > 3 {
			s = s[:len(s)-1]
		}
		return "$" + s
	default:
		return fmt.Sprintf("$%.2f", x)
	}
}

// figure is usd(v), or "unpriced" for an amount that is no figure
// (prices.Sum.Priced): only usage of models without a price went to it,
// which is not $0 (docs/selection.md).
func figure(v prices.USD, priced bool) string {
	if !priced {
		return "unpriced"
	}
	return usd(v)
}

// printMoney writes the prices' source and, per window, what API-key
// accounts cost, what ChatGPT accounts' usage was worth at API prices,
// what cached input saved and the tokens left unpriced, by model.
func printMoney(w io.Writer, rep usage.Report, money []windowMoney, pr pricing) {
	fmt.Fprintf(w, "\nPrices:  %s\n", pr.tab.About())
	if pr.err != nil {
		fmt.Fprintf(w, "         UNREADABLE: %v; the shipped prices stand in.\n", pr.err)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  LAST\tCOST (API KEYS)\tVALUE (CHATGPT)\tSAVED BY CACHE\tUNPRICED TOKENS")
	for i := range rep.Windows {
		m := &money[i].Total
		unpriced := "-"
		if n := m.UnpricedTokens(); n > 0 {
			unpriced = diagCount(n)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", rep.Windows[i].Window.Name, figure(m.Cost, m.Priced(accounts.KindAPIKey)),
			figure(m.Value, m.Priced(accounts.KindChatGPT)), figure(m.Saved, m.SavedPriced()), unpriced)
	}
	tw.Flush()
	last := len(money) - 1
	if last < 0 {
		return
	}
	name, m := rep.Windows[last].Window.Name, &money[last].Total
	if models := m.UnpricedModels(); len(models) > 0 {
		parts := make([]string, len(models))
		for i, model := range models {
			parts[i] = fmt.Sprintf("%s %s", orDash(model), diagCount(m.Unpriced[model]))
		}
		fmt.Fprintf(w, "  unpriced in %s (no price for these models; add them to prices.json): %s tokens\n", name, strings.Join(parts, ", "))
	}
	if m.Unknown != 0 {
		fmt.Fprintf(w, "  accounts no longer in the pool, %s: %s at API prices\n", name, usd(m.Unknown))
	}
}

// accountMoney is an account's column of the per-window table: what its
// usage cost (an API key) or was worth (a ChatGPT account).
func accountMoney(s *prices.Sum) string {
	switch {
	case s == nil:
		return "-"
	case s.Cost != 0:
		return usd(s.Cost) + " cost"
	case s.Value != 0:
		return usd(s.Value) + " value"
	case s.Unknown != 0:
		return usd(s.Unknown) + " (kind unknown)"
	case len(s.Unpriced) > 0:
		return "unpriced"
	}
	return "$0"
}

// modelMoney is a model's column of the per-window table: its usage at
// API prices, whichever kind of account served it.
func modelMoney(s *prices.Sum) string {
	switch {
	case s == nil:
		return "-"
	case len(s.Unpriced) > 0:
		return "unpriced"
	}
	return usd(s.Cost + s.Value + s.Unknown)
}
