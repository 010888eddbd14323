package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	wsock "github.com/rotorproxy/rotor/proxy/websocket"
)

// dialSocket opens a Responses WebSocket on e as Codex CLI does, with the
// client key; hdr adds or overrides headers.
func (e *env) dialSocket(path string, hdr ...string) (*websocket.Conn, *http.Response, error) {
	e.t.Helper()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+testKey)
	h.Set("OpenAI-Beta", "responses_websockets=2026-02-06")
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Set(hdr[i], hdr[i+1])
	}
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second, EnableCompression: true}
	url := "ws" + strings.TrimPrefix(e.base, "http") + path
	return d.Dial(url, h)
}

// openSocket is dialSocket that must succeed; the socket is closed when
// the test ends.
func (e *env) openSocket(hdr ...string) *websocket.Conn {
	e.t.Helper()
	c, resp, err := e.dialSocket("/v1/responses", hdr...)
	if err != nil {
		e.t.Fatalf("handshake: %v (%v)", err, resp)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// frame is one frame read from a socket and when it came.
type frame struct {
	data []byte
	at   time.Time
}

// turn sends one response.create and reads frames until the answer ends:
// a final event, or an error frame.
func turn(t *testing.T, c *websocket.Conn, create string) []frame {
	t.Helper()
	if err := c.WriteMessage(websocket.TextMessage, []byte(create)); err != nil {
		t.Fatalf("send: %v", err)
	}
	var out []frame
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, b, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("after %d frames: %v", len(out), err)
		}
		out = append(out, frame{b, time.Now()})
		switch gjson.GetBytes(b, "type").Str {
		case "response.completed", "response.failed", "response.incomplete", "error":
			return out
		}
	}
}

func types(fs []frame) []string {
	var out []string
	for _, f := range fs {
		out = append(out, gjson.GetBytes(f.data, "type").Str)
	}
	return out
}

// fixtureData is the data payloads of a recorded SSE stream, in order.
func fixtureData(t *testing.T, name string) [][]byte {
	t.Helper()
	raw, err := os.ReadFile("../testdata/sse/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, []byte(d))
		}
	}
	return out
}

// overHTTP makes the fake refuse sockets for every token, so e's sockets
// are served over HTTP upstream; set adds tokens' behaviours on top.
func overHTTP(e *env, set map[string]upstreamtest.Behavior) {
	e.up.SetDefault(upstreamtest.Behavior{NoWebSocket: true})
	for tok, b := range set {
		b.NoWebSocket = true
		e.up.Set(tok, b)
	}
}

// framesUp are the response.create frames the fake got on sockets with
// token.
func framesUp(up *upstreamtest.Server, token string) []upstreamtest.Recorded {
	var out []upstreamtest.Recorded
	for _, r := range up.Requests() {
		if r.Method == "WS" && r.Token == token {
			out = append(out, r)
		}
	}
	return out
}

// posts are the requests the fake got over HTTP (not socket handshakes or
// frames).
func posts(up *upstreamtest.Server) []upstreamtest.Recorded {
	var out []upstreamtest.Recorded
	for _, r := range up.Requests() {
		if r.Method == http.MethodPost {
			out = append(out, r)
		}
	}
	return out
}

const createFrame = `{"type":"response.create","model":"gpt-5","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}]}`

func TestSocketHandshakePassesTheGuardFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	cases := []struct {
		name   string
		hdr    []string
		status int
	}{
		{"no key", []string{"Authorization", "Bearer wrong-key-0123456789abcdef0123456789"}, 401},
		{"foreign origin", []string{"Origin", "https://evil.example"}, 403},
		{"foreign host", []string{"Host", "evil.example"}, 403},
	}
	for _, tc := range cases {
		_, resp, err := e.dialSocket("/v1/responses", tc.hdr...)
		if err == nil || resp == nil || resp.StatusCode != tc.status {
			t.Errorf("%s: want %d before any upgrade, got %v (%v)", tc.name, tc.status, resp, err)
		}
	}
	for _, path := range []string{"/v1/responses", "/responses", "/backend-api/codex/responses"} {
		c, resp, err := e.dialSocket(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if got := resp.Header.Get("Sec-WebSocket-Extensions"); !strings.HasPrefix(got, "permessage-deflate") {
			t.Errorf("%s: permessage-deflate offered but not taken: %q", path, got)
		}
		c.Close()
	}
}

func TestSocketRelaysEveryEventAsItsOwnFrame(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	e.up.Set("k1", upstreamtest.Behavior{EventDelay: 40 * time.Millisecond})
	c := e.openSocket("session-id", "sess-1")
	got := turn(t, c, createFrame)
	want := fixtureData(t, "hello.sse")
	for i := range want { // the fake answers with the model asked for
		want[i] = bytes.ReplaceAll(want[i], []byte(`"gpt-5-2025-08-07"`), []byte(`"gpt-5"`))
	}
	if len(got) != len(want) {
		t.Fatalf("got %d frames %v, want %d", len(got), types(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].data, want[i]) {
			t.Errorf("frame %d differs from the upstream's event:\n got %s\nwant %s", i, got[i].data, want[i])
		}
	}
	// The events were spread out upstream; so are the frames: the output
	// reached the client while the upstream was still sending.
	if spread := got[len(got)-1].at.Sub(got[2].at); spread < time.Duration(len(want)-4)*30*time.Millisecond {
		t.Errorf("frames came in a burst (%s from the first output to the end)", spread)
	}
	// Upstream, the same: a socket of its own, and the frame as sent.
	rec := e.up.Requests()
	if len(rec) != 2 || rec[0].Method != http.MethodGet || rec[1].Method != "WS" || string(rec[1].Body) != createFrame {
		t.Fatalf("upstream got %+v", rec)
	}
	if h := rec[0].Header; h.Get("session-id") != "sess-1" || h.Get("OpenAI-Beta") != wsock.Beta || h.Get("Authorization") != "Bearer k1" {
		t.Errorf("upstream handshake headers: %v", h)
	}
	// The next turn goes up on the same upstream socket.
	if got := turn(t, c, createFrame); types(got)[len(got)-1] != "response.completed" {
		t.Errorf("second turn: %v", types(got))
	}
	if n := e.up.Count("k1"); n != 3 || e.up.Sockets() != 1 {
		t.Errorf("want one handshake and two frames on one upstream socket, got %d requests, %d sockets", n, e.up.Sockets())
	}
}

func TestSocketOverHTTPWhenTheEndpointRefusesAndRemembersIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	overHTTP(e, nil)
	for range 2 {
		c := e.openSocket("session-id", "sess-h")
		if got := turn(t, c, createFrame); types(got)[len(got)-1] != "response.completed" {
			t.Fatalf("turn: %v", types(got))
		}
		c.Close()
	}
	var gets int
	for _, r := range e.up.Requests() {
		if r.Method == http.MethodGet {
			gets++
		}
	}
	p := posts(e.up)
	if gets != 1 || len(p) != 2 || gjson.GetBytes(p[0].Body, "type").Exists() || !gjson.GetBytes(p[0].Body, "stream").Bool() {
		t.Fatalf("want one refused upgrade, then POSTs without the frame's type: %d upgrades, %+v", gets, p)
	}
	if p[0].Header.Get("session-id") != "sess-h" || p[0].Header.Get("Sec-WebSocket-Key") != "" {
		t.Errorf("upstream headers: %v", p[0].Header)
	}
}

func TestSocketFailsOverBeforeOutputAndSaysWhyInAnErrorFrame(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}, {accounts.KindAPIKey, "k2"}})
	e.up.Set("k1", upstreamtest.Behavior{Status: 429})
	c := e.openSocket("session-id", "sess-2")
	got := turn(t, c, createFrame)
	if types(got)[len(got)-1] != "response.completed" || len(framesUp(e.up, "k2")) != 1 {
		t.Fatalf("no failover to k2: %v, k2 saw %d frames", types(got), len(framesUp(e.up, "k2")))
	}
	// Now every account is at its limit: an error frame in the shape
	// Codex reads, and the socket survives it.
	e.up.Set("k2", upstreamtest.Behavior{Status: 429})
	e.sel.Runtime().Clear(e.id(1)) // let k1 be tried again too
	got = turn(t, c, createFrame)
	last := got[len(got)-1].data
	if gjson.GetBytes(last, "type").Str != "error" || gjson.GetBytes(last, "status").Int() != 429 ||
		gjson.GetBytes(last, "error.code").Str != "codex_runtime_rotation_pool_exhausted" ||
		gjson.GetBytes(last, "error.type").Str != "usage_limit_reached" || !gjson.GetBytes(last, "error.resets_at").Exists() ||
		gjson.GetBytes(last, "headers.retry-after-ms").Str == "" {
		t.Fatalf("error frame: %s", last)
	}
	e.up.Set("k1", upstreamtest.Behavior{})
	e.sel.Runtime().Clear(e.id(1))
	if got := turn(t, c, createFrame); types(got)[len(got)-1] != "response.completed" {
		t.Errorf("socket did not survive the error: %v", types(got))
	}
}

func TestSocketOverHTTPSendsTheWholeConversation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	overHTTP(e, nil)
	c := e.openSocket("session-id", "sess-3")
	warm := `{"type":"response.create","model":"gpt-5","generate":false,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"first"}]}]}`
	got := turn(t, c, warm)
	if strings.Join(types(got), ",") != "response.created,response.completed" || len(posts(e.up)) != 0 {
		t.Fatalf("warm-up: %v, upstream saw %d requests", types(got), len(posts(e.up)))
	}
	warmID := gjson.GetBytes(got[1].data, "response.id").Str
	next := `{"type":"response.create","model":"gpt-5","previous_response_id":"` + warmID + `","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"second"}]}]}`
	got = turn(t, c, next)
	if types(got)[len(got)-1] != "response.completed" {
		t.Fatalf("turn: %v", types(got))
	}
	body := posts(e.up)[0].Body
	texts := gjson.GetBytes(body, "input.#.content.0.text").String()
	if texts != `["first","second"]` || gjson.GetBytes(body, "previous_response_id").Exists() {
		t.Fatalf("upstream did not get the whole conversation: %s", body)
	}
	// The turn after names the answer just given: its input, its output
	// and the new input go up whole.
	respID := gjson.GetBytes(got[len(got)-1].data, "response.id").Str
	third := `{"type":"response.create","model":"gpt-5","previous_response_id":"` + respID + `","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"third"}]}]}`
	turn(t, c, third)
	body = posts(e.up)[1].Body
	items := gjson.GetBytes(body, "input").Array()
	if len(items) != 4 || items[2].Get("role").Str != "assistant" || items[3].Get("content.0.text").Str != "third" {
		t.Fatalf("third turn input: %s", gjson.GetBytes(body, "input").Raw)
	}
}

func TestSocketOverHTTPPassesAnUnknownPreviousResponseThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	overHTTP(e, map[string]upstreamtest.Behavior{"k1": {Status: 400, ErrorFixture: "previous_response_not_found_400.json"}})
	c := e.openSocket()
	got := turn(t, c, `{"type":"response.create","model":"gpt-5","previous_response_id":"resp_gone","input":[]}`)
	last := got[len(got)-1].data
	if gjson.GetBytes(last, "status").Int() != 400 || gjson.GetBytes(last, "error.code").Str != "previous_response_not_found" {
		t.Fatalf("want the upstream's previous_response_not_found unchanged, got %s", last)
	}
	if b := posts(e.up)[0].Body; gjson.GetBytes(b, "previous_response_id").Str != "resp_gone" {
		t.Errorf("the reference did not reach the upstream: %s", b)
	}
}

func TestSocketPinAppliesFromTheNextRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}, {accounts.KindAPIKey, "k2"}})
	overHTTP(e, nil)
	c := e.openSocket("session-id", "sess-4")
	turn(t, c, createFrame)
	first := posts(e.up)[0].Token
	other := map[string]int{"k1": 2, "k2": 1}[first]
	e.sel.SetProcessPin(e.id(other))
	turn(t, c, createFrame)
	if got := posts(e.up)[1].Token; got == first {
		t.Fatalf("pinned to account %d, the socket's next request still went to %s", other, got)
	}
}

func TestSocketAnswersAnOversizedFrameAndGoesOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}}, func(c *Config) { c.MaxBody = 4 << 10 })
	c := e.openSocket()
	big := `{"type":"response.create","model":"gpt-5","input":"` + strings.Repeat("x", 64<<10) + `"}`
	got := turn(t, c, big)
	last := got[len(got)-1].data
	if gjson.GetBytes(last, "status").Int() != 413 || gjson.GetBytes(last, "error.code").Str != "runtime_rotation_proxy_payload_too_large" {
		t.Fatalf("oversized frame: %s", last)
	}
	if got := turn(t, c, createFrame); types(got)[len(got)-1] != "response.completed" {
		t.Errorf("socket did not go on: %v", types(got))
	}
}

func TestSocketOverHTTPClientGoneFreesTheUpstream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	overHTTP(e, map[string]upstreamtest.Behavior{"k1": {EventDelay: 400 * time.Millisecond}})
	c := e.openSocket()
	c.WriteMessage(websocket.TextMessage, []byte(createFrame))
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	for range 3 {
		if _, _, err := c.ReadMessage(); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	// At the next event rotor finds the client gone and closes the
	// upstream connection rather than reading the rest (4 s more) or
	// handing it back to the pool.
	eventually(t, 3*time.Second, "the upstream connection to close", func() bool { return e.up.Open() == 0 })
}

func TestSocketShutdownFinishesTheAnswerThenSaysGoingAway(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	e.up.Set("k1", upstreamtest.Behavior{EventDelay: 30 * time.Millisecond})
	busy, idle := e.openSocket(), e.openSocket()
	busy.WriteMessage(websocket.TextMessage, []byte(createFrame))
	busy.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := busy.ReadMessage(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- e.srv.Shutdown(ctx)
	}()
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := idle.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseGoingAway) {
		t.Errorf("idle socket: want close 1001 at once, got %v", err)
	}
	var last []byte
	for {
		_, b, err := busy.ReadMessage()
		if err != nil {
			if !websocket.IsCloseError(err, websocket.CloseGoingAway) {
				t.Errorf("busy socket: want close 1001 after the answer, got %v", err)
			}
			break
		}
		last = b
	}
	if gjson.GetBytes(last, "type").Str != "response.completed" {
		t.Errorf("the answer in flight was cut: last frame %s", last)
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestSocketRecordsUsageAsAnyRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	c := e.openSocket()
	turn(t, c, createFrame)
	var raw []byte
	eventually(t, 5*time.Second, "the usage record", func() bool {
		e.usage.Flush()
		raw, _ = os.ReadFile(e.usage.Path())
		return len(raw) > 0
	})
	var rec struct {
		Status int    `json:"status"`
		Model  string `json:"model"`
		Tokens struct {
			Input int `json:"input"`
		} `json:"tokens"`
	}
	lines := bytes.Split(bytes.TrimSpace(raw), []byte("\n"))
	if err := json.Unmarshal(lines[len(lines)-1], &rec); err != nil || rec.Status != 200 || rec.Model != "gpt-5" || rec.Tokens.Input == 0 {
		t.Fatalf("usage record: %s (%v)", lines[len(lines)-1], err)
	}
}

func TestSocketOverHTTPFrameHeadersBecomeHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	overHTTP(e, nil)
	c := e.openSocket()
	turn(t, c, `{"type":"response.create","model":"gpt-5","input":[],"session_id":"s-9","x-codex-window-id":"s-9:0","client_metadata":{"a":"b"}}`)
	rec := posts(e.up)[0]
	if rec.Header.Get("session_id") != "s-9" || rec.Header.Get("x-codex-window-id") != "s-9:0" {
		t.Errorf("upstream headers: %v", rec.Header)
	}
	body := gjson.ParseBytes(rec.Body)
	if body.Get("session_id").Exists() || body.Get(`x-codex-window-id`).Exists() || !body.Get("client_metadata").Exists() {
		t.Errorf("upstream body: %s", rec.Body)
	}
}

func TestSocketUpstreamKeepsItsConversationAndMovesItWhole(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}, {accounts.KindAPIKey, "k2"}})
	c := e.openSocket("session-id", "sess-u")
	warm := `{"type":"response.create","model":"gpt-5","generate":false,"input":[]}`
	got := turn(t, c, warm)
	warmID := gjson.GetBytes(got[1].data, "response.id").Str
	// The turn names the warm-up rotor answered: the upstream socket never
	// had it, so the reference goes and the input goes up as it is.
	first := `{"type":"response.create","model":"gpt-5","previous_response_id":"` + warmID + `","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"one"}]}]}`
	got = turn(t, c, first)
	respID := gjson.GetBytes(got[len(got)-1].data, "response.id").Str
	served := e.up.Requests()[0].Token // the account the socket went to
	up := framesUp(e.up, served)
	if len(up) != 1 || gjson.GetBytes(up[0].Body, "previous_response_id").Exists() || gjson.GetBytes(up[0].Body, "type").Str != "response.create" {
		t.Fatalf("first turn upstream: %+v", up)
	}
	// The next names the answer the upstream socket gave: it goes as is,
	// incremental, on the same socket.
	second := `{"type":"response.create","model":"gpt-5","previous_response_id":"` + respID + `","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"two"}]}]}`
	turn(t, c, second)
	up = framesUp(e.up, served)
	if len(up) != 2 || string(up[1].Body) != second || e.up.Sockets() != 1 {
		t.Fatalf("second turn upstream: %d frames, %d sockets, last %s", len(up), e.up.Sockets(), up[len(up)-1].Body)
	}
	// Now that account is at its limit: the next request moves to the
	// other account's socket, which never had the conversation, so it
	// goes up whole.
	e.up.Set(served, upstreamtest.Behavior{Status: 429})
	other := map[string]string{"k1": "k2", "k2": "k1"}[served]
	third := `{"type":"response.create","model":"gpt-5","previous_response_id":"` + respID + `","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"three"}]}]}`
	got = turn(t, c, third)
	if types(got)[len(got)-1] != "response.completed" {
		t.Fatalf("after the move: %v", types(got))
	}
	moved := framesUp(e.up, other)
	if len(moved) != 1 {
		t.Fatalf("the other account got %d frames", len(moved))
	}
	whole := gjson.ParseBytes(moved[0].Body)
	var texts []string
	for _, it := range whole.Get("input").Array() {
		texts = append(texts, it.Get("content.0.text").Str)
	}
	if whole.Get("previous_response_id").Exists() || !slices.Contains(texts, "one") || !slices.Contains(texts, "two") || texts[len(texts)-1] != "three" {
		t.Errorf("the moved request was not whole: %s", moved[0].Body)
	}
}

func TestSocketUpstreamUnknownReferencePassesUnchanged(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	c := e.openSocket()
	got := turn(t, c, `{"type":"response.create","model":"gpt-5","previous_response_id":"resp_gone","input":[]}`)
	last := got[len(got)-1].data
	if gjson.GetBytes(last, "status").Int() != 400 || gjson.GetBytes(last, "error.code").Str != "previous_response_not_found" {
		t.Fatalf("want the upstream's previous_response_not_found, got %s", last)
	}
	if got := turn(t, c, createFrame); types(got)[len(got)-1] != "response.completed" {
		t.Errorf("socket did not go on: %v", types(got))
	}
}

func TestSocketClientGoneClosesTheUpstreamSocket(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	c := e.openSocket()
	turn(t, c, createFrame)
	if e.up.Sockets() != 1 {
		t.Fatalf("upstream sockets: %d", e.up.Sockets())
	}
	c.Close()
	eventually(t, 2*time.Second, "the upstream socket to close", func() bool { return e.up.Sockets() == 0 })
}

// Compaction v2 is a response.create whose input ends in a
// compaction_trigger item: it passes as any request, failover included.
func TestSocketCompactionPassesThroughAndFailsOver(t *testing.T) {
	t.Parallel()
	const compact = `{"type":"response.create","model":"gpt-5","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"compaction_trigger"}]}`
	for _, viaHTTP := range []bool{false, true} {
		e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}, {accounts.KindAPIKey, "k2"}})
		limited := upstreamtest.Behavior{Status: 429}
		if viaHTTP {
			overHTTP(e, map[string]upstreamtest.Behavior{"k1": limited})
		} else {
			e.up.Set("k1", limited)
		}
		// The session is on k1, which is at its limit.
		e.sel.Bind(digestKey('s', []byte("sess-c")), e.id(1))
		c := e.openSocket("x-codex-beta-features", "remote_compaction_v2", "session-id", "sess-c")
		got := turn(t, c, compact)
		if types(got)[len(got)-1] != "response.completed" {
			t.Fatalf("http=%v: %v", viaHTTP, types(got))
		}
		var up upstreamtest.Recorded
		if viaHTTP {
			p := posts(e.up)
			up = p[len(p)-1]
		} else {
			f := framesUp(e.up, "k2")
			if len(f) != 1 {
				t.Fatalf("k2 got %d frames", len(f))
			}
			up = f[0]
			if string(up.Body) != compact {
				t.Errorf("the frame changed on its way: %s", up.Body)
			}
		}
		if e.up.Count("k1") == 0 {
			t.Errorf("http=%v: k1 was not tried first", viaHTTP)
		}
		if up.Token != "k2" || gjson.GetBytes(up.Body, "input.1.type").Str != "compaction_trigger" ||
			up.Header.Get("x-codex-beta-features") != "remote_compaction_v2" {
			t.Errorf("http=%v: upstream got %s with %v", viaHTTP, up.Body, up.Header)
		}
	}
}

// docs/codex.md: sockets count toward the proxy's capacity, and one serve holds
// at least 500 of them, each served.
func TestSocketFiveHundredAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 500 sockets")
	}
	// Not parallel: 1,500 connections and their goroutines would starve
	// the timing of the tests beside it.
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}, {accounts.KindAPIKey, "k2"}})
	const n = 500
	conns := make([]*websocket.Conn, n)
	for i := range conns {
		c, resp, err := e.dialSocket("/v1/responses")
		if err != nil {
			t.Fatalf("socket %d: %v (%v)", i, err, resp)
		}
		conns[i] = c
		defer c.Close()
	}
	// Every socket open at once, each answers a turn.
	errs := make(chan error, n)
	for _, c := range conns {
		go func() {
			if err := c.WriteMessage(websocket.TextMessage, []byte(createFrame)); err != nil {
				errs <- err
				return
			}
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			for {
				_, b, err := c.ReadMessage()
				if err != nil {
					errs <- err
					return
				}
				if typ := gjson.GetBytes(b, "type").Str; typ == "response.completed" || typ == "error" {
					if typ == "error" {
						errs <- fmt.Errorf("error frame: %s", b)
						return
					}
					errs <- nil
					return
				}
			}
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	open := e.srv.sockets.Count()
	if open != n {
		t.Errorf("%d sockets open on the proxy, want %d", open, n)
	}
}

// An upstream socket that breaks before the turn's first output, reset or
// closed in good order without a close frame, fails over like an HTTP
// stream; the client's socket never sees it.
func TestSocketUpstreamBrokenBeforeOutputFailsOver(t *testing.T) {
	t.Parallel()
	for name, b := range map[string]upstreamtest.Behavior{
		"reset":  {ResetAfter: 1},
		"closed": {CloseAfter: 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}, {accounts.KindAPIKey, "k2"}})
			e.up.Set("k1", b)
			e.prefer(1)
			c := e.openSocket()
			got := types(turn(t, c, createFrame))
			if got[len(got)-1] != "response.completed" || slices.Contains(got[1:], "response.created") {
				t.Fatalf("turn %v, want one whole answer from k2", got)
			}
			if len(framesUp(e.up, "k1")) != 1 || len(framesUp(e.up, "k2")) != 1 {
				t.Errorf("frames up: k1 %d, k2 %d; want 1 each", len(framesUp(e.up, "k1")), len(framesUp(e.up, "k2")))
			}
			if s := e.status(1); s.State != "cooling-down:network-error" {
				t.Errorf("account 1 is %q, want cooling-down:network-error", s.State)
			}
		})
	}
}
