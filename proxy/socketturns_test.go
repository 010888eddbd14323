package proxy

import (
	"fmt"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// A client that opens a socket per model call and names no conversation
// (the OpenAI Agents SDK's default: no session header, no
// prompt_cache_key, no previous_response_id) keeps each conversation on
// one account, as over HTTP (docs/selection.md): a frame is routed by the key its
// conversation's beginning derives. The usage records say what happened:
// new on the first turn, kept on the next.
func TestASocketPerTurnKeepsItsConversation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}, {accounts.KindAPIKey, "k2"}})
	turnOn := func(conv, n int) {
		c := e.openSocket() // a new socket per model call, no session header
		input := fmt.Sprintf(`[{"role":"user","content":"conversation %d"}`, conv)
		for i := 1; i < n; i++ {
			input += fmt.Sprintf(`,{"role":"assistant","content":"answer %d"},{"role":"user","content":"turn %d"}`, i, i+1)
		}
		fs := turn(t, c, `{"type":"response.create","model":"gpt-5","input":`+input+`]}`)
		if last := gjson.GetBytes(fs[len(fs)-1].data, "type").Str; last != "response.completed" {
			t.Fatalf("conversation %d, turn %d: %v", conv, n, types(fs))
		}
		c.Close()
		// Its usage record is written as the answer ends, a moment after
		// the client read it: wait for it, so the records are in turn order.
		want := 3*(conv-1) + n
		eventually(t, 5*time.Second, "the turn's usage record", func() bool { return len(e.records()) == want })
	}
	for conv := 1; conv <= 3; conv++ {
		for n := 1; n <= 3; n++ {
			turnOn(conv, n)
		}
	}
	recs := e.records()
	if len(recs) != 9 {
		t.Fatalf("%d usage records, want 9", len(recs))
	}
	for conv := range 3 {
		first := recs[3*conv]
		if first.Affinity != usage.AffinityNew {
			t.Errorf("conversation %d, turn 1: affinity %q, want new", conv+1, first.Affinity)
		}
		for n := 1; n < 3; n++ {
			r := recs[3*conv+n]
			if r.AccountID != first.AccountID || r.Affinity != usage.AffinityKept {
				t.Errorf("conversation %d, turn %d: account %s (%s), want %s kept", conv+1, n+1, r.AccountID, r.Affinity, first.AccountID)
			}
		}
	}
}
