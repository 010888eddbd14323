package proxy

import (
	"sync"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation"
)

// docs/selection.md State: two rotor processes on one ROTOR_HOME (two proxies, each
// with its own runtime state and selector, each watching the home as
// `rotor serve` does) honor each other's news within 1 s.

// sharedPair starts proxy A (newEnv) and proxy B (a peer on A's home), both
// watching the home.
func sharedPair(t *testing.T, accts []acct) (a, b *env) {
	a = newEnv(t, accts)
	b = a.peer()
	a.watch()
	b.watch()
	return a, b
}

func TestRateLimitLearnedByOneProxyIsHonoredByTheOther(t *testing.T) {
	t.Parallel()
	a, b := sharedPair(t, []acct{{accounts.KindChatGPT, "lim"}, {accounts.KindChatGPT, "ok"}})
	a.up.Set("lim", upstreamtest.Behavior{Status: 429, ResetIn: time.Hour})
	// A is pinned to account 1 for this process only, so its request
	// surely meets the limit (a process pin is not shared).
	a.sel.SetProcessPin(a.id(1))
	resp := a.do("POST", "/v1/responses", streamBody)
	expectError(t, resp, 503, rerr.PinnedUnavailable)
	learned := time.Now()
	a.expectCounts(map[string]int{"lim": 1, "ok": 0})

	until := a.state(1).RateLimitedUntil
	withinWatch(t, "proxy B to learn the rate limit", func() bool {
		return b.state(1).RateLimitedUntil.Equal(until)
	}, a, b)
	t.Logf("B learned the limit %s after A", time.Since(learned))
	if s := b.status(1); s.State != rotation.SkipRateLimited {
		t.Fatalf("B sees account 1 %q", s.State)
	}
	// B never sends account 1 a request while the limit lasts, even when
	// account 1 would otherwise be its first choice.
	b.prefer(1)
	for range 4 {
		expectStream(t, b.do("POST", "/v1/responses", streamBody))
	}
	b.expectCounts(map[string]int{"lim": 1, "ok": 4})
}

func TestCooldownLearnedByOneProxyIsHonoredByTheOther(t *testing.T) {
	t.Parallel()
	a, b := sharedPair(t, twoAPIKeys())
	a.up.Set("bad", upstreamtest.Behavior{Status: 500})
	a.prefer(1)
	expectStream(t, a.do("POST", "/v1/responses", streamBody))
	a.expectCounts(map[string]int{"bad": 1, "good": 1})
	withinWatch(t, "proxy B to learn the cooldown", func() bool {
		return b.status(1).State == "cooling-down:server-error"
	}, a, b)
	b.prefer(1)
	expectStream(t, b.do("POST", "/v1/responses", streamBody))
	b.expectCounts(map[string]int{"bad": 1, "good": 2})
}

func TestPinWrittenToTheStoreReachesBothProxies(t *testing.T) {
	t.Parallel()
	a, b := sharedPair(t, []acct{{accounts.KindAPIKey, "p1"}, {accounts.KindAPIKey, "p2"}, {accounts.KindAPIKey, "p3"}})
	id := a.id(3)
	gen := a.sel.Pool().AffinityGeneration
	// As `rotor switch 3` does, from outside both proxies.
	st, err := accounts.Open(a.store.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Update(func(p *accounts.Pool) error {
		p.PinnedAccountID = &id
		p.AffinityGeneration++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for name, e := range map[string]*env{"A": a, "B": b} {
		withinWatch(t, "proxy "+name+" to see the pin", func() bool {
			p := e.sel.Pool()
			return p.PinnedAccountID != nil && *p.PinnedAccountID == id && p.AffinityGeneration == gen+1
		}, a, b)
	}
	for range 3 {
		expectStream(t, a.do("POST", "/v1/responses", streamBody))
		expectStream(t, b.do("POST", "/v1/responses", streamBody))
	}
	a.expectCounts(map[string]int{"p1": 0, "p2": 0, "p3": 6})

	// `rotor unpin` likewise.
	if _, err := st.Update(func(p *accounts.Pool) error {
		p.PinnedAccountID = nil
		p.AffinityGeneration++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for name, e := range map[string]*env{"A": a, "B": b} {
		withinWatch(t, "proxy "+name+" to see the unpin", func() bool {
			return e.sel.Pool().PinnedAccountID == nil
		}, a, b)
	}
	b.prefer(1)
	expectStream(t, b.do("POST", "/v1/responses", streamBody))
	if a.up.Count("p1") != 1 {
		t.Errorf("after unpin B did not rotate: %v", a.counts("p1", "p2", "p3"))
	}
}

func TestFlagWrittenByOneProxyReachesTheOther(t *testing.T) {
	t.Parallel()
	a, b := sharedPair(t, []acct{{accounts.KindChatGPT, "dead"}, {accounts.KindChatGPT, "ok"}})
	a.up.Set("dead", upstreamtest.Behavior{Status: 401, ErrorFixture: "token_invalidated_401.json"})
	a.prefer(1)
	expectError(t, a.do("POST", "/v1/responses", streamBody), 401, rerr.TokenInvalidated)
	withinWatch(t, "proxy B to see the flag", func() bool {
		return b.status(1).State == rotation.SkipFlagged
	}, a, b)
	b.prefer(1)
	expectStream(t, b.do("POST", "/v1/responses", streamBody))
	b.expectCounts(map[string]int{"dead": 1, "ok": 1})
}

func TestRefreshedTokenReachesTheOtherProxy(t *testing.T) {
	t.Parallel()
	home := newEnv(t, []acct{{accounts.KindChatGPT, "old"}, {accounts.KindChatGPT, "other"}})
	a := home.peer(withRefresher(newFakeRefresher(t, home, false)))
	b := home.peer() // no refresher: a 401 would only cool the account down
	a.watch()
	b.watch()
	a.sel.SetProcessPin(a.id(1))
	b.sel.SetProcessPin(b.id(1))
	// B reads and caches the current token.
	expectStream(t, b.do("POST", "/v1/responses", streamBody))
	// Upstream invalidates it; A refreshes.
	a.up.Set("old", upstreamtest.Behavior{Status: 401})
	expectStream(t, a.do("POST", "/v1/responses", streamBody))
	a.expectCounts(map[string]int{"old": 2, "fresh-old": 1})
	tokensAt := a.state(1).TokensAt
	withinWatch(t, "proxy B to learn the token changed", func() bool {
		return !b.state(1).TokensAt.Before(tokensAt)
	}, a, b)
	// B uses the new token without a 401 of its own.
	expectStream(t, b.do("POST", "/v1/responses", streamBody))
	a.expectCounts(map[string]int{"old": 2, "fresh-old": 2})
}

func TestConcurrentRequestsAcrossTwoProxies(t *testing.T) {
	t.Parallel()
	a, b := sharedPair(t, []acct{{accounts.KindAPIKey, "lim"}, {accounts.KindAPIKey, "err"}, {accounts.KindAPIKey, "ok1"}, {accounts.KindAPIKey, "ok2"}})
	a.up.Set("lim", upstreamtest.Behavior{Status: 429, ResetIn: time.Hour})
	a.up.Set("err", upstreamtest.Behavior{Status: 500})
	a.up.Set("ok1", upstreamtest.Behavior{EventDelay: 5 * time.Millisecond})
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for i := range 24 {
		e := a
		if i%2 == 1 {
			e = b
		}
		wg.Go(func() {
			resp := e.do("POST", "/v1/responses", streamBody)
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				errs <- resp.Status + ": " + readAll(t, resp)
				return
			}
			types, err := readStream(t, resp.Body)
			if err != nil || !completed(types) {
				errs <- "incomplete stream"
			}
		})
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
	if n := a.up.Count("ok1") + a.up.Count("ok2"); n != 24 {
		t.Errorf("healthy accounts served %d of 24", n)
	}
	// Requests in flight together may each meet the limit once; after
	// that, both proxies know it and never ask again.
	lim := a.up.Count("lim")
	for _, e := range []*env{a, b} {
		withinWatch(t, "both proxies to know the limit", func() bool {
			return e.status(1).State == rotation.SkipRateLimited
		}, a, b)
	}
	for i := range 6 {
		e := a
		if i%2 == 1 {
			e = b
		}
		expectStream(t, e.do("POST", "/v1/responses", streamBody))
	}
	if n := a.up.Count("lim"); n != lim {
		t.Errorf("the limited account was asked again: %d then %d", lim, n)
	}
}
