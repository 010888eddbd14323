package metrics

import (
	"strconv"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/prices"
	"github.com/rotorproxy/rotor/proxy/promtext"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// Costs are the dollars in GET /metrics (docs/cost.md): every finished
// request's usage priced at the serve's price table, as the request path's
// end records it.
//
//   - rotor_cost_usd_total{account,model,kind}: kind "cost" for what an
//     API-key account's usage cost, "value" for what a ChatGPT account's
//     would have cost at API prices.
//   - rotor_cache_saved_usd_total{account,model}: what cached input saved.
//   - rotor_unpriced_tokens_total{account,kind}: the input and output
//     tokens of models the table does not know, which are in no amount
//     above (unpriced, never free).
//
// Labels stay bounded: account is the index in the pool; model is the
// name the table prices a model under (a dated snapshot counts under its
// base model), so it takes no value the table does not hold, and an
// unknown model takes none at all.
type Costs struct {
	table    *prices.Table
	sel      *rotation.Selector
	meter    func(accounts.Kind) string
	cost     *promtext.CounterVec
	saved    *promtext.CounterVec
	unpriced *promtext.CounterVec
	series   readMostly[costKey, *costSeries]
}

// costKey is the label set a request's money is counted under; model is
// "" for a model the table does not know; kind is the account's meter.
type costKey struct {
	index int
	model string
	kind  string
}

// costSeries are the counters of one label set, resolved once: cost and
// saved for a priced model, unpriced for the others.
type costSeries struct {
	cost, saved, unpriced *promtext.Counter
}

// The kind label of an account's money: which meter its usage counts in.
const (
	MeterCost  = "cost"  // what the usage cost (API-key accounts)
	MeterValue = "value" // what it would have cost at API prices (ChatGPT accounts)
)

// NewCosts registers the cost counters on reg, pricing with table (nil:
// the shipped prices). meter says which meter an account of a kind counts
// in, MeterCost or MeterValue; the request path's adapters know, this
// package does not tell kinds apart.
func NewCosts(table *prices.Table, sel *rotation.Selector, reg *promtext.Registry, meter func(accounts.Kind) string) *Costs {
	if table == nil {
		table = prices.Shipped()
	}
	return &Costs{table: table, sel: sel, meter: meter,
		cost: reg.CounterVec("rotor_cost_usd_total",
			"USD at the price table's prices of the usage of priced models, by account, model and kind: cost (API-key accounts) or value (ChatGPT accounts, at API prices).",
			"account", "model", "kind"),
		saved: reg.CounterVec("rotor_cache_saved_usd_total",
			"USD cached input saved at the price table's prices, by account and model.",
			"account", "model"),
		unpriced: reg.CounterVec("rotor_unpriced_tokens_total",
			"Input and output tokens of models the price table does not know (in no USD total), by account and kind.",
			"account", "kind"),
	}
}

// Count prices the tokens t of a request for model, served by the account
// ch chose, or else by the account id at index (0: none, nothing to
// price).
func (c *Costs) Count(model string, t *usage.Tokens, ch *rotation.Choice, id string, index int) {
	if t == nil || index <= 0 {
		return
	}
	var kind string
	if ch != nil {
		kind = c.meter(ch.Account.Kind)
	} else if a := c.sel.Pool().At(index); a != nil && a.ID == id {
		kind = c.meter(a.Kind)
	}
	if kind == "" {
		return // an account since replaced at its index: its kind is unknown
	}
	name, p, ok := c.table.Lookup(model)
	se := c.series.get(costKey{index: index, model: name, kind: kind}, c.newSeries)
	if !ok {
		se.unpriced.Add(float64(max(t.Input, 0) + max(t.Output, 0)))
		return
	}
	se.cost.Add(float64(p.Cost(t.Input, t.Cached, t.Output)))
	se.saved.Add(float64(p.Saved(min(t.Cached, t.Input))))
}

// newSeries resolves the children of k's label set. It is always kept:
// every part of the key is bounded.
func (c *Costs) newSeries(k costKey, _ int) (*costSeries, bool) {
	account, kind := strconv.Itoa(k.index), k.kind
	if k.model == "" {
		return &costSeries{unpriced: c.unpriced.With(account, kind)}, true
	}
	return &costSeries{cost: c.cost.With(account, k.model, kind),
		saved: c.saved.With(account, k.model)}, true
}
