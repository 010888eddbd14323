package aliases

import (
	"sync/atomic"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/home"
)

// Table answers what a model is sent as, for a proxy's every attempt. It
// never changes once made, so any number of requests read it at once; a
// nil Table is a table without aliases.
type Table struct {
	byFrom map[string]Alias
	list   []Alias // sorted by From
}

// NewTable makes the table of list (as Store.Load returns it: checked,
// each From once, sorted). No alias makes the nil table.
func NewTable(list []Alias) *Table {
	if len(list) == 0 {
		return nil
	}
	t := &Table{byFrom: make(map[string]Alias, len(list)), list: list}
	for _, a := range list {
		t.byFrom[a.From] = a
	}
	return t
}

// To is the model a request for model goes out as on an account of kind
// k, and whether an alias renames it there.
func (t *Table) To(model string, k accounts.Kind) (string, bool) {
	if t == nil {
		return "", false
	}
	a, ok := t.byFrom[model]
	if !ok || a.Kind != "" && a.Kind != k {
		return "", false
	}
	return a.To, true
}

// Names are the aliases' From names that apply on accounts of kind k,
// sorted: what a model list of such an account shows beside the real
// names.
func (t *Table) Names(k accounts.Kind) []string {
	if t == nil {
		return nil
	}
	var out []string
	for _, a := range t.list {
		if a.Kind == "" || a.Kind == k {
			out = append(out, a.From)
		}
	}
	return out
}

// Live is the table in force for a running serve: Refresh swaps in a new
// one when aliases.json changes, and requests read it with one atomic
// load, nothing more while there is no alias.
type Live struct {
	st    *Store
	cur   atomic.Pointer[Table]
	stamp home.Stamp // the file as last read; only Refresh, on one goroutine, touches it
}

// Follow returns the table of st, read once already. A failed first read
// is returned with a Live without aliases: the next Refresh tries again.
func Follow(st *Store) (*Live, error) {
	l := &Live{st: st}
	return l, l.Refresh()
}

// Table is the table in force; nil (no alias) for a nil Live.
func (l *Live) Table() *Table {
	if l == nil {
		return nil
	}
	return l.cur.Load()
}

// Refresh reads aliases.json again when its stamp moved since the last
// good read, and swaps its table in. A file that cannot be read keeps the
// table in force, and is read again on the next call until it can be.
// Calls must not overlap: the watcher of a serve is its one caller.
func (l *Live) Refresh() error {
	st := home.StatStamp(l.st.Path())
	if st == l.stamp {
		return nil
	}
	list, err := l.st.Load()
	if err != nil {
		return err
	}
	l.cur.Store(NewTable(list))
	l.stamp = st
	return nil
}
