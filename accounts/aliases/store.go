// Package aliases keeps rotor's model aliases (SPEC §12): a request for
// model From goes out as To on accounts of Kind (every kind when Kind is
// empty). The list lives in ROTOR_HOME/aliases.json (Store); a running
// serve reads it into an immutable Table and follows the file's changes
// (Live).
package aliases

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/home"
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

// fileVersion is the version of aliases.json this rotor writes and reads.
const fileVersion = 1

// file is the content of aliases.json.
type file struct {
	Version int     `json:"version"`
	Aliases []Alias `json:"aliases"`
}

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

// Store is aliases.json in a rotor home. Every write is atomic and made
// under the home lock; a file that cannot be read is never overwritten.
type Store struct {
	path, lock string
	// LockTimeout bounds the wait for another rotor process's write.
	LockTimeout time.Duration
}

// Open returns the store in dir, creating dir (mode 0700) if needed.
func Open(dir string) (*Store, error) {
	if err := home.EnsureDir(dir); err != nil {
		return nil, fmt.Errorf("cannot prepare rotor home %s: %w", dir, err)
	}
	return &Store{path: filepath.Join(dir, home.AliasesFile), lock: filepath.Join(dir, home.AliasesLock),
		LockTimeout: 15 * time.Second}, nil
}

// Path is the path of aliases.json.
func (s *Store) Path() string { return s.path }

// Load reads the aliases, sorted by From. A missing file is no alias; a
// file that cannot be read or holds anything but valid aliases is a
// STORAGE_UNREADABLE error naming it.
func (s *Store) Load() ([]Alias, error) {
	data, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, unreadable(s.path, err)
	}
	return parse(s.path, data)
}

// Update runs fn on the current aliases under the home lock and writes
// its result atomically (mode 0600). If fn fails nothing is written; a
// damaged file is reported and left as it is.
func (s *Store) Update(fn func([]Alias) ([]Alias, error)) ([]Alias, error) {
	l, err := home.LockFile(s.lock, false, s.LockTimeout)
	if err != nil {
		return nil, err
	}
	defer l.Unlock()
	list, err := s.Load()
	if err != nil {
		return nil, err
	}
	if list, err = fn(list); err != nil {
		return nil, err
	}
	if list == nil {
		list = []Alias{} // written as [], never null
	}
	data, err := json.MarshalIndent(file{Version: fileVersion, Aliases: list}, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := home.WriteFile(s.path, append(data, '\n')); err != nil {
		return nil, fmt.Errorf("cannot write %s: %w", s.path, err)
	}
	return list, nil
}

// parse decodes aliases.json content and checks every alias in it, as
// accounts.Parse does the pool: a file with anything wrong in it is
// damaged as a whole, since a rewrite would silently drop what rotor did
// not understand.
func parse(path string, data []byte) ([]Alias, error) {
	var f file
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, unreadable(path, fmt.Errorf("invalid JSON: %w", err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, unreadable(path, errors.New("invalid JSON: unexpected data after the top-level object"))
	}
	if f.Version != fileVersion {
		return nil, unreadable(path, fmt.Errorf("unsupported version %d", f.Version))
	}
	if len(f.Aliases) > MaxAliases {
		return nil, unreadable(path, fmt.Errorf("%d aliases, more than %d", len(f.Aliases), MaxAliases))
	}
	slices.SortStableFunc(f.Aliases, func(a, b Alias) int { return strings.Compare(a.From, b.From) })
	for i, a := range f.Aliases {
		if err := Check(a); err != nil {
			return nil, unreadable(path, fmt.Errorf("alias of %q: %w", a.From, err))
		}
		if i > 0 && f.Aliases[i-1].From == a.From {
			return nil, unreadable(path, fmt.Errorf("two aliases of %q", a.From))
		}
	}
	return f.Aliases, nil
}

// unreadable is the STORAGE_UNREADABLE error of a damaged aliases.json.
// "rotor fix" keeps no backup of it to restore, so the hint says what
// will mend it instead.
func unreadable(path string, cause error) error {
	e := rerr.StorageUnreadable(path, cause)
	e.Hint = `It was left untouched: correct it, or remove it to start over without aliases ("rotor alias set" then writes a new one).`
	return e
}
