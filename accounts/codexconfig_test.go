package accounts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const userConfig = `# my Codex settings
model = "gpt-5-codex"   # the default
approval_policy = "on-request"
notify = [
  "notify-send",  # a comment inside an array
  "Codex",
]
instructions = """
Be brief.
[not a table]
"""

[profiles.fast]
model = "gpt-5-mini"
openai_base_url = "https://example.com/v1"  # a table's own, not the top level's

[[mcp_servers.list]]
name = 'x'
`

const (
	rotorV1      = "http://127.0.0.1:8787/v1"
	rotorBackend = "http://127.0.0.1:8787/backend-api/"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestLinkCodexConfigKeepsEverythingElse(t *testing.T) {
	path := writeConfig(t, userConfig)
	changed, _, err := LinkCodexConfig(path, rotorV1, rotorBackend)
	if err != nil || !changed {
		t.Fatalf("link: %v %v", changed, err)
	}
	got := read(t, path)
	want := strings.Replace(userConfig, "\n[profiles.fast]",
		"\nopenai_base_url = \""+rotorV1+"\"\nchatgpt_base_url = \""+rotorBackend+"\"\n\n[profiles.fast]", 1)
	if got != want {
		t.Fatalf("linked file:\n%s\nwant:\n%s", got, want)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode changed to %v", fi.Mode())
	}
	// Twice is one link.
	if changed, _, err := LinkCodexConfig(path, rotorV1, rotorBackend); err != nil || changed || read(t, path) != want {
		t.Errorf("second link changed the file: %v %v", changed, err)
	}
	// Unlink gives the file back as it was.
	if changed, err := UnlinkCodexConfig(path); err != nil || !changed || read(t, path) != userConfig {
		t.Errorf("unlink: %v %v\n%s", changed, err, read(t, path))
	}
}

func TestLinkReplacesATopLevelSettingWhereItStands(t *testing.T) {
	path := writeConfig(t, "openai_base_url = 'https://proxy.example/v1'\nmodel = \"o3\"\n")
	_, old, err := LinkCodexConfig(path, rotorV1, rotorBackend)
	if err != nil || old[CodexOpenAIBaseKey] != "https://proxy.example/v1" {
		t.Fatalf("old %v, err %v", old, err)
	}
	if got := read(t, path); got != "openai_base_url = \""+rotorV1+"\"\nchatgpt_base_url = \""+rotorBackend+"\"\nmodel = \"o3\"\n" {
		t.Errorf("file: %q", got)
	}
}

func TestLinkMakesAMissingConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "codex", "config.toml")
	if _, _, err := LinkCodexConfig(path, rotorV1, rotorBackend); err != nil {
		t.Fatal(err)
	}
	if got := read(t, path); got != "openai_base_url = \""+rotorV1+"\"\nchatgpt_base_url = \""+rotorBackend+"\"\n" {
		t.Errorf("new file: %q", got)
	}
}

func TestUnlinkLeavesOthersAlone(t *testing.T) {
	for _, body := range []string{userConfig, "openai_base_url = \"https://proxy.example/v1\"\n"} {
		path := writeConfig(t, body)
		if changed, err := UnlinkCodexConfig(path); err != nil || changed || read(t, path) != body {
			t.Errorf("unlink changed a file without rotor's lines: %v %v", changed, err)
		}
	}
	if changed, err := UnlinkCodexConfig(filepath.Join(t.TempDir(), "none.toml")); err != nil || changed {
		t.Errorf("unlink of no file: %v %v", changed, err)
	}
}

func TestAConfigRotorCannotReadIsNeverWritten(t *testing.T) {
	for _, body := range []string{
		"model = \"gpt-5\nnotify = 1\n",   // a string that does not close
		"notify = [\n  \"a\",\n",          // an array that does not close
		"instructions = \"\"\"\nopen\n",   // a multi-line string that does not close
		"just some words\n",               // not TOML
		"[profiles.fast\nmodel = \"x\"\n", // a header that does not close
	} {
		path := writeConfig(t, body)
		if _, _, err := LinkCodexConfig(path, rotorV1, rotorBackend); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%q: link err %v", body, err)
		}
		if _, err := UnlinkCodexConfig(path); err == nil {
			t.Errorf("%q: unlink took it", body)
		}
		if read(t, path) != body {
			t.Errorf("%q was rewritten", body)
		}
	}
}
