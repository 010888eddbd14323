package rotation

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/home"
)

// deadlines are the state fields that end by themselves, with the fields
// that only mean something while they last.
var deadlines = []struct {
	field, words string
	with         []string
}{
	{"rate_limited_until", "rate limit", nil},
	{"cooldown_until", "cooldown", []string{"cooldown_reason"}},
	{"circuit_open_until", "open circuit", nil},
}

// Prune takes out of state.json the accounts keep rejects and the
// deadlines that passed before now (a rate limit, a cooldown with its
// reason, an open circuit), for `rotor fix`. It edits the file under the
// state lock field by field, so fields it does not know (from a newer
// rotor) survive, and forgets the same in this runtime so its next Sync
// cannot bring them back. It returns the ids it dropped and, for each kept
// account it changed, what it cleared in words ("rate limit (ended 3m
// ago)"). With dry it only says so. damaged reports a state.json that does
// not parse (see Reset); it is then left as it is.
func (r *Runtime) Prune(now time.Time, keep func(id string) bool, dry bool) (dropped []string, cleared map[string][]string, damaged bool, err error) {
	if !dry {
		l, err := home.LockFile(r.lock, false, 5*time.Second)
		if err != nil {
			return nil, nil, false, err
		}
		defer l.Unlock()
	}
	data, err := os.ReadFile(r.path)
	if os.IsNotExist(err) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	var doc map[string]json.RawMessage
	var accts map[string]map[string]json.RawMessage
	if json.Unmarshal(data, &doc) != nil || json.Unmarshal(doc["accounts"], &accts) != nil {
		return nil, nil, true, nil
	}
	cleared = map[string][]string{}
	for id, fields := range accts {
		if !keep(id) {
			delete(accts, id)
			dropped = append(dropped, id)
			continue
		}
		for _, d := range deadlines {
			var t time.Time
			raw, ok := fields[d.field]
			if !ok || json.Unmarshal(raw, &t) != nil || t.After(now) {
				continue
			}
			delete(fields, d.field)
			for _, w := range d.with {
				delete(fields, w)
			}
			cleared[id] = append(cleared[id], fmt.Sprintf("%s (ended %s ago)", d.words, accounts.HumanDuration(now.Sub(t))))
		}
	}
	if dry || len(dropped)+len(cleared) == 0 {
		return dropped, cleared, false, nil
	}
	raw, err := json.Marshal(accts)
	if err != nil {
		return nil, nil, false, err
	}
	doc["accounts"] = raw
	out, err := json.MarshalIndent(doc, "", "  ")
	if err == nil {
		err = home.WriteFile(r.path, append(out, '\n'))
	}
	if err != nil {
		return nil, nil, false, err
	}
	r.mu.Lock()
	for _, id := range dropped {
		delete(r.m, id)
	}
	for id := range cleared {
		if e := r.m[id]; e != nil {
			st := &e.st
			if !st.RateLimitedUntil.After(now) {
				st.RateLimitedUntil = time.Time{}
			}
			if !st.CooldownUntil.After(now) {
				st.CooldownUntil, st.CooldownReason = time.Time{}, ""
			}
			if !st.CircuitOpenUntil.After(now) {
				st.CircuitOpenUntil = time.Time{}
			}
			e.derive(now)
		}
	}
	r.stamp = home.StatStamp(r.path)
	r.mu.Unlock()
	return dropped, cleared, false, nil
}

// Reset replaces a state.json that does not parse with an empty one, under
// the state lock, keeping the damaged bytes aside; it returns the name
// they are kept under. Nothing is lost that matters: the state is what
// upstreams said, and the proxies learn it again.
func (r *Runtime) Reset(now time.Time) (keptAs string, err error) {
	l, err := home.LockFile(r.lock, false, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer l.Unlock()
	kept, err := home.KeepAside(r.path, r.path+".corrupt-"+now.UTC().Format("20060102T150405Z"))
	if err != nil {
		return "", err
	}
	if err := home.WriteFile(r.path, []byte("{\n  \"version\": 1,\n  \"accounts\": {}\n}\n")); err != nil {
		return "", err
	}
	return filepath.Base(kept), nil
}
