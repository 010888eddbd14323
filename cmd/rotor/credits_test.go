package main

import (
	"strings"
	"testing"
)

// rotor serve --credits (or ROTOR_CREDITS) takes one of the three
// policies of docs/selection.md; anything else is refused before the serve
// starts, naming where it came from.
func TestServeRefusesAnUnknownCreditsPolicy(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	if r := h.run("", "serve", "--port", "0", "--credits", "sometimes"); r.code != 1 ||
		!strings.Contains(r.stderr, `--credits: unknown credits policy "sometimes" (want last-resort, never or spend)`) || r.stdout != "" {
		t.Errorf("serve --credits sometimes: %v", r)
	}
	h.setenv("ROTOR_CREDITS", "always")
	if r := h.run("", "serve", "--port", "0"); r.code != 1 || !strings.Contains(r.stderr, `ROTOR_CREDITS: unknown credits policy "always"`) {
		t.Errorf("serve with ROTOR_CREDITS=always: %v", r)
	}
	if r := h.run("", "service", "install"); r.code != 1 || !strings.Contains(r.stderr, "ROTOR_CREDITS") {
		t.Errorf("service install with ROTOR_CREDITS=always: %v", r)
	}
}

// The service passes ROTOR_CREDITS on to the serve it starts, on every
// system, and names it only when it is set.
func TestServicePassesTheCreditsPolicyOn(t *testing.T) {
	t.Parallel()
	spec := testSpec
	spec.Credits = "never"
	for name, kind := range map[string]serviceKind{"systemd": systemdKind, "launchd": launchdKind} {
		got := kind.render(spec)
		want := map[string]string{"systemd": `Environment="ROTOR_CREDITS=never"`, "launchd": "<key>ROTOR_CREDITS</key>\n\t\t<string>never</string>"}[name]
		if !strings.Contains(string(got), want) {
			t.Errorf("%s: no %q in\n%s", name, want, got)
		}
		if got := kind.render(testSpec); strings.Contains(string(got), "ROTOR_CREDITS") {
			t.Errorf("%s names ROTOR_CREDITS though unset:\n%s", name, got)
		}
	}
	if got := taskCommand(spec); !strings.Contains(got, `set "ROTOR_CREDITS=never"`) {
		t.Errorf("the Windows task's command: %s", got)
	}
}
