package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/proxy/jsonscan"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// Conversations that carry no id (docs/selection.md): most Chat Completions clients,
// and Responses clients that set no prompt_cache_key, send the whole
// conversation every turn and nothing that names it.

var threeKeys = []acct{{accounts.KindAPIKey, "k1"}, {accounts.KindAPIKey, "k2"}, {accounts.KindAPIKey, "k3"}}

// conversation is one client conversation without ids: each turn sends
// every earlier message again.
type conversation struct {
	chat  bool
	topic string
	turns []string // the messages so far, as JSON
}

func (c *conversation) next(t *testing.T, e *env, extra ...string) string {
	tok, _ := c.turn(t, e, extra...)
	return tok
}

// turn sends the conversation's next turn; it returns the token of the
// account that answered and the answer.
func (c *conversation) turn(t *testing.T, e *env, extra ...string) (token, answer string) {
	t.Helper()
	n := len(c.turns)
	var body string
	if c.chat {
		if n == 0 {
			c.turns = append(c.turns, `{"role":"system","content":"You are terse."}`)
		}
		c.turns = append(c.turns, fmt.Sprintf(`{"role":"user","content":"%s, turn %d"}`, c.topic, n))
		body = `{"model":"gpt-5","stream":true,"messages":[` + strings.Join(c.turns, ",") + `]` + strings.Join(extra, "") + `}`
	} else {
		c.turns = append(c.turns, fmt.Sprintf(`{"type":"message","role":"user","content":[{"type":"input_text","text":"%s, turn %d"}]}`, c.topic, n))
		body = `{"model":"gpt-5","stream":true,"instructions":"Be terse.","input":[` + strings.Join(c.turns, ",") + `]` + strings.Join(extra, "") + `}`
	}
	path := "/v1/responses"
	if c.chat {
		path = "/v1/chat/completions"
	}
	resp := e.do("POST", path, body)
	answer = readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("turn %d of %s: %d %s", n, c.topic, resp.StatusCode, answer)
	}
	tok := servedBy(t, e.up)
	if c.chat {
		c.turns = append(c.turns, `{"role":"assistant","content":"Hello from the fake upstream."}`)
	} else {
		c.turns = append(c.turns, `{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hello from the fake upstream."}]}`)
	}
	return tok, answer
}

func TestConversationsWithoutIDsStayOnTheirAccount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, threeKeys)
	convs := []*conversation{{chat: true, topic: "chat one"}, {chat: true, topic: "chat two"},
		{topic: "responses one"}, {topic: "responses two"}}
	first := map[*conversation]string{}
	used := map[string]bool{}
	for turn := range 4 {
		for _, c := range convs {
			tok := c.next(t, e)
			if turn == 0 {
				first[c] = tok
				used[tok] = true
			} else if tok != first[c] {
				t.Errorf("turn %d of %q went to %s, its first to %s", turn, c.topic, tok, first[c])
			}
		}
	}
	if len(used) < 2 {
		t.Errorf("four conversations all on %v: they do not spread", used)
	}
}

func TestOneTurnRequestsStillSpread(t *testing.T) {
	t.Parallel()
	e := newEnv(t, threeKeys)
	used := map[string]int{}
	for i := range 12 {
		c := &conversation{topic: fmt.Sprintf("question %d", i)}
		used[c.next(t, e)]++
	}
	if len(used) < 3 {
		t.Errorf("12 unrelated requests went to %v", used)
	}
}

func TestAConversationWithoutIDsMovesAndStays(t *testing.T) {
	t.Parallel()
	e := newEnv(t, threeKeys)
	c := &conversation{topic: "moving"}
	was := c.next(t, e)
	e.up.Set(was, upstreamtest.Behavior{Status: 429})
	now := c.next(t, e)
	if now == was {
		t.Fatalf("the conversation stayed on its limited account %s", was)
	}
	e.up.Set(was, upstreamtest.Behavior{})
	e.sel.Runtime().Clear(e.id(map[string]int{"k1": 1, "k2": 2, "k3": 3}[was]))
	for turn := range 3 {
		if tok := c.next(t, e); tok != now {
			t.Errorf("turn %d after the move went to %s, not %s", turn+2, tok, now)
		}
	}
}

// The prompt cache of a conversation without ids, through three accounts
// whose upstream caches per account: kept on one account, every turn but
// the first finds its earlier turns cached. "Before" is the same
// conversation whose turns each name a conversation of their own, as
// every turn did before rotor derived one: picked afresh each turn.
func TestDerivedAffinityKeepsThePromptCache(t *testing.T) {
	t.Parallel()
	rate := func(e *env, c *conversation, perTurnKey bool) float64 {
		var in, cached int64
		for turn := range 6 {
			extra := ""
			if perTurnKey {
				extra = fmt.Sprintf(`,"prompt_cache_key":"%s-%d"`, c.topic, turn)
			}
			_, answer := c.turn(t, e, extra)
			var u gjson.Result
			for _, l := range strings.Split(answer, "\n") {
				if d, ok := strings.CutPrefix(l, "data: "); ok && gjson.Get(d, "type").Str == "response.completed" {
					u = gjson.Get(d, "response.usage")
				}
			}
			if !u.Exists() {
				t.Fatalf("turn %d: no usage in %.300s", turn, answer)
			}
			in += u.Get("input_tokens").Int()
			cached += u.Get("input_tokens_details.cached_tokens").Int()
		}
		return float64(cached) / float64(in)
	}
	measure := func(perTurnKey bool) float64 {
		e := newEnv(t, threeKeys)
		e.up.SetDefault(upstreamtest.Behavior{PromptCache: true})
		return rate(e, &conversation{topic: "cache"}, perTurnKey)
	}
	before, after := measure(true), measure(false)
	t.Logf("prompt-cache hit rate of a 6-turn conversation without ids over 3 accounts: before %.0f%%, after %.0f%%", 100*before, 100*after)
	if after < 0.6 || after < before+0.2 {
		t.Errorf("hit rate before %.2f, after %.2f: derived affinity did not keep the cache", before, after)
	}
}

// derivedKey is the key request.read derives for body, sent to op.
func derivedKey(t *testing.T, op op, body string) string {
	t.Helper()
	r := &request{op: op, body: []byte(body), model: "gpt-5"}
	if !jsonscan.Scan(r.body, &r.scan) {
		t.Fatalf("not JSON: %.100s", body)
	}
	return derivedAffinity(r)
}

// Only the first affinityPrefix bytes of a first message and its length
// are digested: conversations that share a long pasted beginning are
// still told apart by their length, every later turn of one conversation
// gets its first turn's key, and the same beginning gets the same key.
func TestDerivedKeyBoundedPrefix(t *testing.T) {
	t.Parallel()
	file := strings.Repeat("x", 3*affinityPrefix) // longer than the prefix
	for _, c := range []struct {
		op    op
		shape string // %s: the first user message's text
		later string // a later turn appended to the conversation
	}{
		{opResponses, `{"model":"gpt-5","instructions":"Review.","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"%s"}]}%s]}`,
			`,{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Done."}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"And now?"}]}`},
		{opChat, `{"model":"gpt-5","messages":[{"role":"system","content":"Review."},{"role":"user","content":"%s"}%s]}`,
			`,{"role":"assistant","content":"Done."},{"role":"user","content":"And now?"}`},
	} {
		key := func(text, later string) string { return derivedKey(t, c.op, fmt.Sprintf(c.shape, text, later)) }
		one := key(file+" What does it do?", "")
		if one == "" {
			t.Fatalf("op %d: no key derived", c.op)
		}
		if again := key(file+" What does it do?", ""); again != one {
			t.Errorf("op %d: the same conversation got two keys", c.op)
		}
		if later := key(file+" What does it do?", c.later); later != one {
			t.Errorf("op %d: a later turn of the conversation got another key", c.op)
		}
		if other := key(file+" Is it safe?", ""); other == one {
			t.Errorf("op %d: first messages of the same prefix and different lengths got one key", c.op)
		}
		if other := key("y"+file[1:]+" What does it do?", ""); other == one {
			t.Errorf("op %d: first messages differing within the prefix got one key", c.op)
		}
	}
}

// The elements jsonscan.Scan notes stand in for a walk of the conversation:
// the key is the same with them as without, however far into the
// conversation the first user message is, and whatever comes before it.
func TestDerivedKeyFromNotedTurns(t *testing.T) {
	t.Parallel()
	dev := `{"role":"developer","content":"Rule %d."}`
	for _, before := range []int{0, 1, 7, 8, 9, 20} {
		var items []string
		for i := range before {
			items = append(items, fmt.Sprintf(dev, i), `{"type":"function_call_output","call_id":"c","output":"x"}`)
		}
		items = append(items, `{"content":[{"type":"input_text","text":"hi"}],"role":"user"}`, `{"role":"user","content":"later"}`)
		body := `{"model":"gpt-5","input":[` + strings.Join(items, ", ") + `],"messages":[]}`
		r := &request{op: opResponses, body: []byte(body), model: "gpt-5"}
		if !jsonscan.Scan(r.body, &r.scan) {
			t.Fatal("not JSON")
		}
		noted := derivedAffinity(r)
		r.scan.NTurns = 0 // as if nothing were noted: jsonscan.EachItem walks it all
		walked := derivedAffinity(r)
		if noted == "" || noted != walked {
			t.Errorf("%d developer messages first: key %q from the noted turns, %q walked", before, noted, walked)
		}
	}
}
