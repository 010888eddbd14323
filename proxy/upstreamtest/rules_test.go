package upstreamtest

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// includeBlobs is the include of a request that asks for encrypted
// reasoning.
const includeBlobs = `"include":["reasoning.encrypted_content"]`

// post sends a JSON POST with token and extra header pairs, and returns
// the status, headers and whole body.
func post(t *testing.T, c *http.Client, url, token, body string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// events splits a whole SSE body into its events.
func events(t *testing.T, body []byte) []sseEvent {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(body))
	var out []sseEvent
	for {
		ev, err := readEvent(br)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
}

// outputItem is what these tests read of an output or input item.
type outputItem struct {
	ID               string  `json:"id"`
	Type             string  `json:"type"`
	EncryptedContent *string `json:"encrypted_content"`
}

// reasoningBlobs returns the encrypted_content of the reasoning items of a
// list of event payloads (frames or SSE data): from response.output_item.done
// and from the final response's output, by item id.
func reasoningBlobs(t *testing.T, payloads []string) (done, final map[string]string) {
	t.Helper()
	done, final = map[string]string{}, map[string]string{}
	for _, p := range payloads {
		var ev struct {
			Type     string     `json:"type"`
			Item     outputItem `json:"item"`
			Response struct {
				Output []outputItem `json:"output"`
			} `json:"response"`
		}
		if err := json.Unmarshal([]byte(p), &ev); err != nil {
			t.Fatalf("%v: %s", err, p)
		}
		switch ev.Type {
		case "response.output_item.done":
			if ev.Item.EncryptedContent != nil {
				done[ev.Item.ID] = *ev.Item.EncryptedContent
			}
			if ev.Item.Type != "reasoning" && ev.Item.EncryptedContent != nil {
				t.Errorf("a %s item got encrypted_content", ev.Item.Type)
			}
		case "response.completed":
			for _, it := range ev.Response.Output {
				if it.EncryptedContent != nil {
					final[it.ID] = *it.EncryptedContent
				}
				if it.Type != "reasoning" && it.EncryptedContent != nil {
					t.Errorf("a %s item got encrypted_content", it.Type)
				}
			}
		}
	}
	return done, final
}

func sseData(evs []sseEvent) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.data)
	}
	return out
}

// fernetLike is what a blob looks like: Fernet's version byte, base64url
// with padding.
var fernetLike = regexp.MustCompile(`^gAAAAA[A-Za-z0-9_-]+={0,2}$`)

// reasoningInput is an input holding a reasoning item that carries blob
// (or only its id when blob is ""), then a user message.
func reasoningInput(id, blob string) string {
	item := `{"type":"reasoning","id":"` + id + `","summary":[{"type":"summary_text","text":"thought"}]`
	if blob != "" {
		item += `,"encrypted_content":"` + blob + `"`
	}
	return `[` + item + `},{"type":"message","role":"user","content":[{"type":"input_text","text":"again"}]}]`
}

// refusedBody is the exact invalid_encrypted_content body for blob, with
// code as JSON ("\"invalid_encrypted_content\"" or "null").
func refusedBody(blob, code string) string {
	return `{"error":{"message":"The encrypted content ` + blob[:4] + `...` + blob[len(blob)-4:] +
		` could not be verified. Reason: Encrypted content could not be decrypted or parsed.","type":"invalid_request_error","param":null,"code":` + code + `}}`
}

func TestMintAndOwner(t *testing.T) {
	t.Parallel()
	s, other := New(testdata), New(testdata)
	a1, a2 := s.Mint("acct-a"), s.Mint("acct-a")
	if a1 == a2 {
		t.Error("two mints gave the same blob")
	}
	for _, b := range []string{a1, a2, s.Mint("sk-a-much-longer-api-key-0123456789abcdef")} {
		if !fernetLike.MatchString(b) {
			t.Errorf("blob %q does not look like Fernet", b)
		}
		if _, err := base64.URLEncoding.DecodeString(b); err != nil {
			t.Errorf("blob %q is not padded base64url: %v", b, err)
		}
	}
	if o, ok := s.Owner(a1); !ok || o != "acct-a" {
		t.Errorf("Owner = %q %v, want acct-a", o, ok)
	}
	raw, _ := base64.URLEncoding.DecodeString(a1)
	raw[len(raw)-20] ^= 1
	tampered := base64.URLEncoding.EncodeToString(raw)
	for name, b := range map[string]string{
		"another server's": other.Mint("acct-a"),
		"tampered":         tampered,
		"made up":          "gAAAAABpZmFrZXVwc3RyZWFtLWNvbXBhY3Rpb24tc3VtbWFyeS1ub3QtYS1yZWFsLWNpcGhlcnRleHQ=",
		"not base64":       "not a blob",
		"empty":            "",
	} {
		if o, ok := s.Owner(b); ok {
			t.Errorf("%s blob read as %q", name, o)
		}
	}
}

// TestReasoningMintedForTheCaller runs the three HTTP shapes of a Responses
// answer and checks that each reasoning item gets one blob, the same in
// output_item.done and in the final output, minted for the caller, and
// that nothing else of the recorded event changed.
func TestReasoningMintedForTheCaller(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	s.SetDefault(Behavior{Stream: "reasoning_summary.sse"})
	const rsID = "rs_68b1f6b1e4f38190d5a6b7c8d9e0f1a20c8f2a7d5e3b1c9a"
	blobMember := regexp.MustCompile(`,"encrypted_content":"[^"]*"`)
	recorded := fixtureEvents(t, "reasoning_summary.sse", recordedModel, "gpt-test")

	// ChatGPT: the account id; API: the token.
	status, _, body := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok-a",
		`{"model":"gpt-test","stream":true,"store":false,`+includeBlobs+`,"input":"hi"}`, "chatgpt-account-id", "acct-a")
	evs := events(t, body)
	if status != 200 || len(evs) != len(recorded) {
		t.Fatalf("status %d, %d events", status, len(evs))
	}
	done, final := reasoningBlobs(t, sseData(evs))
	if len(done) != 1 || done[rsID] == "" || final[rsID] != done[rsID] || len(final) != 1 {
		t.Fatalf("blobs: done %v, final %v", done, final)
	}
	if o, ok := s.Owner(done[rsID]); !ok || o != "acct-a" || !fernetLike.MatchString(done[rsID]) {
		t.Errorf("blob %q minted for %q %v, want acct-a", done[rsID], o, ok)
	}
	for i, ev := range evs {
		if got := blobMember.ReplaceAllString(ev.data, ""); got != string(recorded[i]) {
			t.Errorf("event %d changed beyond its blob:\n got %s\nwant %s", i, ev.data, recorded[i])
		}
	}

	status, _, body = post(t, c, s.OpenAIBase()+"/responses", "sk-b", `{"model":"gpt-test","stream":true,`+includeBlobs+`,"input":"hi"}`)
	done, final = reasoningBlobs(t, sseData(events(t, body)))
	if o, _ := s.Owner(done[rsID]); status != 200 || o != "sk-b" || final[rsID] != done[rsID] {
		t.Errorf("/v1 stream: status %d, blob of %q, done %v final %v", status, o, done, final)
	}

	// Not streamed: the single Response carries it.
	status, _, body = post(t, c, s.OpenAIBase()+"/responses", "sk-b", `{"model":"gpt-test",`+includeBlobs+`,"input":"hi"}`)
	var resp struct {
		Output []outputItem `json:"output"`
	}
	if err := json.Unmarshal(body, &resp); err != nil || status != 200 {
		t.Fatalf("status %d %v: %s", status, err, body)
	}
	if len(resp.Output) != 2 || resp.Output[0].EncryptedContent == nil || resp.Output[1].EncryptedContent != nil {
		t.Fatalf("assembled output %s", body)
	}
	if o, _ := s.Owner(*resp.Output[0].EncryptedContent); o != "sk-b" {
		t.Errorf("assembled blob minted for %q", o)
	}

	// Without the include, nothing is minted.
	_, _, body = post(t, c, s.ChatGPTBase()+"/codex/responses", "tok-a", `{"model":"gpt-test","stream":true,"input":"hi"}`)
	if bytes.Contains(body, []byte("encrypted_content")) {
		t.Errorf("minted without include: %s", body)
	}
}

// TestEncryptedContentIsAccountBound sends a blob back to the account that
// minted it (accepted), to another (refused in each BlobRefusal form), and
// one the fake never minted (refused).
func TestEncryptedContentIsAccountBound(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	url := s.ChatGPTBase() + "/codex/responses"
	blob := s.Mint("acct-a")
	req := `{"model":"gpt-test","stream":true,"store":false,` + includeBlobs + `,"input":` + reasoningInput("rs_1", blob) + `}`

	if status, _, body := post(t, c, url, "tok", req, "chatgpt-account-id", "acct-a"); status != 200 || !bytes.Contains(body, []byte("response.completed")) {
		t.Fatalf("own blob: %d %s", status, body)
	}
	status, h, body := post(t, c, url, "tok", req, "chatgpt-account-id", "acct-b")
	if status != 400 || string(body) != refusedBody(blob, `"invalid_encrypted_content"`) || h.Get("Content-Type") != "application/json" {
		t.Errorf("other account: %d %s\nwant %s", status, body, refusedBody(blob, `"invalid_encrypted_content"`))
	}
	// Without chatgpt-account-id the token is the account.
	if status, _, _ := post(t, c, url, "acct-a", req); status != 200 {
		t.Errorf("token acct-a: %d", status)
	}
	if status, _, _ := post(t, c, url, "acct-b", req); status != 400 {
		t.Errorf("token acct-b: %d", status)
	}
	// Not this fake's at all, even an empty string.
	for _, foreign := range []string{"gAAAAABpZmFrZXVwc3RyZWFtLWNvbXBhY3Rpb24tc3VtbWFyeS1ub3QtYS1yZWFsLWNpcGhlcnRleHQ=", New(testdata).Mint("acct-a"), ""} {
		r := `{"model":"gpt-test","stream":true,"input":` + reasoningInput("rs_1", "") + `}`
		r = strings.Replace(r, `"summary"`, `"encrypted_content":"`+foreign+`","summary"`, 1)
		if status, _, body := post(t, c, url, "tok", r, "chatgpt-account-id", "acct-a"); status != 400 || !bytes.Contains(body, []byte("invalid_encrypted_content")) {
			t.Errorf("foreign blob %q: %d %s", foreign, status, body)
		}
	}

	// code null.
	s.Set("tok-null", Behavior{BlobRefusal: BlobRefusalNull})
	if status, _, body := post(t, c, url, "tok-null", req, "chatgpt-account-id", "acct-b"); status != 400 || string(body) != refusedBody(blob, "null") {
		t.Errorf("null form: %d %s", status, body)
	}

	// A failed stream, before any output.
	s.Set("tok-stream", Behavior{BlobRefusal: BlobRefusalStream, Headers: map[string]string{"x-codex-primary-used-percent": "3"}})
	status, h, body = post(t, c, url, "tok-stream", req, "chatgpt-account-id", "acct-b")
	evs := events(t, body)
	if status != 200 || h.Get("Content-Type") != "text/event-stream" || len(evs) != 2 || evs[0].typ != "response.created" || evs[1].typ != "response.failed" {
		t.Fatalf("stream form: %d %s", status, body)
	}
	var failed struct {
		Response struct {
			Status string `json:"status"`
			Model  string `json:"model"`
			Error  struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
			Output []any `json:"output"`
		} `json:"response"`
	}
	if err := json.Unmarshal([]byte(evs[1].data), &failed); err != nil {
		t.Fatal(err)
	}
	f := failed.Response
	wantMsg := "The encrypted content " + blob[:4] + "..." + blob[len(blob)-4:] + " could not be verified. Reason: Encrypted content could not be decrypted or parsed."
	if f.Status != "failed" || f.Error.Code != "invalid_encrypted_content" || f.Error.Message != wantMsg || len(f.Output) != 0 || f.Model != "gpt-test" {
		t.Errorf("response.failed: %+v", f)
	}
	// The stream form needs a stream: a plain /v1 request gets the 400.
	v1 := strings.Replace(req, `"stream":true,`, "", 1)
	if status, _, body := post(t, c, s.OpenAIBase()+"/responses", "tok-stream", v1, "chatgpt-account-id", "acct-b"); status != 400 || string(body) != refusedBody(blob, `"invalid_encrypted_content"`) {
		t.Errorf("stream form without a stream: %d %s", status, body)
	}

	// A typo in BlobRefusal fails loudly.
	s.Set("tok-typo", Behavior{BlobRefusal: "streem"})
	if status, _, body := post(t, c, url, "tok-typo", req, "chatgpt-account-id", "acct-b"); status != 500 || !bytes.Contains(body, []byte("streem")) {
		t.Errorf("unknown BlobRefusal: %d %s", status, body)
	}
}

// TestCompactionIsAccountBound: the compact routes mint their compaction
// item for the caller, and every compaction type in any input must be the
// caller's.
func TestCompactionIsAccountBound(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	for _, route := range []string{s.ChatGPTBase() + "/codex/responses/compact", s.OpenAIBase() + "/responses/compact"} {
		status, _, body := post(t, c, route, "tok", `{"model":"gpt-test","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}]}`,
			"chatgpt-account-id", "acct-a")
		var out struct {
			Output []outputItem `json:"output"`
		}
		if err := json.Unmarshal(body, &out); err != nil || status != 200 || len(out.Output) != 2 {
			t.Fatalf("%s: %d %v %s", route, status, err, body)
		}
		cmp := out.Output[1]
		if cmp.Type != "compaction" || cmp.ID != "cmp_68b1f4c25e7c8190a2c4e6f8b1d3f5a70c8f2a7d5e3b1c9a" || cmp.EncryptedContent == nil {
			t.Fatalf("%s: compaction item %+v", route, cmp)
		}
		if o, _ := s.Owner(*cmp.EncryptedContent); o != "acct-a" || !fernetLike.MatchString(*cmp.EncryptedContent) {
			t.Errorf("%s: compaction minted for %q", route, o)
		}
	}

	blob := s.Mint("acct-a")
	for _, typ := range []string{"compaction", "compaction_summary", "context_compaction"} {
		in := `[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"` + typ + `","id":"cmp_1","encrypted_content":"` + blob + `"}]`
		for _, route := range []string{s.ChatGPTBase() + "/codex/responses", s.OpenAIBase() + "/responses", s.ChatGPTBase() + "/codex/responses/compact"} {
			req := `{"model":"gpt-test","stream":true,"input":` + in + `}`
			if status, _, body := post(t, c, route, "tok", req, "chatgpt-account-id", "acct-a"); status != 200 {
				t.Errorf("%s %s, own: %d %s", route, typ, status, body)
			}
			if status, _, body := post(t, c, route, "tok", req, "chatgpt-account-id", "acct-b"); status != 400 || string(body) != refusedBody(blob, `"invalid_encrypted_content"`) {
				t.Errorf("%s %s, other account: %d %s", route, typ, status, body)
			}
		}
	}
	// A compaction item must carry its blob.
	status, _, body := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok",
		`{"model":"gpt-test","stream":true,"input":[{"type":"message","role":"user","content":[]},{"type":"compaction","id":"cmp_1"}]}`)
	if status != 400 || !bytes.Contains(body, []byte(`"param":"input[1].encrypted_content"`)) || !bytes.Contains(body, []byte(`'input[1].encrypted_content'`)) {
		t.Errorf("compaction without its blob: %d %s", status, body)
	}
}

// TestItemIdsAreLookups: with store false a reasoning item's id without its
// blob, or an item_reference, names an item nobody stored.
func TestItemIdsAreLookups(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	const want = `{"error":{"message":"Item with id 'rs_abc' not found. Items are not persisted when ` + "`store`" + ` is set to false. Try again with ` + "`store`" +
		` set to true, or remove this item from your input.","type":"invalid_request_error","param":"input","code":null}}`
	idOnly := reasoningInput("rs_abc", "")
	cases := []struct {
		name, url, body string
		status          int
	}{
		{"codex", s.ChatGPTBase() + "/codex/responses", `{"model":"m","stream":true,"input":` + idOnly + `}`, 404},
		{"codex compact", s.ChatGPTBase() + "/codex/responses/compact", `{"model":"m","input":` + idOnly + `}`, 404},
		{"v1 store false", s.OpenAIBase() + "/responses", `{"model":"m","store":false,"input":` + idOnly + `}`, 404},
		{"v1 stored", s.OpenAIBase() + "/responses", `{"model":"m","input":` + idOnly + `}`, 200},
		{"v1 store true", s.OpenAIBase() + "/responses", `{"model":"m","store":true,"input":` + idOnly + `}`, 200},
		{"codex, no id", s.ChatGPTBase() + "/codex/responses", `{"model":"m","stream":true,"input":` + strings.Replace(idOnly, `"id":"rs_abc",`, "", 1) + `}`, 200},
		{"codex, with its blob", s.ChatGPTBase() + "/codex/responses", `{"model":"m","stream":true,"input":` + reasoningInput("rs_abc", s.Mint("tok")) + `}`, 200},
	}
	for _, tc := range cases {
		status, _, body := post(t, c, tc.url, "tok", tc.body)
		if status != tc.status || (tc.status == 404 && string(body) != want) {
			t.Errorf("%s: %d %s", tc.name, status, body)
		}
	}
	status, _, body := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok", `{"model":"m","stream":true,"input":[{"type":"item_reference","id":"msg_9"}]}`)
	if status != 404 || !bytes.Contains(body, []byte(`Item with id 'msg_9' not found.`)) {
		t.Errorf("item_reference: %d %s", status, body)
	}
}

// TestCodexHTTPRules: previous_response_id and store:true on the Codex
// route over HTTP, and the 429 of a plan without Codex.
func TestCodexHTTPRules(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	url := s.ChatGPTBase() + "/codex/responses"
	status, _, body := post(t, c, url, "tok", `{"model":"m","stream":true,"store":false,"previous_response_id":"resp_abc","input":[]}`)
	var e struct {
		Error struct{ Message, Type, Param, Code string } `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	if status != 400 || e.Error.Code != "previous_response_not_found" || e.Error.Message != "Previous response with id 'resp_abc' not found." ||
		e.Error.Param != "previous_response_id" || e.Error.Type != "invalid_request_error" {
		t.Errorf("previous_response_id over HTTP: %d %s", status, body)
	}
	// api.openai.com would look it up in its store: the fake does not judge.
	if status, _, _ := post(t, c, s.OpenAIBase()+"/responses", "tok", `{"model":"m","stream":true,"previous_response_id":"resp_abc","input":[]}`); status != 200 {
		t.Errorf("previous_response_id on /v1: %d", status)
	}

	status, h, body := post(t, c, url, "tok", `{"model":"m","stream":true,"store":true,"input":"hi"}`)
	if status != 400 || string(body) != `{"detail":"Store must be set to false"}` || h.Get("Content-Type") != "application/json" {
		t.Errorf("store true: %d %s", status, body)
	}
	if status, _, _ := post(t, c, s.OpenAIBase()+"/responses", "tok", `{"model":"m","stream":true,"store":true,"input":"hi"}`); status != 200 {
		t.Errorf("store true on /v1: %d", status)
	}

	s.Set("free", Behavior{Status: 429, ErrorFixture: "usage_not_included_429.json"})
	status, _, body = post(t, c, url, "free", `{"model":"m","stream":true,"input":"hi"}`)
	var u struct {
		Error struct{ Type, Code, Message, PlanType string } `json:"error"`
	}
	if err := json.Unmarshal(body, &u); err != nil || status != 429 || u.Error.Type != "usage_not_included" || u.Error.Code != "usage_not_included" ||
		!strings.HasPrefix(u.Error.Message, "Codex is not included in your plan") {
		t.Errorf("usage_not_included 429: %d %s", status, body)
	}
	if !bytes.Contains(body, []byte(`"plan_type":"free"`)) {
		t.Errorf("no plan_type: %s", body)
	}
}

// TestResponsesLite: a Lite request needs its marker, over HTTP and on a
// socket (handshake header or frame metadata).
func TestResponsesLite(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	context := `{"model":"m","stream":true,"instructions":"","reasoning":{"effort":"low","context":"all_turns"},"input":"hi"}`
	tools := `{"model":"m","stream":true,"input":[{"type":"additional_tools","tools":[]},{"type":"message","role":"user","content":[]}]}`
	for _, url := range []string{s.ChatGPTBase() + "/codex/responses", s.OpenAIBase() + "/responses"} {
		status, _, body := post(t, c, url, "tok", context)
		if status != 400 || !bytes.Contains(body, []byte(`"message":"Unsupported parameter: 'reasoning.context'."`)) || !bytes.Contains(body, []byte(`"type":"invalid_request_error"`)) {
			t.Errorf("%s reasoning.context without the marker: %d %s", url, status, body)
		}
		status, _, body = post(t, c, url, "tok", tools)
		if status != 400 || !bytes.Contains(body, []byte(`Invalid value: 'additional_tools'`)) || !bytes.Contains(body, []byte(`"param":"input[0].type"`)) {
			t.Errorf("%s additional_tools without the marker: %d %s", url, status, body)
		}
		for _, b := range []string{context, tools} {
			if status, _, body := post(t, c, url, "tok", b, "X-OpenAI-Internal-Codex-Responses-Lite", "true"); status != 200 {
				t.Errorf("%s with the marker: %d %s", url, status, body)
			}
		}
	}
	// On a socket.
	frame := `{"type":"response.create","model":"m","reasoning":{"context":"all_turns"},"input":[]}`
	marked := `{"type":"response.create","model":"m","reasoning":{"context":"all_turns"},"input":[],"client_metadata":{"ws_request_header_x_openai_internal_codex_responses_lite":"true"}}`
	ws := dial(t, s, "/backend-api/codex/responses", "tok")
	if e := parseErrorFrame(t, ws.turn(frame)[0].data); e.Status != 400 || e.Error.Message != "Unsupported parameter: 'reasoning.context'." {
		t.Errorf("socket without the marker: %+v", e)
	}
	if got := ws.turn(marked); frameType(got[len(got)-1].data) != "response.completed" {
		t.Errorf("frame marked: %s", frameTypes(got))
	}
	ws = dial(t, s, "/backend-api/codex/responses", "tok", "X-OpenAI-Internal-Codex-Responses-Lite", "true")
	if got := ws.turn(frame); frameType(got[len(got)-1].data) != "response.completed" {
		t.Errorf("handshake marked: %s", frameTypes(got))
	}
}

// TestSocketHandshakeAnswer: the 101 carries what Codex reads, and the turn
// state is bound to the handshake's account.
func TestSocketHandshakeAnswer(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	var states []string
	for _, acct := range []string{"acct-a", "acct-a"} {
		_, resp, _ := handshake(t, s, "/backend-api/codex/responses", "tok", "chatgpt-account-id", acct)
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatal(resp.Status)
		}
		h := resp.Header
		if h.Get("x-models-etag") != codexModelsETag || h.Get("openai-model") != "gpt-5-codex" || h.Get("x-reasoning-included") != "true" {
			t.Errorf("101 headers %v", h)
		}
		ts := h.Get("x-codex-turn-state")
		if o, ok := s.Owner(ts); !ok || o != acct {
			t.Errorf("turn state %q minted for %q %v, want %s", ts, o, ok, acct)
		}
		states = append(states, ts)
	}
	if states[0] == states[1] {
		t.Error("two sockets got the same turn state")
	}
	_, resp, _ := handshake(t, s, "/v1/responses", "sk-key")
	if o, _ := s.Owner(resp.Header.Get("x-codex-turn-state")); o != "sk-key" {
		t.Errorf("turn state without an account id minted for %q, want the token", o)
	}
}

// TestSocketRules: minting, verifying, lookups and store on a socket, in
// frames.
func TestSocketRules(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	s.SetDefault(Behavior{Stream: "reasoning_summary.sse"})
	const rsID = "rs_68b1f6b1e4f38190d5a6b7c8d9e0f1a20c8f2a7d5e3b1c9a"
	a := dial(t, s, "/backend-api/codex/responses", "tok", "chatgpt-account-id", "acct-a")
	got := a.turn(`{"type":"response.create","model":"m","store":false,` + includeBlobs + `,"input":[]}`)
	var payloads []string
	for _, f := range got {
		payloads = append(payloads, string(f.data))
	}
	done, final := reasoningBlobs(t, payloads)
	blob := done[rsID]
	if o, _ := s.Owner(blob); o != "acct-a" || final[rsID] != blob {
		t.Fatalf("socket blobs: done %v final %v, owner %q", done, final, o)
	}
	next := `{"type":"response.create","model":"m",` + includeBlobs + `,"input":` + reasoningInput(rsID, blob) + `}`
	if got := a.turn(next); frameType(got[len(got)-1].data) != "response.completed" {
		t.Errorf("own blob on the socket: %s", frameTypes(got))
	}

	b := dial(t, s, "/backend-api/codex/responses", "tok", "chatgpt-account-id", "acct-b")
	e := parseErrorFrame(t, b.turn(next)[0].data)
	wantMsg := "The encrypted content " + blob[:4] + "..." + blob[len(blob)-4:] + " could not be verified. Reason: Encrypted content could not be decrypted or parsed."
	if e.Status != 400 || e.Error.Code != "invalid_encrypted_content" || e.Error.Type != "invalid_request_error" || e.Error.Message != wantMsg {
		t.Errorf("other account's blob: %+v", e)
	}
	s.Set("tok", Behavior{BlobRefusal: BlobRefusalStream})
	got = b.turn(next)
	if frameTypes(got) != "response.created,response.failed" || !bytes.Contains(got[1].data, []byte(`"code":"invalid_encrypted_content"`)) {
		t.Errorf("stream form on a socket: %s", frameTypes(got))
	}
	s.Set("tok", Behavior{BlobRefusal: BlobRefusalNull})
	if raw := b.turn(next)[0].data; !bytes.Contains(raw, []byte(`"code":null`)) || !bytes.Contains(raw, []byte("could not be verified")) {
		t.Errorf("null form on a socket: %s", raw)
	}
	s.Set("tok", Behavior{})

	// Lookups, and store, on the Codex socket.
	e = parseErrorFrame(t, b.turn(`{"type":"response.create","model":"m","input":` + reasoningInput("rs_x", "") + `}`)[0].data)
	if e.Status != 404 || !strings.HasPrefix(e.Error.Message, "Item with id 'rs_x' not found.") {
		t.Errorf("lookup on a socket: %+v", e)
	}
	e = parseErrorFrame(t, b.turn(`{"type":"response.create","model":"m","store":true,"input":[]}`)[0].data)
	if e.Status != 400 || e.Error.Message != "Store must be set to false" {
		t.Errorf("store true on a socket: %+v", e)
	}
	// The /v1 socket stores unless told not to.
	v := dial(t, s, "/v1/responses", "tok")
	if got := v.turn(`{"type":"response.create","model":"m","store":true,"input":` + reasoningInput("rs_x", "") + `}`); frameType(got[len(got)-1].data) != "response.completed" {
		t.Errorf("/v1 socket with store: %s", frameTypes(got))
	}
	if e := parseErrorFrame(t, v.turn(`{"type":"response.create","model":"m","store":false,"input":` + reasoningInput("rs_x", "") + `}`)[0].data); e.Status != 404 {
		t.Errorf("/v1 socket without store: %+v", e)
	}
}

// TestSocketLifetime: a socket past its lifetime refuses every
// response.create with the backend's frame, and stays open.
func TestSocketLifetime(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	c := dial(t, s, "/backend-api/codex/responses", "tok")
	// The default lifetime is an hour: the socket serves.
	if got := c.turn(create); frameType(got[len(got)-1].data) != "response.completed" {
		t.Fatalf("young socket: %s", frameTypes(got))
	}
	// The lifetime is read at each frame: shortened now, it is past once
	// the socket is older than that.
	const life = 20 * time.Millisecond
	s.Set("tok", Behavior{SocketLifetime: life})
	time.Sleep(life + 10*time.Millisecond)
	const want = `{"type":"error","status":400,"error":{"type":"invalid_request_error","code":"websocket_connection_limit_reached",` +
		`"message":"Responses websocket connection limit reached (60 minutes). Create a new websocket connection to continue.","param":null},"headers":{}}`
	for i := range 2 {
		if got := c.turn(create); len(got) != 1 || string(got[0].data) != want {
			t.Errorf("old socket, request %d: %s", i+1, got[0].data)
		}
		// However the Behavior changes then, an expired socket stays so.
		s.Set("tok", Behavior{})
	}
	c.writeFrame(true, opPing, []byte("p"), 0)
	if op, _, err := c.readFrame(); err != nil || op != opPong {
		t.Errorf("the expired socket is closed: %d %v", op, err)
	}
	// A new socket serves.
	if got := dial(t, s, "/backend-api/codex/responses", "tok").turn(create); frameType(got[len(got)-1].data) != "response.completed" {
		t.Errorf("new socket: %s", frameTypes(got))
	}
	// A lifetime long enough is not reached.
	s.Set("tok", Behavior{SocketLifetime: time.Minute})
	if got := c.turn(create); len(got) != 1 {
		t.Errorf("expired socket served again: %s", frameTypes(got))
	}
}

// TestToolRoundTripCarriesReasoning: with ToolStream
// reasoning_tool_call.sse the round trip's second request carries the
// first's reasoning, readable only by the same account.
func TestToolRoundTripCarriesReasoning(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	s.SetDefault(Behavior{ToolRoundTrip: true, ToolStream: "reasoning_tool_call.sse"})
	url := s.ChatGPTBase() + "/codex/responses"
	_, _, body := post(t, c, url, "tok", `{"model":"m","stream":true,`+includeBlobs+`,"input":"weather in Paris?"}`, "chatgpt-account-id", "acct-a")
	evs := events(t, body)
	var fin struct {
		Response struct {
			Output []json.RawMessage `json:"output"`
		} `json:"response"`
	}
	if err := json.Unmarshal([]byte(evs[len(evs)-1].data), &fin); err != nil || len(fin.Response.Output) != 2 {
		t.Fatalf("first answer: %v %s", err, evs[len(evs)-1].data)
	}
	var rs, fc outputItem
	_ = json.Unmarshal(fin.Response.Output[0], &rs)
	_ = json.Unmarshal(fin.Response.Output[1], &fc)
	if rs.Type != "reasoning" || rs.EncryptedContent == nil || fc.Type != "function_call" {
		t.Fatalf("first answer output: %s", evs[len(evs)-1].data)
	}
	second := `{"model":"m","stream":true,` + includeBlobs + `,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"weather in Paris?"}]},` +
		string(fin.Response.Output[0]) + `,` + string(fin.Response.Output[1]) + `,{"type":"function_call_output","call_id":"call_123","output":"sunny"}]}`
	status, _, body := post(t, c, url, "tok", second, "chatgpt-account-id", "acct-a")
	if status != 200 || !bytes.Contains(body, []byte(helloText)) {
		t.Errorf("same account: %d %s", status, body)
	}
	if status, _, body := post(t, c, url, "tok", second, "chatgpt-account-id", "acct-b"); status != 400 || !bytes.Contains(body, []byte("invalid_encrypted_content")) {
		t.Errorf("another account: %d %s", status, body)
	}
}

func TestReasoningItems(t *testing.T) {
	t.Parallel()
	data := []byte(`{"type":"x","a":[{"type":"reasoning","id":"r1","summary":[{"type":"summary_text","text":"{\"type\":\"reasoning\"}"}]},` +
		`{"id":"m1","type":"message","content":[{"type":"reasoning"}]},{"type":"reasoning","encrypted_content":null,"id":"r2"}],"type2":{}}`)
	got := reasoningItems(data)
	if len(got) != 3 {
		t.Fatalf("found %+v", got)
	}
	if got[0].id != "r1" || data[got[0].end] != '}' || got[0].hasBlob || !bytes.HasSuffix(data[:got[0].end], []byte(`"}]`)) {
		t.Errorf("first: %+v", got[0])
	}
	if got[1].id != "" || data[got[1].end] != '}' {
		t.Errorf("nested: %+v", got[1])
	}
	if got[2].id != "r2" || !got[2].hasBlob {
		t.Errorf("with a blob member: %+v", got[2])
	}
}

// Remote compaction v2: a Responses request whose input ends in a
// compaction_trigger gets a stream of exactly one compaction item, minted
// for the caller, whatever else the Behavior answers.
func TestCompactionV2(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	s.SetDefault(Behavior{ToolRoundTrip: true})
	body := `{"model":"gpt-test","stream":true,"store":false,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"compaction_trigger"}]}`
	status, _, out := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok", body, "chatgpt-account-id", "acct-a")
	if status != 200 {
		t.Fatalf("status %d: %s", status, out)
	}
	var items []outputItem
	for _, d := range sseData(events(t, out)) {
		var ev struct {
			Type string     `json:"type"`
			Item outputItem `json:"item"`
		}
		if json.Unmarshal([]byte(d), &ev) == nil && ev.Type == "response.output_item.done" {
			items = append(items, ev.Item)
		}
	}
	if len(items) != 1 || items[0].Type != "compaction" || items[0].EncryptedContent == nil {
		t.Fatalf("output items: %+v", items)
	}
	if o, _ := s.Owner(*items[0].EncryptedContent); o != "acct-a" {
		t.Errorf("compaction minted for %q", o)
	}
	if strings.Contains(string(out), compactionPlaceholder) {
		t.Error("the placeholder reached the client")
	}
}

// Behavior.PromptCache reports cached tokens for the leading turns the
// same account was sent before, and only for that account.
func TestPromptCacheIsPerAccount(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	s.SetDefault(Behavior{PromptCache: true})
	one := `{"type":"message","role":"user","content":[{"type":"input_text","text":"one"}]}`
	two := `{"type":"message","role":"user","content":[{"type":"input_text","text":"two"}]}`
	usage := func(token string, items ...string) (in, cached int64) {
		body := `{"model":"gpt-test","stream":true,"input":[` + strings.Join(items, ",") + `]}`
		status, _, out := post(t, c, s.OpenAIBase()+"/responses", token, body)
		if status != 200 {
			t.Fatalf("status %d: %s", status, out)
		}
		for _, d := range sseData(events(t, out)) {
			var ev struct {
				Type     string `json:"type"`
				Response struct {
					Usage struct {
						Input   int64 `json:"input_tokens"`
						Details struct {
							Cached int64 `json:"cached_tokens"`
						} `json:"input_tokens_details"`
					} `json:"usage"`
				} `json:"response"`
			}
			if json.Unmarshal([]byte(d), &ev) == nil && ev.Type == "response.completed" {
				return ev.Response.Usage.Input, ev.Response.Usage.Details.Cached
			}
		}
		t.Fatal("no response.completed")
		return 0, 0
	}
	in1, c1 := usage("a", one)
	in2, c2 := usage("a", one, two)
	_, c3 := usage("b", one, two)
	if want := int64((len(one) + 3) / 4); c1 != 0 || in1 != want || c2 != want || in2 <= in1 || c3 != 0 {
		t.Errorf("first %d/%d, second %d/%d (want %d cached), another account's %d", c1, in1, c2, in2, want, c3)
	}
}

// TestContextWindow: an input over the model's context window is refused
// as each upstream refuses it: the ChatGPT backend fails the stream (over
// HTTP and on a socket), api.openai.com answers 400 before any stream.
func TestContextWindow(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	const msg = "Your input exceeds the context window of this model. Please adjust your input and try again."
	s.Set("tok", Behavior{ContextWindow: 100})
	over := `{"model":"m","stream":true,"store":false,"input":"` + strings.Repeat("w", 400) + `"}`
	under := `{"model":"m","stream":true,"store":false,"input":"` + strings.Repeat("w", 390) + `"}`

	status, h, body := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok", over)
	evs := events(t, body)
	if status != 200 || h.Get("Content-Type") != "text/event-stream" || len(evs) != 3 || evs[2].typ != "response.failed" ||
		!strings.Contains(evs[2].data, `"error":{"code":"context_length_exceeded","message":"`+msg+`"}`) {
		t.Errorf("codex route: %d %s", status, body)
	}
	if status, _, body := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok", under); status != 200 || !bytes.Contains(body, []byte("response.completed")) {
		t.Errorf("under the window: %d %s", status, body)
	}
	for _, req := range []string{over, strings.Replace(over, `"stream":true,`, "", 1)} {
		status, _, body := post(t, c, s.OpenAIBase()+"/responses", "tok", req)
		var e struct {
			Error struct{ Message, Type, Param, Code string } `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || status != 400 || e.Error.Code != "context_length_exceeded" ||
			e.Error.Type != "invalid_request_error" || e.Error.Param != "input" || e.Error.Message != msg {
			t.Errorf("/v1: %d %s", status, body)
		}
	}
	sk := dial(t, s, "/backend-api/codex/responses", "tok")
	got := sk.turn(`{"type":"response.create","model":"m","input":"` + strings.Repeat("w", 400) + `"}`)
	if frameTypes(got) != "response.created,response.in_progress,response.failed" || !bytes.Contains(got[2].data, []byte(`"code":"context_length_exceeded"`)) {
		t.Errorf("socket: %s", frameTypes(got))
	}
	// The default window is the catalog's: an ordinary request passes.
	s.Set("tok", Behavior{})
	if status, _, _ := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok", over); status != 200 {
		t.Errorf("default window: %d", status)
	}
	if status, _, body := post(t, c, s.OpenAIBase()+"/responses", "tok", `{"model":"m","input":"`+strings.Repeat("w", 4*defaultContextWindow)+`"}`); status != 400 ||
		!bytes.Contains(body, []byte("context_length_exceeded")) {
		t.Errorf("over the default window: %d %.200s", status, body)
	}
}
