package rotation

import (
	"fmt"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
)

// benchPool is a pool of n enabled API-key accounts with a spread of
// runtime states: some rate-limited, some cooling down, some with quota.
func benchPool(b *testing.B, n int) *Selector {
	b.Helper()
	now := time.Now()
	rt := NewRuntime(b.TempDir(), clock.System{})
	sel := NewSelector(rt, clock.System{}, 42)
	p := &accounts.Pool{Version: 1}
	for i := range n {
		p.AddAPIKey(fmt.Sprintf("acct-%d", i), "", now)
	}
	sel.SetPool(p)
	for i := range n {
		id := p.Accounts[i].ID
		switch i % 10 {
		case 0:
			rt.RateLimited(id, now.Add(time.Hour))
		case 1:
			rt.Cooldown(id, CooldownServerError, time.Hour)
		case 2:
			rt.SetQuota(id, Quota{Primary: &Window{UsedPercent: 97, ResetsAt: now.Add(time.Hour)}})
		case 3:
			rt.Success(id, 200)
		}
	}
	return sel
}

// BenchmarkPick measures one selection over 200 accounts (target < 5 µs).
func BenchmarkPick(b *testing.B) {
	sel := benchPool(b, 200)
	req := &Request{}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, ref := sel.Pick(req); ref != nil {
			b.Fatal("no pick")
		}
	}
}

// BenchmarkPickAffinity measures a pick that follows a session binding.
func BenchmarkPickAffinity(b *testing.B) {
	sel := benchPool(b, 200)
	req := &Request{AffinityKey: "s:session-1"}
	c, _ := sel.Pick(req)
	sel.Bind(req.AffinityKey, c.Account.ID)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		sel.Pick(req)
	}
}
