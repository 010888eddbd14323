package proxy

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/aliases"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/proxy/chat"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// docs/aliases.md Model aliases: a request for FROM goes out as TO on accounts
// of the alias's kind, the rest of the body byte for byte as the client
// sent it; the answer comes back as the upstream sent it.

// writeAliases replaces the home's aliases.json with list, as "rotor
// alias set" does, from outside the proxy.
func (e *env) writeAliases(list ...aliases.Alias) {
	e.t.Helper()
	st, err := aliases.Open(e.store.Dir())
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := st.Update(func([]aliases.Alias) ([]aliases.Alias, error) { return list, nil }); err != nil {
		e.t.Fatal(err)
	}
}

// useAliases writes list and has the proxy read it at once, for tests of
// what an alias does rather than of how soon it is seen (no watcher may
// run on e).
func (e *env) useAliases(list ...aliases.Alias) {
	e.t.Helper()
	e.writeAliases(list...)
	if err := e.aliases.Refresh(); err != nil {
		e.t.Fatal(err)
	}
}

// bodiesTo are the bodies of the requests the fake got on path with
// token, in order.
func bodiesTo(up *upstreamtest.Server, token, path string) [][]byte {
	var out [][]byte
	for _, r := range up.Requests() {
		if r.Token == token && r.Path == path {
			out = append(out, r.Body)
		}
	}
	return out
}

// renamed is body with its first "model":"from" spelled "model":"to".
func renamed(body, from, to string) string {
	return strings.Replace(body, `"model": "`+from+`"`, `"model": "`+to+`"`, 1)
}

// An odd but valid spacing the splice must keep, byte for byte.
const aliasedBody = `{ "model": "fast" , "stream":true,"input":"hi", "metadata":{"model":"fast"} }`

func TestAliasSendsTheTargetModelAndKeepsEveryOtherByte(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	e.useAliases(aliases.Alias{From: "fast", To: "gpt-5"})
	resp := e.do("POST", "/v1/responses", aliasedBody)
	body := readAll(t, resp)
	if resp.StatusCode != 200 || !strings.Contains(body, `"model":"gpt-5"`) {
		t.Fatalf("status %d: the answer is not the upstream's, for gpt-5: %.300s", resp.StatusCode, body)
	}
	got := bodiesTo(e.up, "k1", "/v1/responses")
	if want := renamed(aliasedBody, "fast", "gpt-5"); len(got) != 1 || string(got[0]) != want {
		t.Fatalf("upstream got %q\nwant         %q", got, want)
	}
	// The usage record names the model the client asked for.
	if recs := waitCompatUsage(t, e, 1); recs[0].Model != "fast" {
		t.Errorf("usage record model %q, want the client's %q", recs[0].Model, "fast")
	}
	// A model no alias names goes as it came.
	readAll(t, e.do("POST", "/v1/responses", streamBody))
	if got := bodiesTo(e.up, "k1", "/v1/responses"); len(got) != 2 || string(got[1]) != streamBody {
		t.Errorf("an unaliased body changed: %q", got)
	}
}

func TestAliasOnChatCompletionsBothKinds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k"}, {accounts.KindChatGPT, "cg"}})
	e.useAliases(aliases.Alias{From: "fast", To: "gpt-5"})
	const body = `{"model": "fast","messages":[{"role":"user","content":"hi"}],"stream":true}`

	// An API key's upstream gets the Chat Completions body, renamed.
	e.prefer(1)
	if resp := e.do("POST", "/v1/chat/completions", body); resp.StatusCode != 200 {
		t.Fatalf("api-key: status %d: %s", resp.StatusCode, readAll(t, resp))
	} else {
		readAll(t, resp)
	}
	if got := bodiesTo(e.up, "k", "/v1/chat/completions"); len(got) != 1 || string(got[0]) != renamed(body, "fast", "gpt-5") {
		t.Errorf("api-key upstream got %q", got)
	}

	// A ChatGPT account's upstream gets the Responses translation, renamed.
	// Another conversation: the same one would stay on account 1 (docs/aliases.md).
	other := strings.Replace(body, `"hi"`, `"hi there"`, 1)
	e.prefer(2)
	if resp := e.do("POST", "/v1/chat/completions", other); resp.StatusCode != 200 {
		t.Fatalf("chatgpt: status %d: %s", resp.StatusCode, readAll(t, resp))
	} else {
		readAll(t, resp)
	}
	translated, err := chat.ToResponses([]byte(other))
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Replace(translated, []byte(`"model":"fast"`), []byte(`"model":"gpt-5"`), 1)
	if got := bodiesTo(e.up, "cg", "/backend-api/codex/responses"); len(got) != 1 || !bytes.Equal(got[0], want) {
		t.Errorf("chatgpt upstream got %q\nwant %q", got, want)
	}
}

// An alias kept to one kind renames per attempt: a request that fails
// over from a ChatGPT account to an API key goes to the key as the client
// asked.
func TestAliasOfOneKindLeavesTheOtherKindAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "cg"}, {accounts.KindAPIKey, "k"}})
	e.useAliases(aliases.Alias{From: "fast", To: "gpt-5-codex", Kind: accounts.KindChatGPT})
	e.up.Set("cg", upstreamtest.Behavior{Status: 500})
	e.prefer(1)
	expectStream(t, e.do("POST", "/v1/responses", aliasedBody))
	e.expectCounts(map[string]int{"cg": 1, "k": 1})
	cg := bodiesTo(e.up, "cg", "/backend-api/codex/responses")
	if len(cg) != 1 || !bytes.Contains(cg[0], []byte(`"model": "gpt-5-codex"`)) {
		t.Errorf("the ChatGPT attempt got %q", cg)
	}
	if k := bodiesTo(e.up, "k", "/v1/responses"); len(k) != 1 || string(k[0]) != aliasedBody {
		t.Errorf("the API-key attempt got %q, want the client's body", k)
	}
}

func TestAliasOnASocketFrame(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	e.useAliases(aliases.Alias{From: "fast", To: "gpt-5"})
	c := e.openSocket()
	frame := strings.Replace(createFrame, `"model":"gpt-5"`, `"model":"fast"`, 1)
	if got := types(turn(t, c, frame)); got[len(got)-1] != "response.completed" {
		t.Fatalf("turn: %v", got)
	}
	if up := framesUp(e.up, "k1"); len(up) != 1 || string(up[0].Body) != createFrame {
		var bodies []string
		for _, r := range up {
			bodies = append(bodies, string(r.Body))
		}
		t.Errorf("upstream frames %q, want %s", bodies, createFrame)
	}
}

// modelIDs are the ids of an OpenAI model list.
func modelIDs(t *testing.T, e *env, query string) []string {
	t.Helper()
	resp := e.do("GET", "/v1/models"+query, "")
	body := readAll(t, resp)
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &list) != nil {
		t.Fatalf("status %d: %.300s", resp.StatusCode, body)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	return ids
}

func TestAliasesInTheModelList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "cg"}, {accounts.KindAPIKey, "k"}})
	tokens := map[int]string{1: "cg", 2: "k"}
	// through runs ask with account i alone. A process pin steers it there
	// whatever the scores say: their idle, bucket and quota terms move
	// with the real clock and with what each account's last answer said,
	// so e.prefer is only a near tie between these two.
	through := func(i int, ask func()) {
		t.Helper()
		e.sel.SetProcessPin(e.id(i))
		defer e.sel.SetProcessPin("")
		before := e.up.Count(tokens[i])
		ask()
		if got := e.up.Count(tokens[i]); got != before+1 {
			t.Fatalf("the list did not come from account %d (%d requests with its token, want %d)", i, got, before+1)
		}
	}
	plain := map[int][]string{}
	for _, i := range []int{1, 2} {
		through(i, func() { plain[i] = modelIDs(t, e, "") })
	}
	e.useAliases(aliases.Alias{From: "everywhere", To: "gpt-5"}, aliases.Alias{From: "codex-only", To: "gpt-5-codex", Kind: accounts.KindChatGPT})
	for i, want := range map[int][]string{1: {"codex-only", "everywhere"}, 2: {"everywhere"}} {
		var got []string
		through(i, func() { got = modelIDs(t, e, "") })
		if !slices.Equal(got, append(slices.Clone(plain[i]), want...)) {
			t.Errorf("account %d lists %v, want %v and then %v", i, got, plain[i], want)
		}
	}
	// Codex CLI's catalog stays the backend's own.
	through(1, func() {
		if body := readAll(t, e.do("GET", "/v1/models?client_version=0.169.0", "")); strings.Contains(body, "everywhere") {
			t.Errorf("Codex's catalog names an alias: %.300s", body)
		}
	})
}

// A running serve follows aliases.json within 1 s: a new alias, its
// removal, and a damaged file, which keeps the aliases in force.
func TestAliasChangesReachARunningServeWithinASecond(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	e.watch()
	sends := func(model string) bool {
		readAll(t, e.do("POST", "/v1/responses", aliasedBody))
		got := bodiesTo(e.up, "k1", "/v1/responses")
		return bytes.Contains(got[len(got)-1], []byte(`"model": "`+model+`"`))
	}
	e.writeAliases(aliases.Alias{From: "fast", To: "gpt-5"})
	withinWatch(t, "the serve to use the new alias", func() bool { return sends("gpt-5") }, e)

	path := filepath.Join(e.store.Dir(), home.AliasesFile)
	if err := os.WriteFile(path, []byte(`{"version":1,"aliases":[`), 0o600); err != nil {
		t.Fatal(err)
	}
	e.tick()
	if !sends("gpt-5") {
		t.Error("a damaged aliases.json dropped the aliases in force")
	}

	// Mended by hand: removed, then written with no alias.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	e.writeAliases()
	withinWatch(t, "the serve to drop the alias", func() bool { return sends("fast") }, e)
}
