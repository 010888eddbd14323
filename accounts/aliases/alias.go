package aliases

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/rotorproxy/rotor/accounts"
	rerr "github.com/rotorproxy/rotor/errors"
)

// Alias renames one model: a request for From is sent as To to accounts
// of Kind, or of every kind when Kind is "".
type Alias struct {
	From string        `json:"from"`
	To   string        `json:"to"`
	Kind accounts.Kind `json:"kind,omitempty"`
}

// Limits keep aliases.json a list a person keeps by hand, and the model
// list that /v1/models grows by it short.
const (
	MaxAliases = 256
	MaxName    = 128 // bytes of a model name
)

// Check reports what is wrong with a, as a VALIDATION error naming the
// field, or nil: both names present, short and free of spaces and control
// characters, not the same, and a known kind.
func Check(a Alias) error {
	for _, n := range []struct{ field, name string }{{"from", a.From}, {"to", a.To}} {
		switch {
		case n.name == "":
			return rerr.Validation(n.field, "The model name "+strings.ToUpper(n.field)+" is empty.")
		case len(n.name) > MaxName:
			return rerr.Validation(n.field, fmt.Sprintf("The model name %.20q… is longer than %d bytes.", n.name, MaxName))
		case strings.ContainsFunc(n.name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
			return rerr.Validation(n.field, fmt.Sprintf("The model name %q has a space or control character in it.", n.name))
		}
	}
	if a.From == a.To {
		return rerr.Validation("to", fmt.Sprintf("An alias of %q to itself changes nothing.", a.From))
	}
	if a.Kind != "" && a.Kind != accounts.KindChatGPT && a.Kind != accounts.KindAPIKey {
		return rerr.Validation("kind", fmt.Sprintf("Unknown account kind %q (chatgpt or api-key).", a.Kind))
	}
	return nil
}

// Set returns list with a in it, replacing the alias of the same From:
// each model has at most one alias. The list stays sorted by From.
func Set(list []Alias, a Alias) ([]Alias, error) {
	if err := Check(a); err != nil {
		return nil, err
	}
	i, found := slices.BinarySearchFunc(list, a.From, byFrom)
	if found {
		list[i] = a
		return list, nil
	}
	if len(list) >= MaxAliases {
		return nil, rerr.Validation("from", fmt.Sprintf("There are %d aliases already, the most rotor keeps; remove one first (rotor alias rm FROM).", len(list)))
	}
	return slices.Insert(list, i, a), nil
}

// Remove returns list without the alias of from, and whether it had one.
func Remove(list []Alias, from string) ([]Alias, bool) {
	i, found := slices.BinarySearchFunc(list, from, byFrom)
	if !found {
		return list, false
	}
	return slices.Delete(list, i, i+1), true
}

func byFrom(a Alias, from string) int { return strings.Compare(a.From, from) }

// sortByFrom sorts list by From, keeping the order of equal ones (which
// parse then refuses as a repeat).
func sortByFrom(list []Alias) {
	slices.SortStableFunc(list, func(a, b Alias) int { return strings.Compare(a.From, b.From) })
}
