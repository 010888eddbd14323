package backend

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/proxy/jsonscan"
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

// scannedRequest is what Unbind knows of a request for body, read as the
// forward loop reads it.
func scannedRequest(body []byte) *Sent {
	r := &Sent{Body: body, Scan: new(jsonscan.Scanned)}
	jsonscan.Scan(body, r.Scan)
	return r
}

func boundMints() *Mints {
	m := &Mints{}
	m.Learn("gAAAA-a-1=", "A")
	m.Learn("gAAAA-a-cmp=", "A")
	m.Learn("gAAAA-b-1=", "B")
	return m
}

func TestUnbindTakesOutWhatAnotherAccountMinted(t *testing.T) {
	s := boundMints()
	r := scannedRequest([]byte(boundBody))

	// To B: A's reasoning keeps its summary only; A's compaction becomes a
	// note and the context is cut; B's own blob goes as it was sent.
	out, contextCut := s.Unbind(*r, "B", r.Body, nil)
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
	if !contextCut {
		t.Error("a compaction left behind did not cut the context")
	}
	if !bytes.HasSuffix(out, []byte(`],"include":["reasoning.encrypted_content"],"store":false,"stream":true}`)) ||
		!bytes.HasPrefix(out, []byte(`{"model":"gpt-5-codex","input":[{"type":"message"`)) {
		t.Errorf("the members around input changed: %s", out)
	}

	// To A: B's reasoning has no summary left: dropped; A's own go as sent.
	out, contextCut = s.Unbind(*r, "A", r.Body, nil)
	items = gjson.GetBytes(out, "input").Array()
	if len(items) != 4 || !strings.Contains(string(out), `"encrypted_content":"gAAAA-a-1="`) ||
		!strings.Contains(string(out), `{"type":"compaction","id":"cmp_a","encrypted_content":"gAAAA-a-cmp="}`) ||
		strings.Contains(string(out), "gAAAA-b-1=") || contextCut {
		t.Errorf("input to A (cut %v): %s", contextCut, out)
	}
}

func TestUnbindLeavesABodyWithNothingForeignAsItIs(t *testing.T) {
	s := boundMints()
	body := []byte(strings.ReplaceAll(strings.ReplaceAll(boundBody, "gAAAA-b-1=", "gAAAA-unknown="), "gAAAA-a-cmp=", "gAAAA-a-1="))
	r := scannedRequest(body)
	if out, _ := s.Unbind(*r, "A", body, nil); &out[0] != &body[0] || len(out) != len(body) {
		t.Errorf("a body with nothing foreign was copied or changed: %s", out)
	}
	// Once refused, every blob goes, the unknown and A's own alike.
	r.All = true
	if out, _ := s.Unbind(*r, "A", body, nil); bytes.Contains(out, []byte(`"encrypted_content":`)) {
		t.Errorf("unbindAll left a blob: %s", out)
	}
}

func TestDisownedBlobsAreTakenOutForEveryAccount(t *testing.T) {
	s := boundMints()
	body := []byte(strings.ReplaceAll(boundBody, "gAAAA-b-1=", "gAAAA-unknown="))
	r := scannedRequest(body)
	s.Disown(r.Body, nil)
	if owner, _ := s.Owner("gAAAA-a-1="); owner != "A" {
		t.Errorf("a known blob was disowned: owner %q", owner)
	}
	next := scannedRequest(body)
	for _, acct := range []string{"A", "B"} {
		if out, _ := s.Unbind(*next, acct, body, nil); bytes.Contains(out, []byte("gAAAA-unknown=")) {
			t.Errorf("a refused blob still goes to %s: %s", acct, out)
		}
	}
}

func TestMintsAreBounded(t *testing.T) {
	var m Mints
	for i := range 3 * mintGeneration {
		m.Learn("blob-"+strings.Repeat("x", i%7)+string(rune(i)), "A")
	}
	if n := len(m.cur) + len(m.old); n > 2*mintGeneration {
		t.Errorf("mints hold %d blobs, more than %d", n, 2*mintGeneration)
	}
	m.Learn("last", "B")
	if o, ok := m.Owner("last"); !ok || o != "B" {
		t.Errorf("the newest blob is forgotten: %q %v", o, ok)
	}
}
