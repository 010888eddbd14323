package main

import (
	"bytes"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// docs/aliases.md: rotor alias set|list|rm keep ROTOR_HOME/aliases.json.
func TestAliasSetListRemove(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	if r := h.ok("", "alias", "list"); !strings.Contains(r.stdout, "No aliases") {
		t.Errorf("empty list: %q", r.stdout)
	}
	h.ok("", "alias", "set", "gpt-4o", "gpt-5", "--kind", "chatgpt")
	h.ok("", "alias", "set", "o3", "gpt-5-mini")
	// Setting a FROM again replaces its alias.
	if r := h.ok("", "alias", "set", "o3", "gpt-5"); !strings.Contains(r.stdout, "o3 goes out as gpt-5 on every account") {
		t.Errorf("set says %q", r.stdout)
	}
	r := h.ok("", "alias", "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "gpt-4o") || !strings.Contains(lines[1], "chatgpt accounts") ||
		!strings.HasPrefix(lines[2], "o3") || !strings.Contains(lines[2], "gpt-5  ") {
		t.Errorf("list:\n%s", r.stdout)
	}
	got := jsonObject(t, h.ok("", "alias", "list", "--json").stdout)
	list, _ := got["aliases"].([]any)
	if got["command"] != "alias list" || len(list) != 2 {
		t.Fatalf("--json: %v", got)
	}
	first := hasKeys(t, "alias 1", list[0], "from", "to", "kind")
	second := hasKeys(t, "alias 2", list[1], "from", "to", "kind")
	if first["from"] != "gpt-4o" || first["to"] != "gpt-5" || first["kind"] != "chatgpt" || second["kind"] != nil || second["to"] != "gpt-5" {
		t.Errorf("--json aliases: %v", list)
	}
	if fi, err := os.Stat(h.path("aliases.json")); err != nil || runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("aliases.json: %v %v", fi, err)
	}
	h.ok("", "alias", "rm", "gpt-4o")
	if r := h.ok("", "alias", "list", "--json"); strings.Contains(r.stdout, "gpt-4o") {
		t.Errorf("after rm: %s", r.stdout)
	}
}

func TestAliasRefusesWhatItCannotKeep(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"alias", "set", "gpt-5", "gpt-5"}, "to itself"},
		{[]string{"alias", "set", "", "gpt-5"}, "FROM is empty"},
		{[]string{"alias", "set", "a b", "gpt-5"}, "space"},
		{[]string{"alias", "set", strings.Repeat("m", 200), "gpt-5"}, "longer than"},
		{[]string{"alias", "set", "x", "y", "--kind", "azure"}, "Unknown account kind"},
		{[]string{"alias", "rm", "nothing"}, `No alias of "nothing"`},
		{[]string{"alias", "rm", "x", "--kind", "chatgpt"}, "--kind is for"},
		{[]string{"alias", "set", "x"}, "Usage: rotor alias"},
		{[]string{"alias", "move", "x"}, "Usage: rotor alias"},
	} {
		r := h.run("", tc.args...)
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: want exit 1 and %q on stderr, got %v", tc.args, tc.want, r)
		}
	}
	if _, err := os.Stat(h.path("aliases.json")); err == nil {
		t.Error("a refused alias wrote aliases.json")
	}
}

// A damaged aliases.json is never overwritten: every verb fails, names
// the file, and leaves its bytes as they were.
func TestAliasDamagedFileIsRefusedAndKept(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.ok("", "alias", "set", "o3", "gpt-5")
	damaged := []byte(`{"version":1,"aliases":[{"from":"o3","to":"gpt-5"}` + "\n")
	if err := os.WriteFile(h.path("aliases.json"), damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"alias", "set", "x", "y"}, {"alias", "rm", "o3"}, {"alias", "list"}} {
		r := h.run("", args...)
		if r.code != 1 || !strings.Contains(r.stderr, h.path("aliases.json")) || !strings.Contains(r.stderr, "STORAGE_UNREADABLE") {
			t.Errorf("%q: %v", args, r)
		}
	}
	if now, _ := os.ReadFile(h.path("aliases.json")); !bytes.Equal(now, damaged) {
		t.Errorf("the damaged file changed:\n%s", now)
	}
}

// A running `rotor serve` sends an alias set after it started within 1 s.
func TestAliasReachesARunningServeWithinASecond(t *testing.T) {
	t.Parallel()
	h, up := newServedHome(t)
	h.setenv("ROTOR_CLIENT_KEY", raceClientKey)
	p := raceServe(t, rotorBin, h.env, "P")
	h.ok("", "alias", "set", "gpt-5", "gpt-5-mini", "--kind", "api-key")
	set := time.Now()
	time.Sleep(time.Until(set.Add(time.Second)))
	if code, body, err := raceRequest(p); err != nil || code != 200 {
		t.Fatalf("request: %d %v %.200s", code, err, body)
	}
	var sent []string
	for _, r := range up.Requests() {
		if r.Method == "POST" {
			sent = append(sent, gjson.GetBytes(r.Body, "model").Str)
		}
	}
	if len(sent) != 1 || sent[0] != "gpt-5-mini" {
		t.Errorf("the upstream was asked for %q, want gpt-5-mini", sent)
	}
}
