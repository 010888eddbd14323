// Package aliases keeps rotor's model aliases (docs/aliases.md): a request for
// model From goes out as To on accounts of Kind (every kind when Kind is
// empty). The list lives in ROTOR_HOME/aliases.json (Store); a running
// serve reads it into an immutable Table and follows the file's changes
// (Live).
package aliases

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rotorproxy/rotor/accounts/home"
	rerr "github.com/rotorproxy/rotor/errors"
)

// fileVersion is the version of aliases.json this rotor writes and reads.
const fileVersion = 1

// file is the content of aliases.json.
type file struct {
	Version int     `json:"version"`
	Aliases []Alias `json:"aliases"`
}

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
	load := func() (file, error) {
		list, err := s.Load()
		return file{Version: fileVersion, Aliases: list}, err
	}
	edit := func(f file) (file, error) {
		list, err := fn(f.Aliases)
		if list == nil {
			list = []Alias{} // written as [], never null
		}
		return file{Version: fileVersion, Aliases: list}, err
	}
	f, err := home.UpdateJSON(s.path, s.lock, s.LockTimeout, load, edit)
	return f.Aliases, err
}

// parse decodes aliases.json content and checks every alias in it, as
// accounts.Parse does the pool: a file with anything wrong in it is
// damaged as a whole, since a rewrite would silently drop the aliases
// rotor did not understand.
func parse(path string, data []byte) ([]Alias, error) {
	var f file
	if err := home.DecodeJSON(data, &f); err != nil {
		return nil, unreadable(path, err)
	}
	if f.Version != fileVersion {
		return nil, unreadable(path, fmt.Errorf("unsupported version %d", f.Version))
	}
	if len(f.Aliases) > MaxAliases {
		return nil, unreadable(path, fmt.Errorf("%d aliases, more than %d", len(f.Aliases), MaxAliases))
	}
	sortByFrom(f.Aliases)
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
