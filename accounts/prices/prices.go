// Package prices keeps what rotor knows of model prices (docs/cost.md): USD
// per 1M input, cached input and output tokens, per model, with the day
// they were taken. A table ships in the binary (shipped.json, OpenAI's
// list prices of its date); ROTOR_HOME/prices.json, which the user keeps
// by hand, replaces the prices of the models it names and adds the ones
// the shipped table lacks (Load). Every usage record is priced with a
// Table: what API-key accounts cost, what ChatGPT accounts' usage would
// have cost at API prices, what cached input saved. A model the table
// does not know is unpriced, never free.
package prices

import (
	"cmp"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/rotorproxy/rotor/accounts"
)

// USD is an amount of US dollars. JSON carries it to 12 significant
// digits, so sums of many small amounts read as the figures they are
// (0.0105, not 0.010499999999999999), and without an exponent.
type USD float64

// MarshalJSON writes u to 12 significant digits, in plain decimals.
func (u USD) MarshalJSON() ([]byte, error) {
	v := float64(u)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		v = 0 // no price makes one; JSON has no word for it
	}
	v, _ = strconv.ParseFloat(strconv.FormatFloat(v, 'g', 12, 64), 64)
	return strconv.AppendFloat(nil, v, 'f', -1, 64), nil
}

// perMillion is how many tokens a price is for.
const perMillion = 1e6

// Price is what one model costs, in USD per 1M tokens: input the prompt
// cache did not serve, cached input it did, and output (reasoning
// included).
type Price struct {
	Input  USD `json:"input"`
	Cached USD `json:"cached_input"`
	Output USD `json:"output"`
}

// Cost is what input tokens, cached of them served by the prompt cache,
// and output tokens cost at p, as rotor's usage records count them
// (usage.Tokens: Input includes Cached, Output includes reasoning):
// (input−cached)×Input + cached×Cached + output×Output, per 1M. A cached
// count above input (an upstream's slip) prices every input token as
// cached, never a negative amount.
func (p Price) Cost(input, cached, output int64) USD {
	cached = min(max(cached, 0), max(input, 0))
	fresh := max(input, 0) - cached
	return (USD(fresh)*p.Input + USD(cached)*p.Cached + USD(max(output, 0))*p.Output) / perMillion
}

// Saved is what the prompt cache saved on cached input tokens at p:
// cached×(Input−Cached), per 1M.
func (p Price) Saved(cached int64) USD {
	return USD(max(cached, 0)) * (p.Input - p.Cached) / perMillion
}

// Table is a price list: the shipped one, or the shipped one with
// prices.json over it. It never changes once made, so any number of
// requests read it at once; a nil Table is the shipped one.
type Table struct {
	models map[string]Price
	about  About
}

// About says where a table's prices come from.
type About struct {
	// Date is the day the shipped prices were taken (YYYY-MM-DD).
	Date string `json:"date"`
	// File is the prices.json read over them ("" when there is none),
	// FileDate the day its own prices were taken, and FileModels the
	// models it prices, sorted.
	File       string   `json:"file,omitempty"`
	FileDate   string   `json:"file_date,omitempty"`
	FileModels []string `json:"file_models,omitempty"`
}

// String is About in a line: where the prices come from, and of what day.
func (a About) String() string {
	s := "OpenAI list prices of " + a.Date + " (shipped)"
	if a.File != "" {
		s += "; " + strconv.Itoa(len(a.FileModels)) + " model(s) from " + a.File + " of " + a.FileDate
	}
	return s
}

// About says where t's prices come from.
func (t *Table) About() About {
	if t == nil {
		return Shipped().about
	}
	return t.about
}

// Models are the names t prices, sorted.
func (t *Table) Models() []string {
	if t == nil {
		t = Shipped()
	}
	names := make([]string, 0, len(t.models))
	for m := range t.models {
		names = append(names, m)
	}
	slices.Sort(names)
	return names
}

// undated is model without the snapshot date OpenAI appends to a model's
// name ("-2025-08-07"), and whether it had one. It runs on every request
// /metrics counts, so it looks at the bytes itself.
func undated(model string) (string, bool) {
	const suffix = "-dddd-dd-dd"
	n := len(model) - len(suffix)
	if n <= 0 {
		return "", false
	}
	for i, c := range []byte(suffix) {
		b := model[n+i]
		if c == 'd' && (b < '0' || b > '9') || c == '-' && b != '-' {
			return "", false
		}
	}
	return model[:n], true
}

// Lookup is the price of model, and the name t prices it under: the
// model itself, or else, for a dated snapshot (gpt-5-2025-08-07), its base
// model (gpt-5). ok is false for a model t does not know: it is unpriced.
func (t *Table) Lookup(model string) (name string, p Price, ok bool) {
	if t == nil {
		t = Shipped()
	}
	if p, ok := t.models[model]; ok {
		return model, p, true
	}
	if base, ok := undated(model); ok {
		if p, ok := t.models[base]; ok {
			return base, p, true
		}
	}
	return "", Price{}, false
}

// Sum is what a set of usage records adds up to in dollars at a table's
// prices, split by what the money means for the account kind that served
// them.
type Sum struct {
	// Cost is what API-key accounts' usage cost.
	Cost USD `json:"cost_usd"`
	// Value is what ChatGPT accounts' usage would have cost at API prices.
	Value USD `json:"value_usd"`
	// Unknown is the usage of accounts of unknown kind (no longer in the
	// pool, or the pool could not be read) at API prices: neither cost nor
	// value for certain.
	Unknown USD `json:"unknown_kind_usd"`
	// Saved is what cached input saved at the table's prices, on every
	// kind: the cached tokens at the input price, less what they cost.
	Saved USD `json:"saved_usd"`
	// Unpriced are the tokens (input and output) of models the table does
	// not know, by model as the record names it: priced at nothing,
	// counted in no amount above.
	Unpriced map[string]int64 `json:"unpriced_tokens"`
	// priced and unpriced are the amounts (by account kind) that priced
	// and unpriced usage went to. An amount that only unpriced usage went
	// to is not known, never 0: a script that sums it must not read a
	// model without a price as free (docs/cost.md).
	priced, unpriced amount
}

// amount is a set of Sum's amounts, named by the account kind each is
// for.
type amount uint8

const (
	costAmount amount = 1 << iota
	valueAmount
	unknownAmount
)

// amountOf is the amount usage on an account of kind k goes to.
func amountOf(k accounts.Kind) amount {
	switch k {
	case accounts.KindAPIKey:
		return costAmount
	case accounts.KindChatGPT:
		return valueAmount
	}
	return unknownAmount
}

// Priced says whether s's amount for accounts of kind k (Cost for an API
// key, Value for a ChatGPT account, Unknown for "") is a figure: false
// when usage went to it and none of that usage was priced, so it is
// unpriced, not $0. With some usage priced it is the priced part, the
// rest counted in Unpriced.
func (s *Sum) Priced(k accounts.Kind) bool {
	a := amountOf(k)
	return s.priced&a != 0 || s.unpriced&a == 0
}

// SavedPriced says whether Saved is a figure: false when s holds usage
// and none of it was priced.
func (s *Sum) SavedPriced() bool {
	return s.priced != 0 || s.unpriced == 0
}

// Add adds to s the usage of model on an account of kind k ("" when it
// is unknown): input tokens, cached of them, and
// output tokens, priced at t.
func (t *Table) Add(s *Sum, k accounts.Kind, model string, input, cached, output int64) {
	_, p, ok := t.Lookup(model)
	if !ok {
		if n := max(input, 0) + max(output, 0); n > 0 {
			if s.Unpriced == nil {
				s.Unpriced = map[string]int64{}
			}
			s.Unpriced[model] += n
			s.unpriced |= amountOf(k)
		}
		return
	}
	s.priced |= amountOf(k)
	cost := p.Cost(input, cached, output)
	switch k {
	case accounts.KindAPIKey:
		s.Cost += cost
	case accounts.KindChatGPT:
		s.Value += cost
	default:
		s.Unknown += cost
	}
	s.Saved += p.Saved(min(cached, input)) // as Cost counts them
}

// Merge adds o to s.
func (s *Sum) Merge(o *Sum) {
	s.Cost += o.Cost
	s.Value += o.Value
	s.Unknown += o.Unknown
	s.Saved += o.Saved
	s.priced |= o.priced
	s.unpriced |= o.unpriced
	for m, n := range o.Unpriced {
		if s.Unpriced == nil {
			s.Unpriced = map[string]int64{}
		}
		s.Unpriced[m] += n
	}
}

// UnpricedTokens is how many tokens s left unpriced, all models together.
func (s *Sum) UnpricedTokens() int64 {
	var n int64
	for _, v := range s.Unpriced {
		n += v
	}
	return n
}

// UnpricedModels are the models s left unpriced, most tokens first.
func (s *Sum) UnpricedModels() []string {
	names := make([]string, 0, len(s.Unpriced))
	for m := range s.Unpriced {
		names = append(names, m)
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(s.Unpriced[b], s.Unpriced[a]), strings.Compare(a, b))
	})
	return names
}

// As turns s, all of whose usage was added as of unknown kind, into the
// same usage spent by an account of kind k: its Unknown amount becomes
// Cost for an API key, Value for a ChatGPT account, and stays for "".
func (s *Sum) As(k accounts.Kind) {
	to := amountOf(k)
	if to == unknownAmount {
		return
	}
	moved := func(set amount) amount {
		if set&unknownAmount == 0 {
			return set
		}
		return set&^unknownAmount | to
	}
	s.priced, s.unpriced = moved(s.priced), moved(s.unpriced)
	if k == accounts.KindAPIKey {
		s.Cost += s.Unknown
	} else {
		s.Value += s.Unknown
	}
	s.Unknown = 0
}

// MarshalJSON writes s with an amount that is no figure (Priced,
// SavedPriced) as null, never 0, and its unpriced tokens as {} when
// there are none, never null.
func (s Sum) MarshalJSON() ([]byte, error) {
	figure := func(v USD, ok bool) *USD {
		if !ok {
			return nil
		}
		return &v
	}
	unpriced := s.Unpriced
	if unpriced == nil {
		unpriced = map[string]int64{}
	}
	return json.Marshal(struct {
		Cost     *USD             `json:"cost_usd"`
		Value    *USD             `json:"value_usd"`
		Unknown  *USD             `json:"unknown_kind_usd"`
		Saved    *USD             `json:"saved_usd"`
		Unpriced map[string]int64 `json:"unpriced_tokens"`
	}{figure(s.Cost, s.Priced(accounts.KindAPIKey)), figure(s.Value, s.Priced(accounts.KindChatGPT)),
		figure(s.Unknown, s.Priced("")), figure(s.Saved, s.SavedPriced()), unpriced})
}
