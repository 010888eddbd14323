package accounts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts/home"
	rerr "github.com/rotorproxy/rotor/errors"
)

func openStore(t *testing.T) *Store {
	t.Helper()
	st, err := Open(filepath.Join(t.TempDir(), "home"))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// snapshot maps every file name in dir to its content; lock files, whose
// content is empty and whose presence says nothing, are left out.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]string)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".lock") {
			continue
		}
		if e.IsDir() {
			m[e.Name()] = "<dir>"
			continue
		}
		m[e.Name()] = string(readFile(t, filepath.Join(dir, e.Name())))
	}
	return m
}

func TestOpenMakesHome0700(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	dir := filepath.Join(parent, "a", "rotor")
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o700 {
		t.Errorf("new home mode = %v, want 0700", got)
	}

	// An existing home that others can read is tightened.
	loose := filepath.Join(parent, "loose")
	if err := os.Mkdir(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(loose); err != nil {
		t.Fatal(err)
	}
	fi, err = os.Stat(loose)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o700 {
		t.Errorf("existing home mode after Open = %v, want 0700", got)
	}
}

func TestLoadMissingIsEmptyPool(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	p, err := st.Load()
	if err != nil {
		t.Fatal(err)
	}
	if p.Version != 1 || p.Accounts == nil || len(p.Accounts) != 0 || p.PinnedAccountID != nil {
		t.Errorf("Load of a missing store = %+v, want an empty version-1 pool", p)
	}
	if _, err := os.Stat(st.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load created %s (stat error %v)", st.Path(), err)
	}
}

func TestUpdateWritesPrivateFiles(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	for i := range 5 {
		if _, err := st.Update(func(p *Pool) error {
			p.AddAPIKey(fmt.Sprint("k", i), "", time.Now())
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{".lock", "accounts.json", "accounts.json.bak", "accounts.json.bak.1", "accounts.json.bak.2"}
	ents, err := os.ReadDir(st.Dir())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want a regular file with 0600", e.Name(), fi.Mode())
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("files in home = %q, want %q (no temp file left, 3 backups)", got, want)
	}
}

func TestUpdateKeepsThreeBackupsNewestFirst(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	var versions [][]byte // versions[i] is accounts.json after update i
	for i := range 6 {
		if _, err := st.Update(func(p *Pool) error {
			p.AddAPIKey(fmt.Sprint("v", i), "", time.Now())
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, readFile(t, st.Path()))

		// After update i, .bak holds version i (the current good state),
		// .bak.1 version i-1, .bak.2 version i-2 (docs/files.md).
		for b := range Backups {
			name := home.BackupName(st.Path(), b)
			got, err := os.ReadFile(name)
			if prev := i - b; prev < 0 {
				if !errors.Is(err, os.ErrNotExist) {
					t.Errorf("after update %d: %s exists (err %v), want none yet", i, filepath.Base(name), err)
				}
				continue
			} else if err != nil {
				t.Fatalf("after update %d: %v", i, err)
			} else if !bytes.Equal(got, versions[prev]) {
				t.Errorf("after update %d: %s is not version %d", i, filepath.Base(name), prev)
			}
		}
	}
	if _, err := os.Stat(home.BackupName(st.Path(), Backups)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a fourth backup exists (stat error %v)", err)
	}
}

func TestUpdateErrorWritesNothing(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	for range 2 {
		if _, err := st.Update(func(p *Pool) error { p.AddAPIKey("", "", time.Now()); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshot(t, st.Dir())
	boom := errors.New("boom")
	_, err := st.Update(func(p *Pool) error {
		p.AddAPIKey("never", "", time.Now())
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update error = %v, want the callback's error", err)
	}
	if after := snapshot(t, st.Dir()); !maps.Equal(before, after) {
		t.Errorf("a failed Update changed the home:\nbefore %q\nafter  %q", before, after)
	}
}

// TestUnreadableStoreNeverOverwritten proves that a store that cannot be read
// or parsed makes Load and Update fail with STORAGE_UNREADABLE, naming the
// file and "rotor fix", and that neither the file nor its backups change.
func TestUnreadableStoreNeverOverwritten(t *testing.T) {
	t.Parallel()
	const valid = `{"version":1,"accounts":[{"id":"acct_1","label":"a","kind":"api-key","enabled":true}],"pinned_account_id":null,"affinity_generation":0}`
	cases := []struct {
		name    string
		content string // written as accounts.json; "" with dir set makes it a directory
		dir     bool
		perm000 bool
	}{
		{name: "truncated", content: valid[:40]},
		{name: "garbage", content: "\x00\x01not json at all"},
		{name: "empty", content: ""},
		{name: "trailing data", content: valid + "\n" + `{"version":1,"accounts":[]}`},
		{name: "trailing brace", content: valid + "}"},
		{name: "wrong version", content: strings.Replace(valid, `"version":1`, `"version":2`, 1)},
		{name: "not an object", content: `[1,2,3]`},
		{name: "duplicate ids", content: strings.Replace(valid, `}]`, `},{"id":"acct_1","kind":"api-key"}]`, 1)},
		{name: "missing id", content: `{"version":1,"accounts":[{"label":"x","kind":"api-key"}]}`},
		{name: "unknown kind", content: `{"version":1,"accounts":[{"id":"a","kind":"oauth"}]}`},
		{name: "directory", dir: true},
		{name: "no read permission", content: valid, perm000: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.perm000 && os.Geteuid() == 0 {
				t.Skip("root reads files whatever their mode")
			}
			st := openStore(t)
			// Two good writes, so backups exist and would visibly rotate.
			for range 2 {
				if _, err := st.Update(func(p *Pool) error { p.AddAPIKey("", "", time.Now()); return nil }); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Remove(st.Path()); err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.dir:
				if err := os.Mkdir(st.Path(), 0o700); err != nil {
					t.Fatal(err)
				}
			default:
				if err := os.WriteFile(st.Path(), []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tc.perm000 {
				if err := os.Chmod(st.Path(), 0); err != nil {
					t.Fatal(err)
				}
				defer os.Chmod(st.Path(), 0o600)
			}
			var before map[string]string
			if !tc.perm000 {
				before = snapshot(t, st.Dir())
			}

			_, loadErr := st.Load()
			called := false
			_, updErr := st.Update(func(p *Pool) error {
				called = true
				p.AddAPIKey("clobber", "", time.Now())
				return nil
			})
			for _, c := range []struct {
				op  string
				err error
			}{{"Load", loadErr}, {"Update", updErr}} {
				var e *rerr.Error
				if !errors.As(c.err, &e) || e.Code != rerr.CodeStorageUnreadable {
					t.Fatalf("%s error = %v, want a %s error", c.op, c.err, rerr.CodeStorageUnreadable)
				}
				if e.Path != st.Path() || !strings.Contains(e.Error(), st.Path()) {
					t.Errorf("%s error %q (path %q) does not name %s", c.op, e.Error(), e.Path, st.Path())
				}
				if !strings.Contains(e.Error(), "rotor fix") {
					t.Errorf("%s error %q does not mention \"rotor fix\"", c.op, e.Error())
				}
			}
			if called {
				t.Error("Update ran its callback on an unreadable store")
			}
			if tc.perm000 {
				os.Chmod(st.Path(), 0o600)
				if got := string(readFile(t, st.Path())); got != tc.content {
					t.Errorf("accounts.json changed to %q", got)
				}
				return
			}
			if after := snapshot(t, st.Dir()); !maps.Equal(before, after) {
				t.Errorf("the home changed:\nbefore %q\nafter  %q", before, after)
			}
		})
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	good := `{
  "version": 1,
  "accounts": [
    {"id": "acct_a", "label": "a", "kind": "chatgpt", "email": "a@example.com", "chatgpt_account_id": "cg", "plan_type": "plus", "enabled": true, "added_at": "2026-01-02T03:04:05Z", "flagged_reason": "token-invalid"},
    {"id": "acct_b", "label": "b", "kind": "api-key", "base_url": "http://127.0.0.1:9/v1", "enabled": false, "added_at": "2026-01-02T03:04:05Z", "flagged_reason": null}
  ],
  "pinned_account_id": "acct_b",
  "affinity_generation": 7
}
`
	p, err := Parse("accounts.json", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Accounts) != 2 || p.AffinityGeneration != 7 || p.Pinned() != 2 {
		t.Fatalf("Parse = %+v", p)
	}
	a := p.At(1)
	if r, ok := a.Flagged(); !ok || r != FlagTokenInvalid || a.Kind != KindChatGPT || a.PlanType != "plus" || !a.Enabled {
		t.Errorf("account 1 = %+v", a)
	}
	if b := p.At(2); b.BaseURL != "http://127.0.0.1:9/v1" || b.Enabled {
		t.Errorf("account 2 = %+v", b)
	}

	// A round trip through the writer's encoding gives the same pool.
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	q, err := Parse("accounts.json", data)
	if err != nil {
		t.Fatal(err)
	}
	if q.Pinned() != 2 || q.At(1).AddedAt != a.AddedAt || *q.PinnedAccountID != "acct_b" {
		t.Errorf("round trip = %+v", q)
	}

	// No account list is an empty one, never nil (it is encoded as []).
	p, err = Parse("x", []byte(`{"version":1}`))
	if err != nil || p.Accounts == nil {
		t.Errorf(`Parse({"version":1}) = %+v, %v; want an empty account list`, p, err)
	}
}

func TestPoolPinFollowsAccount(t *testing.T) {
	t.Parallel()
	p := &Pool{Version: 1}
	now := time.Now()
	for _, l := range []string{"a", "b", "c"} {
		p.AddAPIKey(l, "", now)
	}
	b := p.At(2).ID
	p.PinnedAccountID = &b
	gen := p.AffinityGeneration

	p.Remove(1)
	if p.Pinned() != 1 || *p.PinnedAccountID != b || p.AffinityGeneration != gen {
		t.Errorf("after removing another account: pinned index %d, id %v, generation %d; want 1, %s, %d",
			p.Pinned(), *p.PinnedAccountID, p.AffinityGeneration, b, gen)
	}
	p.Remove(1) // the pinned one
	if p.PinnedAccountID != nil || p.Pinned() != 0 || p.AffinityGeneration != gen+1 {
		t.Errorf("after removing the pinned account: pin %v, generation %d; want none, %d",
			p.PinnedAccountID, p.AffinityGeneration, gen+1)
	}
	if len(p.Accounts) != 1 || p.At(1).Label != "c" {
		t.Errorf("accounts = %+v, want only c", p.Accounts)
	}
}

func TestParseIndex(t *testing.T) {
	t.Parallel()
	p := &Pool{Version: 1}
	p.AddAPIKey("a", "", time.Now())
	p.AddAPIKey("b", "", time.Now())
	for _, tc := range []struct {
		arg  string
		want int
	}{{"1", 1}, {"2", 2}, {" 2 ", 2}} {
		if got, err := p.ParseIndex(tc.arg); err != nil || got != tc.want {
			t.Errorf("ParseIndex(%q) = %d, %v; want %d", tc.arg, got, err, tc.want)
		}
	}
	for _, arg := range []string{"0", "3", "99", "-1", "abc", "1.5", "", "1e3"} {
		_, err := p.ParseIndex(arg)
		if err == nil || err.Error() != "Invalid index: "+arg || rerr.CodeOf(err) != rerr.CodeValidation {
			t.Errorf("ParseIndex(%q) error = %v, want VALIDATION %q", arg, err, "Invalid index: "+arg)
		}
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	p := &Pool{Version: 1}
	now := time.Now()
	p.AddAPIKey("work", "", now)
	p.UpsertChatGPT(Identity{Email: "ada@example.com", ChatGPTAccountID: "cg1"}, "home", now)
	p.AddAPIKey("twin", "", now)
	p.AddAPIKey("Twin", "", now)
	for _, tc := range []struct {
		sel  string
		want int
	}{
		{"1", 1}, {"2", 2}, {p.At(3).ID, 3}, {"WORK", 1}, {"home", 2}, {"ADA@example.com", 2},
	} {
		if got, err := p.Resolve(tc.sel); err != nil || got != tc.want {
			t.Errorf("Resolve(%q) = %d, %v; want %d", tc.sel, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ sel, code string }{
		{"0", rerr.CodeValidation}, {"5", rerr.CodeValidation},
		{"twin", rerr.CodeValidation}, {"nobody", rerr.CodeNotFound},
	} {
		if _, err := p.Resolve(tc.sel); rerr.CodeOf(err) != tc.code {
			t.Errorf("Resolve(%q) error = %v, want code %s", tc.sel, err, tc.code)
		}
	}
}

func TestHomeDir(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	abs := t.TempDir()
	if got, _ := HomeDir(env(map[string]string{"ROTOR_HOME": abs, "XDG_CONFIG_HOME": "/x"})); got != abs {
		t.Errorf("with ROTOR_HOME: %q, want %q", got, abs)
	}
	if got, _ := HomeDir(env(map[string]string{"XDG_CONFIG_HOME": "/x"})); got != "/x/rotor" {
		t.Errorf("with XDG_CONFIG_HOME: %q, want /x/rotor", got)
	}
	if got, _ := HomeDir(env(map[string]string{"HOME": "/home/u"})); got != "/home/u/.config/rotor" {
		t.Errorf("default: %q, want /home/u/.config/rotor", got)
	}
	if _, err := HomeDir(env(nil)); err == nil {
		t.Error("no HOME, no ROTOR_HOME: want an error that says to set ROTOR_HOME")
	}
}

// TestUpdateHoldsLock proves Update takes the cross-process lock on
// ROTOR_HOME/.lock: while another holder has it, Update waits, gives up after
// LockTimeout and writes nothing.
func TestUpdateHoldsLock(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	if _, err := st.Update(func(p *Pool) error { p.AddAPIKey("a", "", time.Now()); return nil }); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, st.Dir())
	l, err := home.LockFile(filepath.Join(st.Dir(), ".lock"), false, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st.LockTimeout = 150 * time.Millisecond
	start := time.Now()
	_, err = st.Update(func(p *Pool) error { p.AddAPIKey("b", "", time.Now()); return nil })
	if err == nil {
		t.Fatal("Update succeeded while another holder had the lock")
	}
	if d := time.Since(start); d < st.LockTimeout {
		t.Errorf("Update gave up after %v, before its %v timeout", d, st.LockTimeout)
	}
	if after := snapshot(t, st.Dir()); !maps.Equal(before, after) {
		t.Errorf("Update wrote without the lock:\nbefore %q\nafter  %q", before, after)
	}
	l.Unlock()
	if _, err := st.Update(func(p *Pool) error { p.AddAPIKey("b", "", time.Now()); return nil }); err != nil {
		t.Fatalf("Update after the lock was released: %v", err)
	}
}

func TestFlag(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	p, err := st.Update(func(p *Pool) error { p.AddAPIKey("a", "", time.Now()); return nil })
	if err != nil {
		t.Fatal(err)
	}
	id := p.At(1).ID
	if _, err := st.Flag(id, FlagDeactivated, true); err != nil {
		t.Fatal(err)
	}
	p, err = st.Load()
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := p.At(1).Flagged(); !ok || r != FlagDeactivated || p.At(1).Enabled {
		t.Errorf("after Flag: %+v", p.At(1))
	}
	if _, err := st.Flag("acct_missing", FlagTokenInvalid, false); rerr.CodeOf(err) != rerr.CodeNotFound {
		t.Errorf("Flag of a missing id: %v, want NOT_FOUND", err)
	}
}
