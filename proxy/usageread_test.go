package proxy

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/proxy/backend"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// Tests of docs/selection.md: every ChatGPT account's usage read from its backend,
// without a model request; the serves on one home taking turns.

// usageReads counts the usage reads that reached the upstream, by token.
func usageReads(up *upstreamtest.Server) map[string]int {
	n := map[string]int{}
	for _, r := range up.Requests() {
		if r.Method == http.MethodGet && r.Path == "/backend-api/wham/usage" {
			n[r.Token]++
		}
	}
	return n
}

// usageReader is a serve's usage reader, made at its first pass.
type usageReader struct{ *backend.Reader }

// The reader's timings, as the tests wait for them.
const (
	usageEvery   = backend.UsageEvery
	usageJitter  = backend.UsageJitter
	keepAliveAge = backend.KeepAliveAge
)

// pass runs one pass of e's reader, as ReadUsage does on every tick.
func (e *env) pass(ur *usageReader) {
	e.t.Helper()
	if ur.Reader == nil {
		ur.Reader = e.srv.usageReader(filepath.Join(e.store.Dir(), home.UsageReadLock))
	}
	ur.Pass(context.Background(), func() { e.sel.Runtime().Sync(nil) })
}

var spentQuota = map[string]string{"x-codex-primary-used-percent": "40", "x-codex-primary-window-minutes": "300",
	"x-codex-primary-reset-after-seconds": "3600", "x-codex-secondary-used-percent": "12", "x-codex-plan-type": "pro"}

func TestAnIdleAccountsQuotaIsRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "t1"}, {accounts.KindChatGPT, "t2"}, {accounts.KindAPIKey, "k"}})
	e.up.Set("t1", upstreamtest.Behavior{Headers: spentQuota, ResetCredits: 2})
	var ur usageReader
	e.pass(&ur)
	q := e.state(1).Quota
	if q == nil || q.Primary == nil || q.Primary.UsedPercent != 40 || q.Secondary.UsedPercent != 12 || q.PlanType != "pro" ||
		q.ResetCredits == nil || *q.ResetCredits != 2 {
		t.Fatalf("account 1's quota after one pass: %+v", q)
	}
	if reads := usageReads(e.up); reads["t1"] != 1 || reads["t2"] != 1 || len(reads) != 2 {
		t.Fatalf("reads: %v (want one per ChatGPT account, none for the API key)", reads)
	}
	if n := len(e.up.Requests()); n != 2 {
		t.Errorf("the pass made %d upstream requests: it spends no quota", n)
	}
	// Bounded: nothing more until usageEvery (and the jitter) passed.
	e.pass(&ur)
	if reads := usageReads(e.up); reads["t1"] != 1 {
		t.Errorf("read again at once: %v", reads)
	}
	// An answer's quota later keeps the reset credits the read told.
	later := *q
	later.ResetCredits, later.ObservedAt = nil, time.Now()
	e.sel.Runtime().SetQuota(e.id(1), later)
	if q := e.state(1).Quota; q.ResetCredits == nil || *q.ResetCredits != 2 {
		t.Errorf("reset credits lost: %+v", q)
	}
}

func TestUsageIsDueOnItsScheduleAndAfterAReset(t *testing.T) {
	t.Parallel()
	e, clk, t0 := frozenEnv(t, []acct{{accounts.KindChatGPT, "t1"}})
	var ur usageReader
	e.pass(&ur)
	clk.Advance(usageEvery - time.Second)
	e.pass(&ur)
	if n := usageReads(e.up)["t1"]; n != 1 {
		t.Fatalf("%d reads before usageEvery", n)
	}
	clk.Advance(usageJitter + time.Second)
	e.pass(&ur)
	if n := usageReads(e.up)["t1"]; n != 2 {
		t.Fatalf("%d reads after usageEvery and the jitter", n)
	}
	// A rate limit that ends is read again at once.
	e.sel.Runtime().RateLimited(e.id(1), clk.Now().Add(time.Minute))
	clk.Advance(time.Minute + time.Second)
	e.pass(&ur)
	if n := usageReads(e.up)["t1"]; n != 3 || clk.Now().Sub(t0) > 2*usageEvery {
		t.Fatalf("%d reads after the limit's reset", n)
	}
}

// Two serves on one home read each account once between them, and an
// early reset one of them reads lifts the limit in the other too.
func TestTwoServesShareTheReadingAndTheEarlyReset(t *testing.T) {
	t.Parallel()
	a := newEnv(t, []acct{{accounts.KindChatGPT, "t1"}, {accounts.KindChatGPT, "t2"}})
	b := a.peer()
	for _, e := range []*env{a, b} {
		e.sel.Runtime().RateLimited(e.id(1), time.Now().Add(time.Hour))
		e.sel.Runtime().Sync(nil)
	}
	var ua, ub usageReader
	a.pass(&ua)
	b.pass(&ub)
	if reads := usageReads(a.up); reads["t1"] != 1 || reads["t2"] != 1 {
		t.Fatalf("two serves read %v", reads)
	}
	if st := a.status(1); st.State != "available" {
		t.Errorf("the reading serve still waits on account 1: %s", st.State)
	}
	// A serve that read nothing itself hears of it within a second.
	c := a.peer()
	c.watch()
	withinWatch(t, "another serve sees the early reset", func() bool { return c.status(1).State == "available" }, c)
}

func TestAFailingUsageReadMarksNothing(t *testing.T) {
	t.Parallel()
	var log syncBuffer
	e := newEnvLogged(t, []acct{{accounts.KindChatGPT, "t1"}}, &log)
	e.up.Set("t1", upstreamtest.Behavior{Status: 500})
	var ur usageReader
	for range 3 {
		e.pass(&ur)
	}
	if st := e.state(1); !st.CooldownUntil.IsZero() || !st.RateLimitedUntil.IsZero() || len(st.Failures) > 0 || st.Quota != nil {
		t.Errorf("a failed read marked the account: %+v", st)
	}
	if n := usageReads(e.up)["t1"]; n != 1 {
		t.Errorf("%d reads: a failure backs off", n)
	}
	if n := strings.Count(log.String(), "cannot read the account's usage"); n != 1 {
		t.Errorf("logged %d times", n)
	}
}

// A login idle for a week is refreshed in the background, once for two
// serves, and the new pair written back to the Codex auth.json it is
// linked to.
func TestAnIdleLoginIsKeptAlive(t *testing.T) {
	t.Parallel()
	e := newChatGPTRefreshEnv(t, []acct{{accounts.KindChatGPT, "t1"}})
	old := e.secret(1)
	e.auth.AddRefreshToken(old.RefreshToken)
	codex := filepath.Join(t.TempDir(), "auth.json")
	writeAuthJSON(t, codex, old.AccessToken, old.RefreshToken)
	p, err := e.store.Update(func(p *accounts.Pool) error {
		p.At(1).AddedAt = time.Now().Add(-keepAliveAge - time.Hour)
		p.At(1).CodexAuthFile = codex
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.sel.SetPool(p)
	other := startProxy(t, e.up, e.store.Dir(), peerConfig{seed: 4, refresher: e.srv.deps.Refresher})
	other.sel.SetPool(p)
	var ua, ub usageReader
	e.pass(&ua)
	other.pass(&ub)
	if n := e.auth.TokenCalls("refresh_token"); n != 1 {
		t.Fatalf("%d refreshes for two serves", n)
	}
	fresh := e.secret(1)
	got, err := accounts.ReadCodexAuth(codex)
	if err != nil || fresh.RefreshToken == old.RefreshToken || got.RefreshToken != fresh.RefreshToken {
		t.Errorf("the linked file does not hold the new pair (%v)", err)
	}
	// Refreshed now: not again on the next pass.
	e.pass(&ua)
	if n := e.auth.TokenCalls("refresh_token"); n != 1 {
		t.Errorf("refreshed again: %d", n)
	}
}

// writeAuthJSON writes a Codex auth.json holding the pair.
func writeAuthJSON(t *testing.T, path, access, refresh string) {
	t.Helper()
	body := `{"OPENAI_API_KEY":null,"tokens":{"id_token":"","access_token":"` + access + `","refresh_token":"` + refresh +
		`","account_id":"cg-t1"},"last_refresh":"2026-01-01T00:00:00Z"}`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The pool's reset credits reach Codex's /status, and rotation status.
func TestResetCreditsAreShown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "t1"}, {accounts.KindChatGPT, "t2"}})
	if got := readAll(t, e.do("GET", "/backend-api/wham/usage", "")); strings.Contains(got, "rate_limit_reset_credits") {
		t.Errorf("credits shown before any is known: %s", got)
	}
	e.up.Set("t1", upstreamtest.Behavior{ResetCredits: 2})
	e.up.Set("t2", upstreamtest.Behavior{ResetCredits: 1})
	var ur usageReader
	e.pass(&ur)
	got := readAll(t, e.do("GET", "/backend-api/wham/usage", ""))
	if !strings.Contains(got, `"rate_limit_reset_credits":{"available_count":3}`) {
		t.Errorf("wham/usage: %s", got)
	}
}

// The reader runs on a goroutine of its own in serve, with no recover: a
// bug met reading one account's usage (here its secret read panics) is
// logged once with the account, counts as a failed read that backs off
// and marks nothing, and the other accounts' usage is still read.
func TestAUsageReadPanicEndsOnlyThatRead(t *testing.T) {
	t.Parallel()
	bug := &armedSecrets{}
	var log syncBuffer
	e := newEnvWith(t, []acct{{accounts.KindChatGPT, "t1"}, {accounts.KindChatGPT, "t2"}}, peerConfig{seed: 1, log: &log,
		secrets: func(src SecretSource) SecretSource { bug.src = src; return bug }})
	e.up.Set("t2", upstreamtest.Behavior{Headers: spentQuota})
	bug.armed.Store(true) // the first account's read, which comes first
	var ur usageReader
	e.pass(&ur)
	e.pass(&ur)
	if n := strings.Count(log.String(), `"panic":"boom: sk-secret-in-panic"`); n != 1 {
		t.Errorf("the panic is logged %d times, want once:\n%s", n, log.String())
	}
	if st := e.state(1); !st.CooldownUntil.IsZero() || !st.RateLimitedUntil.IsZero() || len(st.Failures) > 0 {
		t.Errorf("the bug marked the account: %+v", st)
	}
	if n := usageReads(e.up)["t1"]; n != 0 {
		t.Errorf("%d reads of the first account within its backoff, want 0", n)
	}
	if st := e.state(2); st.Quota == nil || st.Quota.Primary == nil || st.Quota.Primary.UsedPercent != 40 {
		t.Errorf("the second account's usage was not read: %+v", st.Quota)
	}
}
