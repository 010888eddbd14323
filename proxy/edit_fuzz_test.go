package proxy

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/proxy/jsonscan"
	"github.com/rotorproxy/rotor/proxy/jsonscan/jsonscantest"
	"github.com/rotorproxy/rotor/proxy/websocket"
)

// rotor edits a client's body in three places: docs/accounts.md's rewrite for a
// ChatGPT account, docs/codex.md's removal of what another account minted, and a
// socket's response.create made into a request. Whatever the client sent,
// what goes upstream must still be JSON and mean what the edit says.

// scanSeeds are bodies of every shape a scan meets, valid or not: the
// seeds of jsonscan's FuzzScanBody, which the edits start from too.
var scanSeeds = jsonscantest.Seeds

// chatgptRewrite is chatgptBody on a body read the way the handler reads it.
func chatgptRewrite(body []byte) ([]byte, bool, error) {
	var s jsonscan.Scanned
	if !jsonscan.Scan(body, &s) {
		return nil, false, errNotObject
	}
	return chatgptBody(body, &s)
}

// fieldsOf is readFields on a body read the way the handler reads it.
func fieldsOf(body []byte) bodyFields {
	var s jsonscan.Scanned
	jsonscan.Scan(body, &s)
	return readFields(body, s.Members)
}

var editSeeds = []string{
	`{"model":"gpt-5","input":"hi"}`,
	`{"stream":false,"store":true,"temperature":0.2,"max_output_tokens":5,"instructions":null}`,
	` { "top_p" : 1 , "model" : "m" } `,
	`{"temperature":1}`,
	"{\"max_tokens\":1,\n\"stream\":true,\"store\":false,\"instructions\":\"x\"}\n",
	`{"stream":true,"stream":false,"store":false,"store":null,"instructions":"a","instructions":null}`,
	`{"str\u0065am":false,"temperature":1,"temperature":2}`,
	`{"type":"response.create","generate":false,"x-codex-turn-state":"t","session_id":"s","client_metadata":{"ws_request_header_x_a":"b"},"input":[]}`,
	`{"previous_response_id":"resp_1","input":[{"type":"message"}],"stream":"yes"}`,
	`{"input":[{"type":"reasoning","encrypted_content":"gAAAA-b-1=","summary":[{"type":"summary_text","text":"s"}],"id":"rs_1"},` +
		`{"type":"compaction","encrypted_content":"gAAAA-b-cmp="},{"type":"x","encrypted_content":"e"},"encrypted_content",` +
		`{"type":"reasoning","encrypted_content":null},{"type":"reasoning","encrypted_content":"z","summary":[]}],"store":false}`,
	`{"input":[{"encrypted_content":"a","encrypted_content":1}],"input":[]}`,
	`{"input":[ {"type":"message","content":"\"encrypted_content\""} , {"type":"function_call_output","encrypted_content":"q"} ] }`,
}

func editCorpus(f *testing.F) {
	for _, s := range append(slices.Clone(scanSeeds), editSeeds...) {
		f.Add([]byte(s))
	}
}

// editable scans body as the handler does and reports whether it is a
// JSON object that encoding/json agrees is valid: the scan lets raw
// control characters in strings through, and so would what is made of it.
func editable(body []byte) (*jsonscan.Scanned, bool) {
	s := new(jsonscan.Scanned)
	if !jsonscan.Scan(body, s) || !s.Object || !json.Valid(body) {
		return nil, false
	}
	return s, true
}

// lastWins is body's top-level members as a backend that keeps the last
// of repeated keys reads them.
func lastWins(t *testing.T, body []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("not a JSON object: %v\n%q", err, body)
	}
	return m
}

// sameMembers reports whether two objects' members hold the same bytes.
func sameMembers(a, b map[string]json.RawMessage) bool {
	return maps.EqualFunc(a, b, func(x, y json.RawMessage) bool { return bytes.Equal(x, y) })
}

// FuzzChatgptBody: the rewrite's output is an object that streams, does
// not store, has string instructions when the client gave none, lacks
// every parameter the backend refuses, and keeps every other member's
// value as sent. A body that needs nothing comes back as it is.
func FuzzChatgptBody(f *testing.F) {
	editCorpus(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		s, ok := editable(body)
		if !ok {
			return
		}
		in := lastWins(t, body)
		out, assemble, err := chatgptBody(body, s)
		if err != nil {
			t.Fatalf("chatgptBody(%q): %v", body, err)
		}
		got := lastWins(t, out)
		want := maps.Clone(in)
		for _, k := range DroppedForChatGPT {
			delete(want, k)
		}
		want["stream"], want["store"] = json.RawMessage("true"), json.RawMessage("false")
		if v, ok := in["instructions"]; !ok || string(v) == "null" {
			want["instructions"] = json.RawMessage(`""`)
		}
		if !sameMembers(got, want) {
			t.Fatalf("chatgptBody(%q) = %q\nmembers %q\nwant    %q", body, out, got, want)
		}
		if assemble != (string(in["stream"]) != "true") {
			t.Errorf("chatgptBody(%q): assemble %v for stream %q", body, assemble, in["stream"])
		}
		if sameMembers(in, want) &&
			len(s.Members) == len(in) && !bytes.Equal(out, body) {
			t.Errorf("chatgptBody(%q) = %q: a body that needs nothing was changed", body, out)
		}
	})
}

// FuzzUnbind: with every blob foreign, the input items that carry one
// are gone (a readable reasoning item kept without it, anything else
// replaced by a developer note), every other item and every byte outside
// the input array stay as sent, and the body is still JSON.
func FuzzUnbind(f *testing.F) {
	editCorpus(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, ok := editable(body); !ok {
			return
		}
		r := scannedRequest(body)
		r.unbindAll = true
		out := (&Server{}).unbind(r, "A", body, nil)
		if !json.Valid(out) {
			t.Fatalf("unbind(%q) = %q: not JSON", body, out)
		}
		input := gjson.GetBytes(body, "input")
		bound := func(item gjson.Result) bool { return item.Get("encrypted_content").Type == gjson.String }
		if !input.IsArray() || !slices.ContainsFunc(input.Array(), bound) {
			if !bytes.Equal(out, body) {
				t.Fatalf("unbind(%q) = %q: nothing foreign, yet changed", body, out)
			}
			return
		}
		after := gjson.GetBytes(out, "input")
		if head, tail := body[:input.Index], body[input.Index+len(input.Raw):]; !bytes.HasPrefix(out, head) || !bytes.HasSuffix(out, tail) ||
			after.Index != input.Index || len(out) != len(head)+len(after.Raw)+len(tail) {
			t.Fatalf("unbind(%q) = %q: bytes outside the input array changed", body, out)
		}
		items, kept := input.Array(), after.Array()
		if len(kept) > len(items) {
			t.Fatalf("unbind(%q) = %q: items added", body, out)
		}
		j := 0
		for _, item := range items {
			if !bound(item) {
				for j < len(kept) && kept[j].Raw != item.Raw {
					j++
				}
				if j == len(kept) {
					t.Fatalf("unbind(%q) = %q: item %s lost or moved", body, out, item.Raw)
				}
				j++
			}
		}
		for _, item := range kept {
			if bound(item) {
				t.Fatalf("unbind(%q) = %q: a foreign blob is still there", body, out)
			}
		}
	})
}

// FuzzRewriteFrame: a response.create frame, made into the body of POST
// /responses or kept a frame, carries the conversation it replaces the
// reference with and is still JSON; as a body it keeps no frame-only
// member and streams. Every member it has no reason to touch keeps its
// value, and a frame with nothing to change comes back as it is.
func FuzzRewriteFrame(f *testing.F) {
	editCorpus(f)
	whole := []byte(`{"type":"message","role":"user","content":"earlier"}`)
	f.Fuzz(func(t *testing.T, frame []byte) {
		s, ok := editable(frame)
		if !ok {
			return
		}
		if out := rewriteFrame(frame, s.Members, nil, nil); !bytes.Equal(out, frame) {
			t.Fatalf("rewriteFrame(%q) with nothing to change = %q", frame, out)
		}
		in := lastWins(t, frame)
		for _, hdr := range []*fasthttp.RequestHeader{nil, new(fasthttp.RequestHeader)} {
			out := rewriteFrame(frame, s.Members, whole, hdr)
			want := maps.Clone(in)
			for k := range want {
				if k == "previous_response_id" || hdr != nil && (k == "type" || k == "generate" || websocket.IsFrameHeader(k)) {
					delete(want, k)
				}
			}
			want["input"] = json.RawMessage("[" + string(whole) + "]")
			if hdr != nil {
				want["stream"] = json.RawMessage("true")
			}
			if got := lastWins(t, out); !sameMembers(got, want) {
				t.Fatalf("rewriteFrame(%q, as a body: %v) = %q\nmembers %q\nwant    %q", frame, hdr != nil, out, got, want)
			}
		}
	})
}
