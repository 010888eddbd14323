package proxy

import (
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// Every way a request can come and go keeps the cached input tokens the
// recorded fixtures report (testdata/sse/hello.sse for Responses and
// Codex, testdata/chat/hello*.{sse,json} for Chat Completions'
// prompt_tokens_details.cached_tokens): both APIs, streamed or not, on
// both account kinds, and a WebSocket frame. The report's hit rate is
// cached ÷ input of the traffic sent (docs/cost.md).
func TestPromptCacheTokensOnEveryPath(t *testing.T) {
	t.Parallel()
	for _, kind := range []accounts.Kind{accounts.KindAPIKey, accounts.KindChatGPT} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, []acct{{kind, "t1"}})
			readAll(t, e.do("POST", "/v1/responses", streamBody))
			readAll(t, e.do("POST", "/v1/responses", `{"model":"gpt-5","stream":false,"input":"hi"}`))
			readAll(t, e.do("POST", "/v1/chat/completions", chatStreamBody))
			readAll(t, e.do("POST", "/v1/chat/completions", chatPlainBody))
			turn(t, e.openSocket(), createFrame)
			recs := waitCompatUsage(t, e, 5)
			var sent usage.Tokens
			for _, r := range recs {
				if r.Tokens == nil || r.Tokens.Input != 1280 || r.Tokens.Cached != 1024 {
					t.Errorf("record %+v tokens %+v, want 1280 input with 1024 cached", r, r.Tokens)
					continue
				}
				sent.Add(*r.Tokens)
			}
			rep, err := usage.Summarize(e.store.Dir(), time.Now().Add(time.Second), usage.ReportWindows)
			if err != nil {
				t.Fatal(err)
			}
			want := float64(sent.Cached) / float64(sent.Input)
			for _, w := range rep.Windows {
				acct, _ := w.ByAccount[e.id(1)].Tokens.CacheHitRate()
				model, _ := w.ByModel["gpt-5"].Tokens.CacheHitRate()
				if acct != want || model != want {
					t.Errorf("%s: hit rate %v by account, %v by model; want %v", w.Window.Name, acct, model, want)
				}
			}
		})
	}
}

// The usage record says what session affinity did: bound a new
// conversation, kept it on its account, or moved it when that account
// failed.
func TestPromptCacheAffinityKeptAndMoved(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoAPIKeys())
	session := []string{"session_id", "conversation-1"}
	readAll(t, e.do("POST", "/v1/responses", streamBody, session...))
	readAll(t, e.do("POST", "/v1/responses", streamBody, session...))
	readAll(t, e.do("POST", "/v1/responses", streamBody)) // no conversation
	recs := waitCompatUsage(t, e, 3)
	bound := recs[0].AccountID
	token := map[string]string{e.id(1): "bad", e.id(2): "good"}[bound]
	e.up.Set(token, upstreamtest.Behavior{Status: 500})
	readAll(t, e.do("POST", "/v1/responses", streamBody, session...))
	recs = waitCompatUsage(t, e, 4)
	var got []string
	for _, r := range recs {
		got = append(got, r.Affinity)
	}
	want := []string{usage.AffinityNew, usage.AffinityKept, "", usage.AffinityMoved}
	if len(got) != len(want) {
		t.Fatalf("affinity %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("affinity %q, want %q", got, want)
			break
		}
	}
	if recs[3].AccountID == bound {
		t.Errorf("the moved request stayed on %s", bound)
	}
}
