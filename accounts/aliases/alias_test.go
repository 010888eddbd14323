package aliases

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rotorproxy/rotor/accounts"
)

func TestTableAppliesAnAliasOnItsKindOnly(t *testing.T) {
	list, err := Set(nil, Alias{From: "o3", To: "gpt-5"})
	if err == nil {
		list, err = Set(list, Alias{From: "gpt-4o", To: "gpt-5-codex", Kind: accounts.KindChatGPT})
	}
	if err != nil {
		t.Fatal(err)
	}
	tab := NewTable(list)
	for _, tc := range []struct {
		model string
		kind  accounts.Kind
		to    string
		ok    bool
	}{
		{"o3", accounts.KindAPIKey, "gpt-5", true},
		{"o3", accounts.KindChatGPT, "gpt-5", true},
		{"gpt-4o", accounts.KindChatGPT, "gpt-5-codex", true},
		{"gpt-4o", accounts.KindAPIKey, "", false},
		{"gpt-5", accounts.KindAPIKey, "", false},
	} {
		if to, ok := tab.To(tc.model, tc.kind); to != tc.to || ok != tc.ok {
			t.Errorf("To(%q, %s) = %q, %v", tc.model, tc.kind, to, ok)
		}
	}
	if got := tab.Names(accounts.KindChatGPT); !slices.Equal(got, []string{"gpt-4o", "o3"}) {
		t.Errorf("chatgpt names %v", got)
	}
	if got := tab.Names(accounts.KindAPIKey); !slices.Equal(got, []string{"o3"}) {
		t.Errorf("api-key names %v", got)
	}
	var none *Table
	if _, ok := none.To("o3", accounts.KindAPIKey); ok || NewTable(nil) != nil {
		t.Error("no alias must be the nil table")
	}
}

func TestLoadRefusesWhatSetWouldRefuse(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		`{"version":1,"aliases":[{"from":"a","to":"b"},{"from":"a","to":"c"}]}`,
		`{"version":1,"aliases":[{"from":"a","to":"a"}]}`,
		`{"version":1,"aliases":[{"from":"a","to":"b","kind":"azure"}]}`,
		`{"version":2,"aliases":[]}`,
		`{"version":1,"aliases":[]} {}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, "aliases.json"), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Load(); err == nil {
			t.Errorf("loaded %s", bad)
		}
	}
}
