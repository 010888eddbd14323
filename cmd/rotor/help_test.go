package main

import (
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/hometest"
	"github.com/rotorproxy/rotor/rotation"
)

// runIO runs one command line in-process with stdout on a terminal or not.
func (h *diagHome) runIO(stdoutTTY bool, args ...string) result {
	h.t.Helper()
	return h.runApp("", stdoutTTY, args)
}

// Every command answers --help, and "rotor help CMD", on stdout with exit
// 0: its usage line, a sentence, every flag as --flag with its default,
// and an example.
func TestEveryCommandHasHelp(t *testing.T) {
	t.Parallel()
	h := newDiagHome(t)
	singleDash := regexp.MustCompile(`(^|\s)-[a-z]`)
	for _, name := range sortedNames() {
		c := commands[name]
		r := h.run(name, "--help")
		if r.code != 0 || r.stderr != "" {
			t.Errorf("%s --help: exit %d, stderr %q", name, r.code, r.stderr)
		}
		if !strings.HasPrefix(r.stdout, "Usage: rotor "+c.usage+"\n\n"+c.short+"\n") {
			t.Errorf("%s --help does not start with its usage line and sentence:\n%s", name, r.stdout)
		}
		if !strings.Contains(r.stdout, "\nExample:\n  "+strings.Split(c.example, "\n")[0]) || !strings.HasPrefix(c.example, "rotor ") && !strings.Contains(c.example, "rotor "+name) {
			t.Errorf("%s --help: no example running it:\n%s", name, r.stdout)
		}
		for _, line := range strings.Split(r.stdout, "\n") {
			if strings.HasPrefix(line, "  --") && !strings.Contains(line, "(default ") {
				t.Errorf("%s --help: flag without its default: %q", name, line)
			}
			if strings.HasPrefix(line, "  ") && singleDash.MatchString(strings.TrimSpace(line)) && !strings.Contains(line, "rotor") {
				t.Errorf("%s --help: a single-dash flag: %q", name, line)
			}
		}
		if hr := h.run("help", name); hr.code != 0 || hr.stdout != r.stdout {
			t.Errorf("help %s differs from %s --help:\n%s", name, name, hr.stdout)
		}
		if h := h.run(name, "-h"); h.stdout != r.stdout {
			t.Errorf("%s -h differs from --help", name)
		}
	}
	// The flags of serve, each with its default.
	r := h.run("serve", "--help")
	for _, want := range []string{"--host H", "(default 127.0.0.1)", "--port P", "(default 8787)", "--account SEL", "(default none)", "--stall-timeout duration"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("serve --help lacks %q:\n%s", want, r.stdout)
		}
	}
	if r := h.run("exec", "--help"); !strings.Contains(r.stdout, "Usage: rotor exec [--account SEL] -- CMD [ARGS]") {
		t.Errorf("exec --help does not show -- CMD:\n%s", r.stdout)
	}
}

func TestTopLevelHelpAndVersion(t *testing.T) {
	t.Parallel()
	h := newDiagHome(t)
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		r := h.run(args...)
		if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, "Usage: rotor <command> [flags]") {
			t.Errorf("rotor %v: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
		for _, name := range sortedNames() {
			if !strings.Contains(r.stdout, "\n  "+commands[name].synopsis()+" ") {
				t.Errorf("rotor %v does not list %q", args, commands[name].synopsis())
			}
		}
	}
	v := h.run("version")
	if vv := h.run("--version"); vv.code != 0 || vv.stdout != v.stdout || !strings.HasPrefix(vv.stdout, "rotor ") {
		t.Errorf("--version = %q, version = %q", vv.stdout, v.stdout)
	}
	if r := h.run(); r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "Usage: rotor") {
		t.Errorf("no command: %+v", r)
	}
}

// A stamped version and commit win; an unstamped build (go install from a
// tag, go build in a clone) reports what the toolchain recorded, never "dev"
// when it knows better.
func TestVersionInfo(t *testing.T) {
	tagged := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"}}
	clone := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}}}
	for _, tc := range []struct {
		name, version, commit string
		bi                    *debug.BuildInfo
		wantV, wantC, wantGo  string
	}{
		{"stamped", "v2.0.0", "abc1234", clone, "v2.0.0", "abc1234", "go1.26.0"},
		{"go install @tag", "dev", "", tagged, "v1.2.3", "", "go1.26.0"},
		{"build in a clone", "dev", "", clone, "dev", "0123456789abcdef", "go1.26.0"},
		{"no build info", "dev", "", nil, "dev", "", "unknown"},
	} {
		v, c, goV := versionInfo(tc.version, tc.commit, tc.bi)
		if v != tc.wantV || c != tc.wantC || goV != tc.wantGo {
			t.Errorf("%s: versionInfo = %q, %q, %q; want %q, %q, %q", tc.name, v, c, goV, tc.wantV, tc.wantC, tc.wantGo)
		}
	}
}

func TestMistypedCommandSuggests(t *testing.T) {
	t.Parallel()
	h := newDiagHome(t)
	for typed, want := range map[string]string{
		"lsit": "list", "swich": "switch", "rotaton": "rotation", "doctr": "doctor",
		"serv": "serve", "add-kye": "add-key", "verify": "verify-flagged", "unpn": "unpin",
		"xyzzy": "", "frobnicate": "",
	} {
		r := h.run(typed)
		if r.code != 1 || r.stdout != "" || !strings.HasPrefix(r.stderr, "Unknown command: "+typed+"\n") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", typed, r.code, r.stdout, r.stderr)
			continue
		}
		hint := `Did you mean "` + want + `"?`
		switch {
		case want == "" && strings.Contains(r.stderr, "Did you mean"):
			t.Errorf("%s: suggests something: %q", typed, r.stderr)
		case want != "" && !strings.Contains(r.stderr, hint):
			t.Errorf("%s: want %s in %q", typed, hint, r.stderr)
		}
		if !strings.Contains(r.stderr, "Usage: rotor <command>") {
			t.Errorf("%s: no usage after the error", typed)
		}
	}
}

func TestFlagMistakes(t *testing.T) {
	t.Parallel()
	h := newDiagHome(t)
	r := h.run("list", "--jsn")
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "Unknown flag: --jsn\n") ||
		!strings.Contains(r.stderr, "Usage: rotor list [--json]") {
		t.Errorf("list --jsn: %+v", r)
	}
	for _, port := range []string{"99999", "-1", "http"} {
		r := h.run("serve", "--port", port)
		if r.code != 1 || !strings.Contains(r.stderr, "flag --port: want a port number from 1 to 65535, or 0 for any free port") {
			t.Errorf("serve --port %s: %+v", port, r)
		}
	}
}

// ansi matches the escape sequences rotor colours with.
var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

// On a terminal, states are coloured (available green, limited yellow,
// flagged or disabled red) and the table still lines up: without the
// escapes it is byte for byte the plain table. NO_COLOR and a pipe get
// the plain table.
func TestStatesColouredOnATerminal(t *testing.T) {
	t.Parallel()
	h := newDiagHome(t)
	off := hometest.APIKey("off", "sk-off")
	off.Enabled = false
	bad := hometest.APIKey("flagged-one", "sk-bad")
	bad.Flag = accounts.FlagTokenInvalid
	h.prep.Write(hometest.APIKey("a-long-label-here", "sk-a"), off, bad)

	for _, cmd := range [][]string{{"list"}, {"rotation", "status"}, {"forecast"}, {"doctor"}} {
		plain := h.runIO(false, cmd...)
		col := h.runIO(true, cmd...)
		if strings.Contains(plain.stdout, "\x1b") {
			t.Errorf("%v: escapes in output that is not a terminal", cmd)
		}
		if got := ansi.ReplaceAllString(col.stdout, ""); got != plain.stdout {
			t.Errorf("%v: coloured table differs from the plain one once uncoloured:\n%s\nplain:\n%s", cmd, got, plain.stdout)
		}
		if !strings.Contains(col.stdout, "\x1b[") {
			t.Errorf("%v: no colour on a terminal:\n%s", cmd, col.stdout)
		}
		h.setenv("NO_COLOR", "1")
		if nc := h.runIO(true, cmd...); nc.stdout != plain.stdout {
			t.Errorf("%v: NO_COLOR still colours:\n%q", cmd, nc.stdout)
		}
		h.unsetenv("NO_COLOR")
	}
	col := h.runIO(true, "list").stdout
	for _, want := range []string{ansiGreen + "available", ansiRed + "disabled", ansiRed + "flagged"} {
		if !strings.Contains(col, want) {
			t.Errorf("list on a terminal lacks %q:\n%q", want, col)
		}
	}
}

// Quota windows are drawn as bars with their percentage and time to
// reset, in rotation status, status and forecast; on a terminal each bar
// is coloured by the headroom left, and the columns still line up.
func TestQuotaBars(t *testing.T) {
	t.Parallel()
	h := newDiagHome(t)
	p := h.prep.Write(hometest.APIKey("low", "sk-low"), hometest.APIKey("mid", "sk-mid"), hometest.APIKey("high", "sk-high"), hometest.APIKey("none", "sk-none"))
	rt := rotation.NewRuntime(h.dir, clock.System{})
	reset := time.Now().Add(2*time.Hour + 10*time.Minute + 30*time.Second)
	for i, used := range []float64{30, 75, 95} {
		rt.SetQuota(p.At(i+1).ID, rotation.Quota{
			Primary:   &rotation.Window{UsedPercent: used, WindowMinutes: 300, ResetsAt: reset},
			Secondary: &rotation.Window{UsedPercent: 10, WindowMinutes: 10080},
		})
	}
	if err := rt.Sync(nil); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"rotation", "status"}, {"status"}, {"forecast"}} {
		plain := h.runIO(false, cmd...).stdout
		for _, want := range []string{
			"███░░░░░░░  30% used, resets in 2h10m", "████████░░  75% used, resets in 2h10m",
			"██████████  95% used, resets in 2h10m", "█░░░░░░░░░  10% used",
		} {
			if !strings.Contains(plain, want) {
				t.Errorf("%v lacks %q:\n%s", cmd, want, plain)
			}
		}
		col := h.runIO(true, cmd...).stdout
		for _, want := range []string{ansiGreen + "███░", ansiYellow + "████████░░", ansiRed + "██████████"} {
			if !strings.Contains(col, want) {
				t.Errorf("%v on a terminal lacks %q:\n%s", cmd, want, col)
			}
		}
		if got := ansi.ReplaceAllString(col, ""); got != plain {
			t.Errorf("%v: coloured bars differ from the plain ones once uncoloured", cmd)
		}
		lines := strings.Split(plain, "\n")
		var at []int // where the primary quota column starts, on every row
		for _, l := range lines {
			if i := strings.Index(l, "PRIMARY QUOTA"); i >= 0 {
				at = append(at, len([]rune(l[:i])))
			}
			if i := strings.Index(l, "% used, resets"); i >= 0 {
				at = append(at, len([]rune(l[:i]))-14)
			}
		}
		if len(at) != 4 || at[0] != at[1] || at[1] != at[3] {
			t.Errorf("%v: bars do not line up under their heading (%v):\n%s", cmd, at, plain)
		}
	}
}
