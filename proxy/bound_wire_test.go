package proxy

import (
	"bufio"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// Wire tests of docs/codex.md against a fake upstream that binds reasoning and
// compaction blobs to the account that minted them, as the ChatGPT
// backend does: a move that sent another account's blob would be refused.

const (
	userOne = `{"type":"message","role":"user","content":[{"type":"input_text","text":"one"}]}`
	userTwo = `{"type":"message","role":"user","content":[{"type":"input_text","text":"two"}]}`
)

// codexTurn is a Responses request as Codex sends one: its history in
// input, reasoning asked for with its encrypted content, nothing stored.
func codexTurn(items ...string) string {
	return `{"model":"gpt-5-codex","instructions":"","stream":true,"store":false,` +
		`"include":["reasoning.encrypted_content"],"input":[` + strings.Join(items, ",") + `]}`
}

// outputItems are the items of a streamed answer's output_item.done
// events, as a client keeps them for its next request.
func outputItems(t *testing.T, resp *http.Response) []string {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
	}
	var items []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && gjson.Get(d, "type").Str == "response.output_item.done" {
			items = append(items, gjson.Get(d, "item").Raw)
		}
	}
	return items
}

// servedBy is the token of the account the upstream's last Responses
// request (HTTP or frame) came with.
func servedBy(t *testing.T, up *upstreamtest.Server) string {
	t.Helper()
	reqs := up.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].Method != http.MethodGet {
			return reqs[i].Token
		}
	}
	t.Fatal("no request reached the upstream")
	return ""
}

// other is the token of the pool {t1, t2} that is not tok.
func other(tok string) string {
	if tok == "t1" {
		return "t2"
	}
	return "t1"
}

// blobsIn are the encrypted_content values of a body's input items.
func blobsIn(body []byte) []string {
	var out []string
	for _, it := range gjson.GetBytes(body, "input").Array() {
		if b := it.Get("encrypted_content"); b.Exists() {
			out = append(out, b.Str)
		}
	}
	return out
}

// checkReadableBy fails unless every blob in body was minted by the
// account of token.
func checkReadableBy(t *testing.T, up *upstreamtest.Server, token string, body []byte) {
	t.Helper()
	for _, b := range blobsIn(body) {
		if owner, _ := up.Owner(b); owner != "cg-"+token {
			t.Errorf("%s was sent a blob of %q: %.200s", token, owner, body)
		}
	}
}

// lastBodyOf is the body of the last non-handshake request with token.
func lastBodyOf(t *testing.T, up *upstreamtest.Server, token, path string) []byte {
	t.Helper()
	var last []byte
	for _, r := range up.Requests() {
		if r.Token == token && r.Method != http.MethodGet && (path == "" || r.Path == path) {
			last = r.Body
		}
	}
	if last == nil {
		t.Fatalf("%s got no request on %q", token, path)
	}
	return last
}

func TestMoveTakesOutTheOtherAccountsReasoning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "t1"}, {accounts.KindChatGPT, "t2"}})
	e.up.SetDefault(upstreamtest.Behavior{Stream: "reasoning_summary.sse"})
	out := outputItems(t, e.do("POST", "/v1/responses", codexTurn(userOne), "session_id", "s-move"))
	first := servedBy(t, e.up)
	if blobs := blobsIn([]byte(`{"input":[` + strings.Join(out, ",") + `]}`)); len(blobs) != 1 {
		t.Fatalf("the first answer minted %d blobs: %v", len(blobs), out)
	}
	// The first account reaches its limit; the conversation, its blob
	// included as Codex sends it, moves to the second.
	e.up.Set(first, upstreamtest.Behavior{Status: 429})
	history := append(append([]string{userOne}, out...), userTwo)
	resp := e.do("POST", "/v1/responses", codexTurn(history...), "session_id", "s-move")
	if ev := sseEvents(t, resp.Body); resp.StatusCode != 200 || ev[len(ev)-1] != "response.completed" {
		t.Fatalf("the moved request: status %d, events %v", resp.StatusCode, ev)
	}
	second := other(first)
	if n := len(bodiesTo(e.up, second, "/backend-api/codex/responses")); n != 1 {
		t.Fatalf("%s got %d requests: the first was refused", second, n)
	}
	body := lastBodyOf(t, e.up, second, "")
	checkReadableBy(t, e.up, second, body)
	items := gjson.GetBytes(body, "input").Array()
	var kinds []string
	for _, it := range items {
		kinds = append(kinds, it.Get("type").Str+"/"+it.Get("role").Str)
	}
	if !slices.Equal(kinds, []string{"message/user", "reasoning/", "message/assistant", "message/user"}) {
		t.Fatalf("the moved conversation: %v", kinds)
	}
	if r := items[1]; r.Get("summary.0.text").Str == "" || r.Get("id").Exists() || r.Get("status").Exists() {
		t.Errorf("the reasoning as moved: %s", r.Raw)
	}
	if !gjson.GetBytes(body, "include").Exists() {
		t.Error("include was dropped: the new account mints no reasoning of its own")
	}
	if st := e.state(indexOf(e, second)); !st.CooldownUntil.IsZero() {
		t.Errorf("the second account was charged: %+v", st)
	}
}

// indexOf is the index, as users number it, of the account of token.
func indexOf(e *env, token string) int {
	if token == "t1" {
		return 1
	}
	return 2
}

func TestSocketMoveTakesOutTheOtherAccountsReasoning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "t1"}, {accounts.KindChatGPT, "t2"}})
	e.up.SetDefault(upstreamtest.Behavior{Stream: "reasoning_summary.sse"})
	c := e.openSocket("session-id", "s-socket-move")
	frame := func(prev string, items ...string) string {
		f := `{"type":"response.create","model":"gpt-5-codex","instructions":"","store":false,"include":["reasoning.encrypted_content"],`
		if prev != "" {
			f += `"previous_response_id":"` + prev + `",`
		}
		return f + `"input":[` + strings.Join(items, ",") + `]}`
	}
	got := turn(t, c, frame("", userOne))
	if types(got)[len(got)-1] != "response.completed" {
		t.Fatalf("first turn: %v", types(got))
	}
	first := servedBy(t, e.up)
	e.up.Set(first, upstreamtest.Behavior{Status: 429})
	prev := gjson.GetBytes(got[len(got)-1].data, "response.id").Str
	got = turn(t, c, frame(prev, userTwo))
	if types(got)[len(got)-1] != "response.completed" {
		t.Fatalf("the moved turn: %s", got[len(got)-1].data)
	}
	second := other(first)
	ups := framesUp(e.up, second)
	if len(ups) != 1 {
		t.Fatalf("%s got %d frames", second, len(ups))
	}
	body := ups[0].Body
	checkReadableBy(t, e.up, second, body)
	if n := len(gjson.GetBytes(body, "input").Array()); n != 4 || gjson.GetBytes(body, "previous_response_id").Exists() {
		t.Errorf("the conversation did not go up whole (%d items): %s", n, body)
	}
}

func TestMoveMakesTheCompactionAgain(t *testing.T) {
	t.Parallel()
	var log syncBuffer
	e := newEnvLogged(t, []acct{{accounts.KindChatGPT, "t1"}, {accounts.KindChatGPT, "t2"}}, &log)
	compact := `{"model":"gpt-5-codex","instructions":"","input":[` + userOne + `]}`
	resp := e.do("POST", "/v1/responses/compact", compact, "session_id", "s-compact")
	body := readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("compact: %d %s", resp.StatusCode, body)
	}
	first := servedBy(t, e.up)
	out := gjson.Get(body, "output").Array()
	var history []string
	for _, it := range out {
		history = append(history, it.Raw)
	}
	e.up.Set(first, upstreamtest.Behavior{Status: 429})
	history = append(history, userTwo)
	resp = e.do("POST", "/v1/responses", codexTurn(history...), "session_id", "s-compact")
	if ev := sseEvents(t, resp.Body); resp.StatusCode != 200 || ev[len(ev)-1] != "response.completed" {
		t.Fatalf("the moved request: status %d, events %v", resp.StatusCode, ev)
	}
	second := other(first)
	if n := len(bodiesTo(e.up, second, "/backend-api/codex/responses/compact")); n != 1 {
		t.Fatalf("%s was asked %d times to compact again", second, n)
	}
	if n := len(bodiesTo(e.up, second, "/backend-api/codex/responses")); n != 1 {
		t.Fatalf("%s got %d requests: the first was refused", second, n)
	}
	moved := lastBodyOf(t, e.up, second, "/backend-api/codex/responses")
	checkReadableBy(t, e.up, second, moved)
	if blobs := blobsIn(moved); len(blobs) != 1 || gjson.GetBytes(moved, `input.#(type=="compaction")`).Raw == "" {
		t.Fatalf("the moved request has no compaction of its own: %s", moved)
	}
	// The next turn carries the same old item: the remake is reused.
	resp = e.do("POST", "/v1/responses", codexTurn(history...), "session_id", "s-compact")
	readAll(t, resp)
	if n := len(bodiesTo(e.up, second, "/backend-api/codex/responses/compact")); n != 1 {
		t.Errorf("the compaction was made again %d times", n)
	}
	if recs := waitCompatUsage(t, e, 3); slices.ContainsFunc(recs, func(r usage.Record) bool { return r.Context != "" }) {
		t.Errorf("context was cut: %+v", recs)
	}
	eventually(t, 3*time.Second, "the remake logged", func() bool { return strings.Contains(log.String(), `"context":"recompacted"`) })
}

func TestCompactionRotorNeverSawIsCut(t *testing.T) {
	t.Parallel()
	var log syncBuffer
	e := newEnvLogged(t, []acct{{accounts.KindChatGPT, "t2"}}, &log)
	foreign := `{"type":"compaction","id":"cmp_x","encrypted_content":"` + e.up.Mint("cg-t1") + `"}`
	resp := e.do("POST", "/v1/responses", codexTurn(userOne, foreign, userTwo))
	if ev := sseEvents(t, resp.Body); resp.StatusCode != 200 || ev[len(ev)-1] != "response.completed" {
		t.Fatalf("status %d, events %v", resp.StatusCode, ev)
	}
	bodies := bodiesTo(e.up, "t2", "/backend-api/codex/responses")
	if len(bodies) != 2 {
		t.Fatalf("want the refused request and its retry, got %d", len(bodies))
	}
	note := gjson.GetBytes(bodies[1], "input.1")
	if len(blobsIn(bodies[1])) != 0 || note.Get("role").Str != "developer" || !strings.Contains(note.Get("content.0.text").Str, "another account") {
		t.Fatalf("the retry: %s", bodies[1])
	}
	recs := waitCompatUsage(t, e, 1)
	if recs[0].Context != usage.ContextCut || recs[0].Status != 200 {
		t.Errorf("usage record: %+v", recs[0])
	}
	eventually(t, 3*time.Second, "the cut logged", func() bool { return strings.Contains(log.String(), `"context":"cut"`) })
	if st := e.state(1); !st.CooldownUntil.IsZero() || !st.RateLimitedUntil.IsZero() {
		t.Errorf("the account was charged: %+v", st)
	}
}

// A blob rotor did not know to be foreign is found by its refusal, in each
// shape the backend refuses it: one retry without it, on the same
// account, nobody charged; the conversation's next request does not pay
// for the refusal again.
func TestUnknownBlobIsRetriedOnceWithout(t *testing.T) {
	t.Parallel()
	for _, shape := range []string{upstreamtest.BlobRefusalCode, upstreamtest.BlobRefusalNull, upstreamtest.BlobRefusalStream} {
		t.Run(shape, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, []acct{{accounts.KindChatGPT, "t2"}})
			e.up.Set("t2", upstreamtest.Behavior{BlobRefusal: shape})
			reasoning := `{"type":"reasoning","summary":[{"type":"summary_text","text":"earlier"}],"encrypted_content":"` + e.up.Mint("cg-t1") + `"}`
			body := codexTurn(userOne, reasoning, userTwo)
			for range 2 {
				resp := e.do("POST", "/v1/responses", body)
				if ev := sseEvents(t, resp.Body); resp.StatusCode != 200 || ev[len(ev)-1] != "response.completed" {
					t.Fatalf("status %d, events %v", resp.StatusCode, ev)
				}
			}
			bodies := bodiesTo(e.up, "t2", "/backend-api/codex/responses")
			if len(bodies) != 3 {
				t.Fatalf("want refused, retried, then sent without at once: %d requests", len(bodies))
			}
			for _, b := range bodies[1:] {
				if len(blobsIn(b)) != 0 || gjson.GetBytes(b, "input.1.summary.0.text").Str != "earlier" {
					t.Errorf("sent again: %s", b)
				}
			}
			if st := e.state(1); !st.CooldownUntil.IsZero() || len(st.Failures) > 0 {
				t.Errorf("the account was charged: %+v", st)
			}
		})
	}
}

func TestUnknownBlobRefusedTwiceReachesTheClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "t1"}, {accounts.KindChatGPT, "t2"}})
	e.up.SetDefault(upstreamtest.Behavior{Status: 400, ErrorFixture: "invalid_encrypted_content_400.json"})
	reasoning := `{"type":"reasoning","summary":[],"encrypted_content":"gAAAAABnot-a-blob-of-anyone="}`
	resp := e.do("POST", "/v1/responses", codexTurn(userOne, reasoning))
	if resp.StatusCode != 400 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if er := decodeError(t, resp); er.Code != "invalid_encrypted_content" {
		t.Errorf("error: %+v", er)
	}
	if n := len(posts(e.up)); n != 2 {
		t.Errorf("want the request and one retry, got %d upstream requests", n)
	}
}

func TestSocketRetriesAnUnknownBlobWithout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "t2"}})
	c := e.openSocket()
	reasoning := `{"type":"reasoning","summary":[],"encrypted_content":"` + e.up.Mint("cg-t1") + `"}`
	got := turn(t, c, `{"type":"response.create","model":"gpt-5-codex","instructions":"","store":false,"input":[`+userOne+","+reasoning+","+userTwo+`]}`)
	if types(got)[len(got)-1] != "response.completed" {
		t.Fatalf("turn: %s", got[len(got)-1].data)
	}
	ups := framesUp(e.up, "t2")
	if len(ups) != 2 || len(blobsIn(ups[1].Body)) != 0 || len(gjson.GetBytes(ups[1].Body, "input").Array()) != 2 {
		t.Fatalf("frames up: %d, last %s", len(ups), ups[len(ups)-1].Body)
	}
}

func TestExpiredUpstreamSocketIsReopenedUnseen(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "t1"}})
	c := e.openSocket()
	got := turn(t, c, `{"type":"response.create","model":"gpt-5-codex","input":[`+userOne+`]}`)
	prev := gjson.GetBytes(got[len(got)-1].data, "response.id").Str
	// The lifetime is set only after the first turn, so a slow machine
	// cannot expire the first socket early; a second is long enough for the
	// new socket to get its request in.
	const life = time.Second
	e.up.Set("t1", upstreamtest.Behavior{SocketLifetime: life})
	time.Sleep(life + 50*time.Millisecond) // the upstream socket is now past its lifetime
	got = turn(t, c, `{"type":"response.create","model":"gpt-5-codex","previous_response_id":"`+prev+`","input":[`+userTwo+`]}`)
	if types(got)[len(got)-1] != "response.completed" {
		t.Fatalf("the client saw the expiry: %s", got[len(got)-1].data)
	}
	handshakes := 0
	for _, r := range e.up.Requests() {
		if r.Method == http.MethodGet && r.Token == "t1" {
			handshakes++
		}
	}
	ups := framesUp(e.up, "t1")
	last := ups[len(ups)-1].Body
	if handshakes != 2 || gjson.GetBytes(last, "previous_response_id").Exists() || len(gjson.GetBytes(last, "input").Array()) < 3 {
		t.Errorf("%d handshakes; the request on the new socket: %s", handshakes, last)
	}
}

func TestHandshakeCarriesTheServingAccountsHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "t1"}, {accounts.KindChatGPT, "t2"}})
	c, resp, err := e.dialSocket("/v1/responses", "session-id", "s-hs")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ts := resp.Header.Get("x-codex-turn-state")
	owner, _ := e.up.Owner(ts)
	if owner == "" || resp.Header.Get("x-models-etag") == "" || resp.Header.Get("openai-model") == "" ||
		resp.Header.Get("x-reasoning-included") != "true" {
		t.Fatalf("handshake answer: %v", resp.Header)
	}
	// The socket's first request goes to the account that was dialed.
	got := turn(t, c, `{"type":"response.create","model":"gpt-5-codex","input":[`+userOne+`]}`)
	if types(got)[len(got)-1] != "response.completed" || "cg-"+servedBy(t, e.up) != owner {
		t.Errorf("first request served by %s, handshake by %s", servedBy(t, e.up), owner)
	}
	// Sent back over HTTP, the turn state goes to its own account only.
	mine := strings.TrimPrefix(owner, "cg-")
	readAll(t, e.do("POST", "/v1/responses", codexTurn(userOne), "session_id", "s-hs", "x-codex-turn-state", ts))
	if h := lastHeaderOf(e.up, mine, "x-codex-turn-state"); h != ts {
		t.Errorf("its own account got turn state %q", h)
	}
	e.up.Set(mine, upstreamtest.Behavior{Status: 429})
	readAll(t, e.do("POST", "/v1/responses", codexTurn(userOne), "session_id", "s-hs", "x-codex-turn-state", ts))
	if h := lastHeaderOf(e.up, other(mine), "x-codex-turn-state"); h != "" || servedBy(t, e.up) != other(mine) {
		t.Errorf("another account got turn state %q", h)
	}
}

// lastHeaderOf is header k of the last POST the upstream got with token.
func lastHeaderOf(up *upstreamtest.Server, token, k string) string {
	v := "<no request>"
	for _, r := range up.Requests() {
		if r.Token == token && r.Method == http.MethodPost {
			v = r.Header.Get(k)
		}
	}
	return v
}

func TestLiteFrameOverHTTPKeepsItsMarker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "t1"}})
	overHTTP(e, nil)
	c := e.openSocket()
	got := turn(t, c, `{"type":"response.create","model":"gpt-5.6","instructions":"","reasoning":{"context":"all_turns"},`+
		`"client_metadata":{"ws_request_header_x_openai_internal_codex_responses_lite":"true"},"stream":true,"store":false,`+
		`"input":[{"type":"additional_tools","tools":[]},`+userOne+`]}`)
	if types(got)[len(got)-1] != "response.completed" {
		t.Fatalf("a Lite frame over HTTP: %s", got[len(got)-1].data)
	}
	if h := lastHeaderOf(e.up, "t1", "X-OpenAI-Internal-Codex-Responses-Lite"); h != "true" {
		t.Errorf("Lite header upstream: %q", h)
	}
}

func TestLiteRequestGoesAsSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "t1"}})
	body := `{"model":"gpt-5.6", "instructions":"","max_output_tokens":99,"reasoning":{"context":"all_turns"},"stream":true,"store":false,"input":[{"type":"additional_tools","tools":[]},` + userOne + `]}`
	resp := e.do("POST", "/v1/responses", body, "X-OpenAI-Internal-Codex-Responses-Lite", "true")
	if ev := sseEvents(t, resp.Body); resp.StatusCode != 200 || ev[len(ev)-1] != "response.completed" {
		t.Fatalf("status %d, events %v", resp.StatusCode, ev)
	}
	if got := bodiesTo(e.up, "t1", "/backend-api/codex/responses"); len(got) != 1 || string(got[0]) != body {
		t.Errorf("a Lite request was rewritten: %s", got)
	}
	// The backend's {"detail": ...} refusals are the client's errors.
	resp = e.do("POST", "/v1/responses", strings.Replace(body, `"store":false`, `"store":true`, 1), "X-OpenAI-Internal-Codex-Responses-Lite", "true")
	if er := decodeError(t, resp); resp.StatusCode != 400 || er.Message != "Store must be set to false" {
		t.Errorf("detail 400: %d %+v", resp.StatusCode, er)
	}
	if st := e.state(1); !st.CooldownUntil.IsZero() || len(st.Failures) > 0 {
		t.Errorf("the account was charged: %+v", st)
	}
}

func TestItemLookupNotFoundIsTheClients(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "t1"}, {accounts.KindChatGPT, "t2"}})
	naked := `{"type":"reasoning","id":"rs_naked","summary":[]}`
	resp := e.do("POST", "/v1/responses", codexTurn(userOne, naked))
	er := decodeError(t, resp)
	if resp.StatusCode != 404 || er.Code == "entitlement_error" || !strings.Contains(er.Message, "rs_naked") {
		t.Fatalf("status %d: %+v", resp.StatusCode, er)
	}
	if n := len(posts(e.up)); n != 1 {
		t.Errorf("the client's error was tried on %d accounts", n)
	}
}

func TestPlanWithoutCodexIsAnEntitlement(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "t1"}, {accounts.KindChatGPT, "t2"}})
	e.up.SetDefault(upstreamtest.Behavior{Status: 429, ErrorFixture: "usage_not_included_429.json"})
	resp := e.do("POST", "/v1/responses", codexTurn(userOne))
	if er := decodeError(t, resp); resp.StatusCode != 403 || er.Code != "entitlement_error" {
		t.Fatalf("status %d: %+v", resp.StatusCode, er)
	}
	for i := range 2 {
		if st := e.state(i + 1); !st.RateLimitedUntil.IsZero() {
			t.Errorf("account %d was rate-limited for a plan without Codex", i+1)
		}
	}
}

func TestEachAccountSeesItsOwnInstallationID(t *testing.T) {
	t.Parallel()
	const client = "0b8e1c55-7a3e-4f6b-9d0c-1e2f3a4b5c6d"
	e := newEnv(t, []acct{{accounts.KindChatGPT, "t1"}, {accounts.KindChatGPT, "t2"}})
	body := `{"model":"gpt-5-codex","stream":true,"client_metadata":{"x-codex-installation-id":"` + client + `"},"input":[` + userOne + `]}`
	readAll(t, e.do("POST", "/v1/responses", body, "x-codex-installation-id", client, "session_id", "s-id"))
	first := servedBy(t, e.up)
	e.up.Set(first, upstreamtest.Behavior{Status: 429})
	readAll(t, e.do("POST", "/v1/responses", body, "x-codex-installation-id", client, "session_id", "s-id"))
	readAll(t, e.do("POST", "/v1/responses", body, "x-codex-installation-id", client, "session_id", "s-id"))
	seen := map[string][]string{} // token → ids it saw, header and body
	for _, r := range posts(e.up) {
		if r.Header.Get("x-codex-installation-id") == "" || strings.Contains(string(r.Body), client) {
			t.Fatalf("%s saw the client's id: %v %s", r.Token, r.Header, r.Body)
		}
		seen[r.Token] = append(seen[r.Token], r.Header.Get("x-codex-installation-id"),
			gjson.GetBytes(r.Body, "client_metadata.x-codex-installation-id").Str)
	}
	a, b := seen[first], seen[other(first)]
	if len(a) == 0 || len(b) < 4 || a[0] == b[0] || slices.Compact(slices.Clone(a))[0] != a[0] || len(slices.Compact(slices.Clone(b))) != 1 {
		t.Errorf("ids seen: %s %v, %s %v", first, a, other(first), b)
	}
	// A socket's handshake carries the account's id too.
	c := e.openSocket("x-codex-installation-id", client)
	c.Close()
	for _, r := range e.up.Requests() {
		if r.Method == http.MethodGet && r.Header.Get("x-codex-installation-id") == client {
			t.Errorf("a handshake carried the client's id")
		}
	}
}

// A socket's turn state comes in a codex.response.metadata event; it too
// belongs to the account that sent it.
func TestTurnStateFromAMetadataEventStaysWithItsAccount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "c1"}, {accounts.KindChatGPT, "c2"}})
	e.up.SetDefault(upstreamtest.Behavior{Stream: "metadata_first.sse"})
	compatPrefer(e, 1)
	if ev := sseEvents(t, e.do("POST", "/v1/responses", streamBody).Body); ev[0] != "codex.response.metadata" {
		t.Fatalf("events %v", ev)
	}
	e.up.Set("c1", upstreamtest.Behavior{Status: 429})
	readAll(t, e.do("POST", "/v1/responses", streamBody, "x-codex-turn-state", "ts-fixture-0002"))
	if h := lastHeaderOf(e.up, "c2", "x-codex-turn-state"); h != "" {
		t.Errorf("c2 got c1's turn state %q", h)
	}
}

// Codex's remote compaction v2 is an ordinary Responses request whose input
// ends in a compaction_trigger; its compaction too is made again when the
// conversation moves, over HTTP and on a socket.
func TestMoveMakesAV2CompactionAgain(t *testing.T) {
	t.Parallel()
	for _, socket := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "websocket"}[socket], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, []acct{{accounts.KindChatGPT, "t1"}, {accounts.KindChatGPT, "t2"}})
			const trigger = `{"type":"compaction_trigger"}`
			send := func(items ...string) []string {
				if !socket {
					return outputItems(t, e.do("POST", "/v1/responses", codexTurn(items...), "session_id", "s-v2"))
				}
				c := e.openSocket("session-id", "s-v2")
				got := turn(t, c, `{"type":"response.create","model":"gpt-5-codex","instructions":"","store":false,"input":[`+strings.Join(items, ",")+`]}`)
				var out []string
				for _, f := range got {
					if gjson.GetBytes(f.data, "type").Str == "response.output_item.done" {
						out = append(out, gjson.GetBytes(f.data, "item").Raw)
					}
				}
				if types(got)[len(got)-1] != "response.completed" {
					t.Fatalf("turn: %s", got[len(got)-1].data)
				}
				return out
			}
			out := send(userOne, trigger)
			first := servedBy(t, e.up)
			if len(out) != 1 || gjson.Get(out[0], "type").Str != "compaction" {
				t.Fatalf("the compaction's output: %v", out)
			}
			e.up.Set(first, upstreamtest.Behavior{Status: 429})
			send(userOne, out[0], userTwo)
			second := other(first)
			var remade, moved []byte
			for _, r := range e.up.Requests() {
				if r.Token == second && r.Method != http.MethodGet {
					if strings.Contains(string(r.Body), "compaction_trigger") {
						remade = r.Body
					} else {
						moved = r.Body
					}
				}
			}
			if remade == nil || moved == nil {
				t.Fatalf("%s: remade %v, moved %v", second, remade != nil, moved != nil)
			}
			checkReadableBy(t, e.up, second, remade)
			checkReadableBy(t, e.up, second, moved)
			if gjson.GetBytes(moved, `input.#(type=="compaction")`).Raw == "" {
				t.Errorf("the moved request has no compaction: %s", moved)
			}
		})
	}
}
