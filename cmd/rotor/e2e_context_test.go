package main

// The end-to-end test of a Codex CLI turn whose input is over the model's
// context window, Codex signed in with ChatGPT and linked to rotor (docs/codex.md). The ChatGPT backend fails such a stream before any output
// (response.failed, context_length_exceeded), which the fake upstream does
// too (proxy/upstreamtest, "The backend's own rules"). Codex must learn
// that its context is full, as it would without rotor; no account may be
// blamed, since every account would refuse the same input.
//
// Run it alone with: go test -run TestE2ECodexContextWindow ./cmd/rotor/
// It skips, like the other client tests, when npm cannot reach its registry.

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/accounts/oauth/oauthtest"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// e2eContextFull is what Codex CLI prints when the model's context window
// is exceeded (codex-rs core, CodexErr::ContextWindowExceeded).
const e2eContextFull = "ran out of room in the model's context window"

func TestE2ECodexContextWindow(t *testing.T) {
	w, codex, auth := newE2ESignedInWorld(t)

	// Codex's own login and a second one, both in the pool, both with a
	// context window far smaller than Codex's instructions alone.
	codexHome := w.getenv("CODEX_HOME")
	idents := []oauthtest.Identity{
		{Email: "ada@example.com", AccountID: "7f3c2a10-5b6e-4d8f-9a01-fixture00011", PlanType: "plus"},
		{Email: "grace@example.com", AccountID: "7f3c2a10-5b6e-4d8f-9a01-fixture00012", PlanType: "pro"},
	}
	homes := []string{filepath.Join(filepath.Dir(codexHome), "other-codex-home"), codexHome}
	for i, id := range idents {
		tok := e2eSignedInAuth(t, homes[i], id)
		auth.AddRefreshToken(tok.RefreshToken)
		w.up.Set(tok.AccessToken, upstreamtest.Behavior{ContextWindow: 200})
		w.setenv("CODEX_HOME", homes[i])
		if r := w.rotor(30*time.Second, "", "import", "codex"); r.code != 0 {
			t.Fatalf("rotor import codex (%s): %v", id.Email, r)
		}
	}

	serve, in, _ := w.serveWith("--log-level", "info")
	if r := w.rotor(30*time.Second, "", "codex", "link", "--url", strings.TrimSuffix(in.URL, "/v1")); r.code != 0 {
		t.Fatalf("rotor codex link: %v", r)
	}

	ctx, cancel := context.WithTimeout(context.Background(), e2eCodexTimeout)
	defer cancel()
	cmd := w.command(ctx, codex, append(append([]string(nil), e2eCodexFlags...), "say hello")...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("codex exec did not finish within %v\nstdout:\n%s\nstderr:\n%s", e2eCodexTimeout, stdout.String(), stderr.String())
	}
	out := stdout.String() + stderr.String()
	if err == nil || !strings.Contains(out, e2eContextFull) {
		t.Fatalf("codex exec with an input over the context window: %v; want it to fail saying %q\nstdout:\n%s\nstderr:\n%s\nrotor serve:\n%s",
			err, e2eContextFull, stdout.String(), stderr.String(), serve.stderr.String())
	}
	for l := range strings.SplitSeq(out, "\n") {
		if strings.Contains(l, e2eContextFull) {
			t.Logf("codex told the user, %v after it started: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(l))
			break
		}
	}

	// One account was asked, and neither is held against it.
	if calls := e2eSignedInModelCalls(w.up); len(calls) != 1 {
		t.Errorf("the turn reached the upstream %d times, want once: every account refuses the same input", len(calls))
	}
	rs := w.rotor(30*time.Second, "", "rotation", "status", "--json")
	if rs.code != 0 {
		t.Fatalf("rotor rotation status: %v", rs)
	}
	gjson.Get(rs.stdout, "accounts").ForEach(func(_, a gjson.Result) bool {
		if st := a.Get("state").Str; st != "available" {
			t.Errorf("account %s is %q after an input over the context window: %s", a.Get("index").Raw, st, a.Raw)
		}
		return true
	})
	if strings.Contains(serve.stderr.String(), "pool_exhausted") {
		t.Errorf("rotor answered pool_exhausted:\n%s", serve.stderr.String())
	}
}
