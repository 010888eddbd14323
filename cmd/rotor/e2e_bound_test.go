package main

// End-to-end tests of docs/codex.md with the real Codex CLI: a conversation
// whose upstream mints account-bound content (reasoning's
// encrypted_content, a compaction item) moves to a second account in the
// middle of a session, and Codex finishes its turn. The fake upstream binds
// every blob to the account that minted it and refuses any other account's
// (proxy/upstreamtest, "The backend's own rules"), so these pass only when
// rotor takes out what the new account cannot read, or makes it again
// there.
//
// Run them alone with: go test -run TestE2ECodexSessionMoves ./cmd/rotor/
// They skip, like the other client tests, when npm cannot reach its registry.

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

const (
	// e2eBoundPrompt is the first turn's prompt; e2eBoundFollowUp the
	// second's, where there is one.
	e2eBoundPrompt   = "what is the weather in Paris?"
	e2eBoundFollowUp = "and in Lyon?"
	// e2eBoundSummary opens the reasoning summary of
	// sse/reasoning_tool_call.sse, the reasoning before the tool call.
	e2eBoundSummary = "**Checking the weather**"
	// e2eIncludeEncrypted is the include value that makes the upstream mint
	// encrypted_content on reasoning items.
	e2eIncludeEncrypted = "reasoning.encrypted_content"
	// e2eCompactLimit is the model_auto_compact_token_limit of the
	// compaction test: above the usage of the tool call's answer
	// (sse/reasoning_tool_call.sse, 178 tokens), so the first turn does not
	// compact in its middle, and below that of the final answer
	// (sse/reasoning_summary.sse, 1353), so the next turn compacts first.
	e2eCompactLimit = "1000"
)

// e2eBoundKeys are the two accounts of a test, as API keys: the fake binds
// a blob to the bearer token that minted it.
var e2eBoundKeys = []string{"sk-e2e-bound-one", "sk-e2e-bound-two"}

// e2eBoundBehavior is each account's upstream: the first answer of a turn
// reasons (its summary, and encrypted_content when asked for) and then
// calls get_weather; the answer after the tool's result reasons and says
// e2eHello. After limitAfter Responses requests the account is at its
// usage limit.
func e2eBoundBehavior(limitAfter int) upstreamtest.Behavior {
	return upstreamtest.Behavior{
		ToolRoundTrip: true,
		ToolStream:    "reasoning_tool_call.sse",
		Stream:        "reasoning_summary.sse",
		LimitAfter:    limitAfter,
	}
}

// e2eBoundFlags are e2eCodexFlags without --ephemeral: Codex then keeps its
// session under CODEX_HOME/sessions, which holds every item as Codex
// received it, blobs included (the only view of what the upstream answered
// over a socket), and which `codex exec resume` continues.
func e2eBoundFlags() []string {
	var flags []string
	for _, f := range e2eCodexFlags {
		if f != "--ephemeral" {
			flags = append(flags, f)
		}
	}
	return flags
}

// getenv is the value of key in the world's environment.
func (w *e2eWorld) getenv(key string) string {
	for _, kv := range w.env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// e2eBlob is one encrypted_content, and the item carrying it.
type e2eBlob struct {
	typ, blob string
	item      gjson.Result
}

// e2eBlobsIn returns every encrypted_content found in v, at any depth.
func e2eBlobsIn(v gjson.Result) []e2eBlob {
	var out []e2eBlob
	var walk func(v gjson.Result)
	walk = func(v gjson.Result) {
		if v.IsObject() {
			if b := v.Get("encrypted_content"); b.Type == gjson.String {
				out = append(out, e2eBlob{typ: v.Get("type").Str, blob: b.Str, item: v})
			}
		}
		if v.IsObject() || v.IsArray() {
			v.ForEach(func(_, c gjson.Result) bool {
				walk(c)
				return true
			})
		}
	}
	walk(v)
	return out
}

// e2eRolloutBlobs returns every encrypted_content in Codex's session files
// under codexHome: what the upstream answered, as Codex kept it.
func e2eRolloutBlobs(t *testing.T, codexHome string) []e2eBlob {
	t.Helper()
	var out []e2eBlob
	err := filepath.WalkDir(filepath.Join(codexHome, "sessions"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".jsonl") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for l := range strings.SplitSeq(string(data), "\n") {
			if gjson.Valid(l) {
				out = append(out, e2eBlobsIn(gjson.Parse(l))...)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading Codex's session files: %v", err)
	}
	return out
}

// e2eIdentity is the account a recorded request spoke for, as the fake
// binds blobs: its chatgpt-account-id, else its bearer token.
func e2eIdentity(r upstreamtest.Recorded) string {
	if id := strings.TrimSpace(r.Header.Get("chatgpt-account-id")); id != "" {
		return id
	}
	return r.Token
}

// e2eModelRequests are the recorded requests that carry a conversation:
// Responses requests (POSTs and socket frames) and compactions.
func e2eModelRequests(up *upstreamtest.Server) []upstreamtest.Recorded {
	var out []upstreamtest.Recorded
	for _, r := range up.Requests() {
		if (r.Method == "POST" || r.Method == "WS") && (r.Path == "/v1/responses" || r.Path == "/v1/responses/compact") {
			out = append(out, r)
		}
	}
	return out
}

// e2eCheckReadable fails the test for every blob an account was sent that
// it cannot read: the request that carries one is refused by the backend.
func e2eCheckReadable(t *testing.T, up *upstreamtest.Server, calls []upstreamtest.Recorded) {
	t.Helper()
	for i, c := range calls {
		for _, b := range e2eBlobsIn(gjson.GetBytes(c.Body, "input")) {
			if owner, ok := up.Owner(b.blob); !ok || owner != e2eIdentity(c) {
				t.Errorf("request %d (%s %s) went to %s with a %s blob it cannot read (minted for %q, known %v)",
					i, c.Method, c.Path, c.Token, b.typ, owner, ok)
			}
		}
	}
}

// e2eItems indexes a request's input items by type.
func e2eItems(body []byte) map[string][]gjson.Result {
	items := map[string][]gjson.Result{}
	gjson.GetBytes(body, "input").ForEach(func(_, it gjson.Result) bool {
		items[it.Get("type").Str] = append(items[it.Get("type").Str], it)
		return true
	})
	return items
}

// e2eHasUserText reports whether a request's input carries a user message
// with text.
func e2eHasUserText(body []byte, text string) bool {
	for _, m := range e2eItems(body)["message"] {
		if m.Get("role").Str == "user" && strings.Contains(m.Get("content").Raw, text) {
			return true
		}
	}
	return false
}

// compactionTypes are the item types of a compaction (docs/codex.md).
var e2eCompactionTypes = []string{"compaction", "compaction_summary", "context_compaction"}

// e2eCompactions are the compaction items of a request's input.
func e2eCompactions(body []byte) []gjson.Result {
	items := e2eItems(body)
	var out []gjson.Result
	for _, typ := range e2eCompactionTypes {
		out = append(out, items[typ]...)
	}
	return out
}

// A session whose first account reaches its usage limit right after the
// model reasoned and called a tool: the request that carries the tool's
// result moves to the second account. The first account minted the
// reasoning's encrypted_content (Codex asks for it); the second cannot read
// it, so rotor must send the conversation without it, the reasoning's
// summary kept. Over Codex's socket (rotor exec's default) Codex sends only
// the tool's result after previous_response_id and rotor rebuilds the whole
// conversation from what it relayed; over HTTP Codex sends it all, the
// first account's blob included.
func TestE2ECodexSessionMovesWithItsReasoning(t *testing.T) {
	cache := e2eClients(t)
	for _, tc := range []struct {
		transport string
		flags     []string
	}{
		{"websocket", nil},
		// A later -c wins over rotor exec's supports_websockets=true.
		{"http", []string{"-c", "model_providers.rotor.supports_websockets=false"}},
	} {
		t.Run(tc.transport, func(t *testing.T) {
			w := newE2EWorld(t)
			w.useClients(cache)
			for i, k := range e2eBoundKeys {
				w.addKey([]string{"one", "two"}[i], k)
				// Whichever account answers first is at its limit for the
				// next request.
				w.up.Set(k, e2eBoundBehavior(1))
			}
			args := append([]string{"exec", "--log-format", "json", "--log-level", "info", "--", "codex"}, e2eBoundFlags()...)
			args = append(append(args, tc.flags...), e2eBoundPrompt)
			r := w.rotor(e2eCodexTimeout, "", args...)
			if r.code != 0 || !strings.Contains(r.stdout, e2eHello) {
				e2eCheckReadable(t, w.up, e2eResponses(w.up)) // the likely why
				t.Fatalf("codex exec did not finish its turn: %v", r)
			}

			// rotor moved the session: two forwarded requests, on two
			// accounts, over the transport under test.
			e2eMovedSession(t, r.stderr, tc.transport)

			// On the wire: the first account answered, was refused the next
			// request at its limit, and the second served that request.
			calls := e2eResponses(w.up)
			if len(calls) < 3 {
				t.Fatalf("want at least 3 Responses requests upstream (the tool call, the limit, the moved request), got %d", len(calls))
			}
			first, moved := calls[0], calls[len(calls)-1]
			if first.Token == moved.Token {
				t.Fatalf("the last request went to the account of the first (%s)", first.Token)
			}
			for i, c := range calls {
				if !gjson.GetBytes(c.Body, `include.#(=="`+e2eIncludeEncrypted+`")`).Exists() {
					t.Errorf("request %d did not ask for %s: include %s", i, e2eIncludeEncrypted, gjson.GetBytes(c.Body, "include").Raw)
				}
			}

			// The first account minted the blob of the reasoning before the
			// tool call: Codex kept it in its session (with the second
			// account's, of the final answer's reasoning), and over HTTP sent
			// it back to the first account.
			minted := 0
			for _, b := range e2eRolloutBlobs(t, w.getenv("CODEX_HOME")) {
				owner, ok := w.up.Owner(b.blob)
				switch {
				case b.typ == "reasoning" && strings.Contains(b.item.Get("summary").Raw, e2eBoundSummary):
					minted++
					if !ok || owner != first.Token {
						t.Errorf("Codex kept the tool call's reasoning with a blob minted for %q (known %v), want the first account %s", owner, ok, first.Token)
					}
				case !ok || owner != first.Token && owner != moved.Token:
					t.Errorf("Codex kept a %s blob minted for %q (known %v), by neither account", b.typ, owner, ok)
				}
			}
			if minted == 0 {
				t.Errorf("Codex's session holds no encrypted_content for the tool call's reasoning: the first account minted none")
			}
			sentBack := 0
			for _, c := range calls[1:] {
				if c.Token != first.Token {
					continue
				}
				for _, b := range e2eBlobsIn(gjson.GetBytes(c.Body, "input")) {
					if owner, _ := w.up.Owner(b.blob); b.typ == "reasoning" && owner == first.Token {
						sentBack++
					}
				}
			}
			if tc.transport == "http" && sentBack == 0 {
				t.Errorf("over HTTP Codex did not send the first account's reasoning blob back to it")
			}

			// No account was sent a blob it cannot read: above all, the moved
			// request carries none of the first account's.
			e2eCheckReadable(t, w.up, calls)

			// And the moved request still carries the conversation: the
			// prompt, the tool call and its result, and the reasoning's
			// summary, without the id that only the first account could
			// look up.
			items := e2eItems(moved.Body)
			if !e2eHasUserText(moved.Body, e2eBoundPrompt) {
				t.Errorf("the moved request lacks the user's prompt")
			}
			if len(items["function_call"]) == 0 || items["function_call"][0].Get("call_id").Str != e2eChatCallID ||
				len(items["function_call_output"]) == 0 || items["function_call_output"][0].Get("call_id").Str != e2eChatCallID {
				t.Errorf("the moved request lacks the tool call and its result: %d function_call, %d function_call_output",
					len(items["function_call"]), len(items["function_call_output"]))
			}
			if p := gjson.GetBytes(moved.Body, "previous_response_id"); p.Exists() {
				t.Errorf("the moved request names previous_response_id %s, which only the first account's socket knows", p.Raw)
			}
			summarized := false
			for _, rs := range items["reasoning"] {
				if strings.Contains(rs.Get("summary").Raw, e2eBoundSummary) {
					summarized = true
					if rs.Get("id").Exists() && !rs.Get("encrypted_content").Exists() {
						t.Errorf("the moved reasoning keeps its id without its blob, a lookup the second account answers 404: %s", rs.Raw)
					}
				}
			}
			if !summarized {
				t.Errorf("the moved request lost the reasoning's summary (%q): %d reasoning items", e2eBoundSummary, len(items["reasoning"]))
			}
		})
	}
}

// e2eShellQuote quotes s for sh.
func e2eShellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'" }

// e2eCodexTurns writes an executable named codex that runs the real Codex
// (the one on PATH) once per turn, one after the other, stopping at the
// first that fails: each run gets the wrapper's arguments, then the turn's.
// Run as `rotor exec -- <wrapper> exec ...`, it is given rotor exec's -c
// flags for Codex like Codex itself (rotor exec looks at the command's
// name), and the turns of one session share one rotor, which remembers
// who minted each blob it relayed.
func e2eCodexTurns(t *testing.T, turns ...[]string) string {
	t.Helper()
	script := "#!/bin/sh\nset -e\n"
	for _, turn := range turns {
		script += `codex "$@"`
		for _, a := range turn {
			script += " " + e2eShellQuote(a)
		}
		script += "\n"
	}
	path := filepath.Join(t.TempDir(), "codex")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// A session compacts on its first account, which then reaches its usage
// limit: the next request carries the first account's compaction item and
// moves to the second account. rotor relayed that compaction, so it makes
// it again on the second account and sends the new item in its place
// (docs/codex.md); the conversation keeps its summarized context, and Codex
// finishes its turn.
//
// The pinned Codex compacts only through compaction v2: a Responses request
// (on its socket, or a POST) whose input ends with a compaction_trigger
// item, whose answer must hold exactly one compaction item; its feature
// remote_compaction_v2 is "removed" and always on, so it never calls
// /responses/compact. It compacts when a turn starts with the session's
// usage at model_auto_compact_token_limit, or in the middle of a turn after
// an answer that needs a follow-up; the second would compact again after
// every tool call here (the fake calls the tool again after a compaction,
// whose last input item is not a tool result), so the session is two
// turns, `codex exec` and `codex exec resume --last`, under one rotor exec
// (e2eCodexTurns):
//
//	turn 1: the tool call and the answer (e2eCompactLimit lies between
//	        their usages), on the first account, A;
//	turn 2: the compaction, on A (its third request); the turn's request
//	        with A's compaction item: A is at its limit, it moves to B;
//	        B's tool call and answer.
func TestE2ECodexSessionMovesWithItsCompaction(t *testing.T) {
	cache := e2eClients(t)
	w := newE2EWorld(t)
	w.useClients(cache)
	for i, k := range e2eBoundKeys {
		w.addKey([]string{"one", "two"}[i], k)
		// Session affinity keeps both turns on the account that answers
		// first until its limit; the other serves the rest of turn 2.
		w.up.Set(k, e2eBoundBehavior(3))
	}
	codex := e2eCodexTurns(t, []string{e2eBoundPrompt}, []string{"resume", "--last", e2eBoundFollowUp})
	args := append([]string{"exec", "--log-format", "json", "--log-level", "info", "--", codex}, e2eBoundFlags()...)
	args = append(args, "-c", "model_auto_compact_token_limit="+e2eCompactLimit)
	r := w.rotor(2*e2eCodexTimeout, "", args...)
	if r.code != 0 || strings.Count(r.stdout, e2eHello) < 2 {
		e2eCheckReadable(t, w.up, e2eModelRequests(w.up)) // the likely why
		if strings.Contains(r.stdout+r.stderr, "expected exactly one compaction output item") {
			t.Fatalf("Codex compacted through compaction v2 (a Responses request ending in a compaction_trigger item) "+
				"and the answer held no compaction item: the fake upstream answers compaction_trigger like any "+
				"other request, so Codex failed the turn: %v", r)
		}
		t.Fatalf("the two turns did not both finish: %v", r)
	}

	calls := e2eModelRequests(w.up)
	// Codex compacted: a compaction v2 request, or the legacy route.
	compacted := -1
	for i, c := range calls {
		in := gjson.GetBytes(c.Body, "input").Array()
		if c.Path == "/v1/responses/compact" || len(in) > 0 && in[len(in)-1].Get("type").Str == "compaction_trigger" {
			compacted = i
			break
		}
	}
	if compacted < 0 {
		t.Fatalf("Codex made no compaction (no compaction_trigger request, no /responses/compact) in %d requests", len(calls))
	}
	a := calls[compacted].Token
	if !gjson.GetBytes(calls[compacted].Body, `include.#(=="`+e2eIncludeEncrypted+`")`).Exists() && calls[compacted].Path == "/v1/responses" {
		t.Errorf("the compaction request did not ask for %s", e2eIncludeEncrypted)
	}

	// Codex kept the compaction A minted, and sent it back to A, which
	// refused the request at its limit.
	var kept int
	for _, b := range e2eRolloutBlobs(t, w.getenv("CODEX_HOME")) {
		for _, typ := range e2eCompactionTypes {
			if b.typ == typ {
				kept++
				if owner, ok := w.up.Owner(b.blob); !ok || owner != a {
					t.Errorf("Codex kept a compaction minted for %q (known %v), want the account that compacted, %s", owner, ok, a)
				}
			}
		}
	}
	if kept == 0 {
		t.Errorf("Codex's session holds no compaction item")
	}
	var sentBack bool
	var moved []upstreamtest.Recorded
	for _, c := range calls[compacted+1:] {
		if c.Token != a {
			moved = append(moved, c)
			continue
		}
		for _, it := range e2eCompactions(c.Body) {
			if owner, _ := w.up.Owner(it.Get("encrypted_content").Str); owner == a {
				sentBack = true
			}
		}
	}
	if !sentBack {
		t.Errorf("no request after the compaction carried A's compaction to A (%s)", a)
	}
	if len(moved) == 0 {
		t.Fatalf("no request after the compaction went to the second account: %s", r.stderr)
	}

	// On the second account the compaction is its own, made again: not
	// A's (which it cannot read), and not a note that the context was cut.
	// rotor's remake is a compaction request of its own to the second
	// account; the requests of the turn that carry the conversation
	// whole carry the remade item (those naming a previous response on
	// the second account's own socket carry only what is new).
	remakes, whole := 0, 0
	for i, c := range moved {
		in := gjson.GetBytes(c.Body, "input").Array()
		if len(in) > 0 && in[len(in)-1].Get("type").Str == "compaction_trigger" {
			remakes++
			continue
		}
		if gjson.GetBytes(c.Body, "previous_response_id").Str != "" {
			continue
		}
		whole++
		cmps := e2eCompactions(c.Body)
		if len(cmps) == 0 {
			t.Errorf("moved request %d (to %s) carries no compaction item: the summarized context is gone", i, c.Token)
		}
		for _, it := range cmps {
			owner, ok := w.up.Owner(it.Get("encrypted_content").Str)
			if !ok || owner != e2eIdentity(c) {
				t.Errorf("moved request %d carries a %s minted for %q (known %v), want one the second account (%s) minted",
					i, it.Get("type").Str, owner, ok, c.Token)
			}
		}
		if !e2eHasUserText(c.Body, e2eBoundFollowUp) {
			t.Errorf("moved request %d lacks the second turn's prompt", i)
		}
	}
	if remakes != 1 || whole == 0 {
		t.Errorf("to the second account: %d compactions made again (want 1), %d whole requests (want some)", remakes, whole)
	}
	e2eCheckReadable(t, w.up, calls)

	logs := e2eRequestLogs(r.stderr)
	remade := strings.Contains(r.stderr, "compaction made again on the new account")
	for _, l := range logs {
		switch l.Get("context").Str {
		case "recompacted":
			remade = true
		case "cut":
			t.Errorf("rotor cut the context instead of making the compaction again: %s", l.Raw)
		}
	}
	if !remade {
		t.Errorf("rotor logged no compaction made again on the new account (context \"recompacted\"): %s", r.stderr)
	}
	if !strings.Contains(r.stderr, "failover: trying another account") {
		t.Errorf("no failover logged")
	}
}

// e2eMovedSession checks rotor's log of a Codex turn (stderr) for a
// session moved mid-turn: at least two forwarded requests, all over
// transport, the last on another account than the first, and the
// failover logged.
func e2eMovedSession(t *testing.T, stderr, transport string) {
	t.Helper()
	var forwarded []gjson.Result
	for _, l := range e2eRequestLogs(stderr) {
		if !l.Get("account").Exists() {
			continue
		}
		forwarded = append(forwarded, l)
		if got := l.Get("transport").Str; got != transport {
			t.Errorf("a request came over %q, want %q: %s", got, transport, l.Raw)
		}
	}
	if len(forwarded) < 2 {
		t.Fatalf("want the tool call and the answer as two requests over %s, got %d: %s", transport, len(forwarded), stderr)
	}
	if a, b := forwarded[0].Get("account").Int(), forwarded[len(forwarded)-1].Get("account").Int(); a == b {
		t.Errorf("no failover: the session stayed on account %d", a)
	}
	if !strings.Contains(stderr, "failover: trying another account") {
		t.Errorf("no failover logged")
	}
}
