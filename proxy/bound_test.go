package proxy

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/proxy/jsonscan"
	"github.com/rotorproxy/rotor/proxy/sse"
)

// A conversation of two accounts' blobs, as Codex sends it: a user
// message, reasoning minted by A (with a summary), reasoning minted by B
// (summary empty), a compaction minted by A, and the new user message.
const boundBody = `{"model":"gpt-5-codex","input":[` +
	`{"type":"message","role":"user","content":[{"type":"input_text","text":"one"}]},` +
	`{"type":"reasoning","id":"rs_a","status":"completed","summary":[{"type":"summary_text","text":"thinking about one"}],"encrypted_content":"gAAAA-a-1="},` +
	`{"type":"reasoning", "summary":[], "encrypted_content":"gAAAA-b-1="},` +
	`{"type":"compaction","id":"cmp_a","encrypted_content":"gAAAA-a-cmp="},` +
	`{"type":"message","role":"user","content":[{"type":"input_text","text":"two"}]}` +
	`],"include":["reasoning.encrypted_content"],"store":false,"stream":true}`

// scannedRequest is a request for body, read as the forward loop reads it.
func scannedRequest(body []byte) *request {
	r := &request{header: new(fasthttp.RequestHeader), body: body}
	jsonscan.Scan(body, &r.scan)
	return r
}

func boundServer() *Server {
	s := &Server{}
	s.mints.learn("gAAAA-a-1=", "A")
	s.mints.learn("gAAAA-a-cmp=", "A")
	s.mints.learn("gAAAA-b-1=", "B")
	return s
}

func TestUnbindTakesOutWhatAnotherAccountMinted(t *testing.T) {
	s := boundServer()
	r := scannedRequest([]byte(boundBody))

	// To B: A's reasoning keeps its summary only; A's compaction becomes a
	// note and the context is cut; B's own blob goes as it was sent.
	out := s.unbind(r, "B", r.body, nil)
	items := gjson.GetBytes(out, "input").Array()
	if len(items) != 5 {
		t.Fatalf("input to B has %d items: %s", len(items), out)
	}
	if it := items[1]; it.Get("encrypted_content").Exists() || it.Get("id").Exists() || it.Get("status").Exists() ||
		it.Get("summary.0.text").Str != "thinking about one" || it.Get("type").Str != "reasoning" {
		t.Errorf("A's reasoning sent to B: %s", it.Raw)
	}
	if items[2].Raw != `{"type":"reasoning", "summary":[], "encrypted_content":"gAAAA-b-1="}` {
		t.Errorf("B's own reasoning changed: %s", items[2].Raw)
	}
	if it := items[3]; it.Get("role").Str != "developer" || !strings.Contains(it.Get("content.0.text").Str, "another account") {
		t.Errorf("A's compaction sent to B: %s", it.Raw)
	}
	if !r.contextCut {
		t.Error("a compaction left behind did not cut the context")
	}
	if !bytes.HasSuffix(out, []byte(`],"include":["reasoning.encrypted_content"],"store":false,"stream":true}`)) ||
		!bytes.HasPrefix(out, []byte(`{"model":"gpt-5-codex","input":[{"type":"message"`)) {
		t.Errorf("the members around input changed: %s", out)
	}

	// To A: B's reasoning has no summary left: dropped; A's own go as sent.
	out = s.unbind(r, "A", r.body, nil)
	items = gjson.GetBytes(out, "input").Array()
	if len(items) != 4 || !strings.Contains(string(out), `"encrypted_content":"gAAAA-a-1="`) ||
		!strings.Contains(string(out), `{"type":"compaction","id":"cmp_a","encrypted_content":"gAAAA-a-cmp="}`) ||
		strings.Contains(string(out), "gAAAA-b-1=") || r.contextCut {
		t.Errorf("input to A (cut %v): %s", r.contextCut, out)
	}
}

func TestUnbindLeavesABodyWithNothingForeignAsItIs(t *testing.T) {
	s := boundServer()
	body := []byte(strings.ReplaceAll(strings.ReplaceAll(boundBody, "gAAAA-b-1=", "gAAAA-unknown="), "gAAAA-a-cmp=", "gAAAA-a-1="))
	r := scannedRequest(body)
	if out := s.unbind(r, "A", body, nil); &out[0] != &body[0] || len(out) != len(body) {
		t.Errorf("a body with nothing foreign was copied or changed: %s", out)
	}
	// Once refused, every blob goes, the unknown and A's own alike.
	r.unbindAll = true
	if out := s.unbind(r, "A", body, nil); bytes.Contains(out, []byte(`"encrypted_content":`)) {
		t.Errorf("unbindAll left a blob: %s", out)
	}
}

func TestDisownedBlobsAreTakenOutForEveryAccount(t *testing.T) {
	s := boundServer()
	body := []byte(strings.ReplaceAll(boundBody, "gAAAA-b-1=", "gAAAA-unknown="))
	r := scannedRequest(body)
	s.disown(r)
	if owner, _ := s.mints.owner("gAAAA-a-1="); owner != "A" {
		t.Errorf("a known blob was disowned: owner %q", owner)
	}
	next := scannedRequest(body)
	for _, acct := range []string{"A", "B"} {
		if out := s.unbind(next, acct, body, nil); bytes.Contains(out, []byte("gAAAA-unknown=")) {
			t.Errorf("a refused blob still goes to %s: %s", acct, out)
		}
	}
}

func TestMintsAreBounded(t *testing.T) {
	var m mints
	for i := range 3 * mintGeneration {
		m.learn("blob-"+strings.Repeat("x", i%7)+string(rune(i)), "A")
	}
	if n := len(m.cur) + len(m.old); n > 2*mintGeneration {
		t.Errorf("mints hold %d blobs, more than %d", n, 2*mintGeneration)
	}
	m.learn("last", "B")
	if o, ok := m.owner("last"); !ok || o != "B" {
		t.Errorf("the newest blob is forgotten: %q %v", o, ok)
	}
}

func TestEachAccountIsShownItsOwnInstallationID(t *testing.T) {
	ids := newIdentities([]byte("home-secret"))
	a, b := ids.of("acct-a"), ids.of("acct-b")
	if a == b || a != newIdentities([]byte("home-secret")).of("acct-a") || a == newIdentities([]byte("other")).of("acct-a") {
		t.Fatalf("ids: a %s, b %s", a, b)
	}
	if len(a) != 36 || a[14] != '4' || strings.Count(a, "-") != 4 {
		t.Errorf("not UUID-shaped: %s", a)
	}
	const client = "0b8e1c55-7a3e-4f6b-9d0c-1e2f3a4b5c6d"
	s := &Server{identities: ids}
	h := new(fasthttp.RequestHeader)
	h.Set(installationHeader, client)
	body := []byte(`{"client_metadata":{"x-codex-installation-id":"` + client + `"},"input":[]}`)
	r := &request{header: h, body: body}
	out := s.ownIdentity(r, "acct-a", body)
	if bytes.Contains(out, []byte(client)) || gjson.GetBytes(out, "client_metadata.x-codex-installation-id").Str != a {
		t.Errorf("body to acct-a: %s", out)
	}
	up := new(fasthttp.RequestHeader)
	up.Set(installationHeader, client)
	up.Set("x-codex-turn-metadata", `{"installation_id":"`+client+`","turn_id":"t1"}`)
	s.ownIdentityHeaders(r, "acct-b", up.Peek, up.Set)
	if string(up.Peek(installationHeader)) != b || !strings.Contains(string(up.Peek("x-codex-turn-metadata")), b) {
		t.Errorf("headers to acct-b: %s", up.Header())
	}
}

func TestFrameMetadataBecomesHeadersOverHTTP(t *testing.T) {
	frame := []byte(`{"type":"response.create","model":"gpt-5.6","client_metadata":{"ws_request_header_x_openai_internal_codex_responses_lite":"true","ws_request_header_bad name":"x","ws_request_header_x_evil":"a\r\nb","other":"kept"},"input":[]}`)
	var sc jsonscan.Scanned
	jsonscan.Scan(frame, &sc)
	h := new(fasthttp.RequestHeader)
	body := rewriteFrame(frame, sc.Members, nil, h)
	if string(h.Peek(liteHeader)) != "true" || len(h.Peek("x-evil")) != 0 || len(h.Peek("bad name")) != 0 {
		t.Errorf("headers: %s", h.Header())
	}
	if gjson.GetBytes(body, "client_metadata.other").Str != "kept" {
		t.Errorf("client_metadata lost: %s", body)
	}
}

func TestLiteRequestsAreNotEdited(t *testing.T) {
	body := []byte(`{"model":"gpt-5.6","instructions":"","max_output_tokens":5,"reasoning":{"context":"all_turns"},"input":[{"type":"additional_tools","tools":[]}]}`)
	r := &request{op: opResponses, header: new(fasthttp.RequestHeader), body: body}
	jsonscan.Scan(body, &r.scan)
	got, form, err := chatgptAdapter{}.body(r)
	if err != nil || form != formAsIs || !bytes.Equal(got, body) {
		t.Errorf("a Lite request was edited: %s (form %v, err %v)", got, form, err)
	}
}

func TestClassifyTheBackendsLookalikes(t *testing.T) {
	h := new(fasthttp.ResponseHeader)
	for _, c := range []struct {
		status int
		body   string
		want   verdict
	}{
		{429, `{"error":{"type":"usage_not_included","code":"usage_not_included","message":"Codex is not included in your plan."}}`, verdictEntitlement},
		{429, `{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached"}}`, verdictUsageLimit},
		{400, `{"error":{"message":"The encrypted content gAAA…= could not be verified.","type":"invalid_request_error","param":null,"code":"invalid_encrypted_content"}}`, verdictForeignContent},
		{400, `{"error":{"message":"The encrypted content gAAAAB…= could not be verified. Reason: Encrypted content could not be decrypted or parsed.","type":"invalid_request_error","param":null,"code":null}}`, verdictForeignContent},
		{404, `{"error":{"message":"Item with id 'rs_1' not found. Items are not persisted when ` + "`store`" + ` is set to false.","type":"invalid_request_error","param":"input","code":null}}`, verdictClientError},
		{400, `{"detail":"Store must be set to false"}`, verdictClientError},
	} {
		if got := classify(c.status, h, []byte(c.body)); got != c.want {
			t.Errorf("%d %s: %s, want %s", c.status, c.body, failover[got].name, failover[c.want].name)
		}
	}
	if f := upstreamSpec(&failure{status: 400, body: []byte(`{"detail":"Store must be set to false"}`)}); f.Message != "Store must be set to false" {
		t.Errorf("detail message: %q", f.Message)
	}
	for _, ev := range []string{
		`{"type":"response.failed","response":{"error":{"code":"invalid_encrypted_content","message":"x"}}}`,
		`{"type":"response.failed","response":{"error":{"code":null,"message":"The encrypted content gAAA= could not be verified."}}}`,
		`{"type":"error","error":{"code":null,"message":"The encrypted content gAAA= could not be verified."}}`,
	} {
		if got := failedStreamVerdict(failureOf(sse.Read([]byte(ev))).code); got != verdictForeignContent {
			t.Errorf("%s: %s", ev, failover[got].name)
		}
	}
}
