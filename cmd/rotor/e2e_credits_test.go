package main

// The end-to-end test of docs/selection.md with the real Codex CLI: signed in with
// ChatGPT and linked to a running serve (docs/codex.md), with Codex's own account
// past its window and holding credits, and another account with included
// quota left. The fake meters both as the backend does
// (upstreamtest.Meter): an account on credits keeps answering, and spends
// them. Every turn of `codex exec` must go to the account with quota, and
// `codex app-server`'s account/rateLimits/read (the TUI's /status) must
// show every limit family and the pool's credits.
//
// Run it alone with: go test -run TestE2ECodexCredits ./cmd/rotor/

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// e2eSonic is the model the fake meters in a family of its own.
const e2eSonic = "gpt-5.2-codex-sonic"

func TestE2ECodexCredits(t *testing.T) {
	w, codex, auth := newE2ESignedInWorld(t)
	_, own, other := e2eTwoSignedIn(t, w, auth)

	// Codex's own account: its five-hour window used up, 12.50 of credits.
	// The other: 10% used. Both meter the sonic model on its own.
	window := func(used float64) *upstreamtest.MeterWindow {
		return &upstreamtest.MeterWindow{UsedPercent: used, Minutes: 300, ResetIn: time.Hour}
	}
	sonic := func(used float64) upstreamtest.Family {
		return upstreamtest.Family{ID: "codex_bengalfox", LimitName: e2eSonic, Primary: window(used)}
	}
	w.up.Set(own.AccessToken, upstreamtest.Behavior{ToolRoundTrip: true, Meter: &upstreamtest.Meter{
		Families: []upstreamtest.Family{{ID: "codex", Primary: window(100)}, sonic(40)},
		Credits:  &upstreamtest.Credits{Balance: 12.5}}})
	w.up.Set(other.AccessToken, upstreamtest.Behavior{ToolRoundTrip: true, Meter: &upstreamtest.Meter{
		Families: []upstreamtest.Family{{ID: "codex", Primary: window(10)}, sonic(70)}, Step: 1}})

	// The serve Codex uses reads both accounts' usage as it starts (docs/selection.md), before Codex sends anything; then the link.
	serve, in, stopServe := w.serveWith("--log-level", "debug")
	for deadline := time.Now().Add(10 * time.Second); e2eUsageReads(w.up) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the serve did not read both accounts' usage within 10s: %d reads", e2eUsageReads(w.up))
		}
	}
	tap := newE2ETap(t, strings.TrimSuffix(in.URL, "/v1"))
	if r := w.rotor(30*time.Second, "", "codex", "link", "--url", tap.URL); r.code != 0 {
		t.Fatalf("rotor codex link: %v", r)
	}

	// Two turns of codex exec: each a tool call and its answer.
	var flags []string
	for _, f := range e2eCodexFlags {
		if f != "--ephemeral" {
			flags = append(flags, f)
		}
	}
	for turn := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), e2eCodexTimeout)
		cmd := w.command(ctx, codex, append(flags, e2eSignedInPrompt)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		if err != nil || !strings.Contains(stdout.String(), e2eHello) {
			t.Fatalf("codex exec, turn %d: %v\nstdout:\n%s\nstderr:\n%s\nrotor serve:\n%s", turn+1, err, stdout.String(), stderr.String(), serve.stderr.String())
		}
	}
	calls := e2eSignedInModelCalls(w.up)
	if len(calls) != 4 {
		t.Errorf("the two turns made %d model requests upstream, want 4 (a tool call and an answer each)", len(calls))
	}
	for i, c := range calls {
		if c.Token != other.AccessToken {
			t.Errorf("model request %d went to Codex's own account, which is on credits, while the other had included quota", i+1)
		}
	}
	if m := w.up.Metered(own.AccountID); m.Served != 0 || m.OnCredits != 0 || m.Credits == nil || m.Credits.Balance != 12.5 {
		t.Errorf("Codex's own account served %d requests (%d on credits, balance %+v): credits were spent while quota was left", m.Served, m.OnCredits, m.Credits)
	}

	// /status: the TUI's account/rateLimits/read through codex app-server.
	as, rpc := e2eAppServer(t, w, codex)
	got := rpc(2, "account/rateLimits/read", "null")
	if code := as.wait(); code != 0 {
		t.Errorf("codex app-server exited %d\nstderr:\n%s", code, as.stderr.String())
	}
	t.Logf("account/rateLimits/read answered %s", got.Raw)
	res := got.Get("result")
	if c := res.Get("rateLimits.credits"); !c.Get("hasCredits").Bool() || c.Get("balance").Str != "12.50" {
		t.Errorf("Codex reads the credits %s; want the pool's: has credits, balance 12.50", c.Raw)
	}
	fam := res.Get("rateLimitsByLimitId.codex_bengalfox")
	if !fam.Exists() || fam.Get("limitName").Str != e2eSonic || fam.Get("primary.usedPercent").Int() != 40 {
		t.Errorf("Codex reads the sonic family as %s; want it, at the pool's 40%% (the account with the most room)", fam.Raw)
	}
	if main := res.Get("rateLimits.primary.usedPercent"); main.Int() < 10 || main.Int() > 20 {
		t.Errorf("Codex reads the main window at %s%%; want the account with quota's", main.Raw)
	}
	stopServe()
}
