package proxy

import (
	"bytes"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/proxy/jsonscan"
	"github.com/rotorproxy/rotor/proxy/sse"
)

// scannedRequest is a request for body, read as the forward loop reads it.
func scannedRequest(body []byte) *request {
	r := &request{header: new(fasthttp.RequestHeader), body: body}
	jsonscan.Scan(body, &r.scan)
	return r
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
