package prices

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/rotorproxy/rotor/accounts/home"
	rerr "github.com/rotorproxy/rotor/errors"
)

// fileVersion is the version of prices.json (and of shipped.json) this
// rotor reads.
const fileVersion = 1

// Limits keep prices.json a list a person keeps by hand, and its amounts
// ones that sum without overflowing.
const (
	MaxModels = 1024
	MaxName   = 128     // bytes of a model name
	MaxPrice  = 1000000 // USD per 1M tokens
)

// file is the content of prices.json: the day its prices were taken and
// the price of each model, in USD per 1M tokens. Every price is a
// pointer so that a missing one is told from a 0.
type file struct {
	Version int                  `json:"version"`
	Date    string               `json:"date"`
	Models  map[string]filePrice `json:"models"`
}

type filePrice struct {
	Input  *float64 `json:"input"`
	Cached *float64 `json:"cached_input"`
	Output *float64 `json:"output"`
}

//go:embed shipped.json
var shippedJSON []byte

// shipped is the table built into the binary, parsed once.
var shipped = sync.OnceValue(func() *Table {
	f, err := parse(shippedJSON)
	if err != nil {
		panic(err) // a build with a broken table must not ship: the tests parse it
	}
	return &Table{models: f.prices, about: About{Date: f.date}}
})

// Shipped is the table built into the binary: OpenAI's list prices of its
// date (About().Date).
func Shipped() *Table { return shipped() }

// Path is where prices.json lives in the rotor home dir.
func Path(dir string) string { return filepath.Join(dir, home.PricesFile) }

// Load is the table in force for the rotor home dir: the shipped prices,
// with those of dir's prices.json over them when there is one. A model the
// file names takes the file's price; the shipped models it does not name
// keep theirs. A missing file is the shipped table; a file that cannot be
// read or holds anything but valid prices is a STORAGE_UNREADABLE error
// naming it and what is wrong, and is left as it is: rotor never writes
// prices.json.
func Load(dir string) (*Table, error) {
	path := Path(dir)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Shipped(), nil
	}
	if err != nil {
		return nil, unreadable(path, err)
	}
	f, err := parse(data)
	if err != nil {
		return nil, unreadable(path, err)
	}
	base := Shipped()
	t := &Table{models: make(map[string]Price, len(base.models)+len(f.prices)),
		about: About{Date: base.about.Date, File: path, FileDate: f.date}}
	for m, p := range base.models {
		t.models[m] = p
	}
	for m, p := range f.prices {
		t.models[m] = p
		t.about.FileModels = append(t.about.FileModels, m)
	}
	slices.Sort(t.about.FileModels)
	return t, nil
}

// parsed is a checked prices file.
type parsed struct {
	date   string
	prices map[string]Price
}

// parse decodes the content of a prices file and checks all of it, or
// says what is wrong: a file with anything wrong in it is damaged as a
// whole, since pricing with part of it would show figures the user did
// not mean.
func parse(data []byte) (parsed, error) {
	var f file
	if err := home.DecodeJSON(data, &f); err != nil {
		return parsed{}, err
	}
	if f.Version != fileVersion {
		return parsed{}, fmt.Errorf("unsupported version %d (want %d)", f.Version, fileVersion)
	}
	if _, err := time.Parse(time.DateOnly, f.Date); err != nil {
		return parsed{}, fmt.Errorf("date %q is not a day as YYYY-MM-DD (the day the prices were taken)", f.Date)
	}
	if len(f.Models) > MaxModels {
		return parsed{}, fmt.Errorf("%d models, more than %d", len(f.Models), MaxModels)
	}
	out := parsed{date: f.Date, prices: make(map[string]Price, len(f.Models))}
	for name, fp := range f.Models {
		p, err := check(name, fp)
		if err != nil {
			return parsed{}, fmt.Errorf("model %q: %w", name, err)
		}
		out.prices[name] = p
	}
	return out, nil
}

// check is the price of one model of the file, or what is wrong with it:
// a name as aliases take them, all three prices there, none negative or
// above MaxPrice, and cached input no dearer than input.
func check(name string, fp filePrice) (Price, error) {
	switch {
	case name == "":
		return Price{}, errors.New("empty model name")
	case len(name) > MaxName:
		return Price{}, fmt.Errorf("name longer than %d bytes", MaxName)
	case strings.ContainsFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return Price{}, errors.New("space or control character in the name")
	}
	for _, v := range []struct {
		field string
		p     *float64
	}{{"input", fp.Input}, {"cached_input", fp.Cached}, {"output", fp.Output}} {
		switch {
		case v.p == nil:
			return Price{}, fmt.Errorf("no %q price (USD per 1M tokens)", v.field)
		case *v.p < 0 || math.IsNaN(*v.p):
			return Price{}, fmt.Errorf("%q price %v is negative", v.field, *v.p)
		case *v.p > MaxPrice:
			return Price{}, fmt.Errorf("%q price %v is above %d USD per 1M tokens", v.field, *v.p, MaxPrice)
		}
	}
	if *fp.Cached > *fp.Input {
		return Price{}, fmt.Errorf("cached input (%v) dearer than input (%v)", *fp.Cached, *fp.Input)
	}
	return Price{Input: USD(*fp.Input), Cached: USD(*fp.Cached), Output: USD(*fp.Output)}, nil
}

// unreadable is the STORAGE_UNREADABLE error of a damaged prices.json.
// rotor keeps no backup of it and never writes it, so the hint says what
// mends it.
func unreadable(path string, cause error) error {
	e := rerr.StorageUnreadable(path, cause)
	e.Hint = `It was left untouched: correct it, or remove it to price with the shipped table (of ` + Shipped().about.Date + `).`
	return e
}
