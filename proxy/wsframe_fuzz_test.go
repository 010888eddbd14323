package proxy

import (
	"encoding/json"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/proxy/jsonscan"
	"github.com/rotorproxy/rotor/proxy/websocket"
)

// FuzzFrameBody holds the frame reader to its promise for any frame a
// client can send: a frame that is a JSON object becomes a valid JSON
// body, streamed, with no frame-only members left, and a valid frame for
// an upstream socket, whatever history it is joined with.
func FuzzFrameBody(f *testing.F) {
	f.Add([]byte(createFrame), []byte(`{"type":"message","role":"user","content":"a"}`))
	f.Add([]byte(`{"type":"response.create","generate":false,"input":[]}`), []byte(``))
	f.Add([]byte(`{"type":"response.create","stream":false,"previous_response_id":"resp_1","input":[ 1 , 2 ],"x-codex-window-id":"w","session_id":"s"}`), []byte(`3`))
	f.Add([]byte(` { "input" : "text" , "type":"response.create"} `), []byte(`{}`))
	f.Add([]byte(`{"input":[{"a":"b"}]}`), []byte(" "))      // history of white space only
	f.Add([]byte(`{"input":[]}`), []byte("{\"\":\"\x01\"}")) // a raw control character, which jsonscan.Scan lets pass
	f.Fuzz(func(t *testing.T, frame, prior []byte) {
		// jsonscan.Scan lets raw control characters in strings pass (see
		// jsonscan's scanner.str): such a frame is the upstream's to refuse.
		var sc jsonscan.Scanned
		if !json.Valid(frame) || !jsonscan.Scan(frame, &sc) || !sc.Object {
			return
		}
		fields := websocket.ReadFields(frame, sc.Members)
		hist := []byte(nil)
		if len(prior) > 0 && json.Valid(append(append([]byte{'['}, prior...), ']')) {
			hist = prior
		}
		var whole []byte
		expand := fields.InputArray
		if expand {
			var h websocket.History
			h.Add(hist)
			whole = h.With(fields.Input)
		}
		if sock := rewriteFrame(frame, sc.Members, whole, nil); !json.Valid(sock) ||
			expand && gjson.GetBytes(sock, "previous_response_id").Exists() {
			t.Fatalf("frame %s with history %s gave the socket frame %s", frame, prior, sock)
		}
		var hdr fasthttp.RequestHeader
		body := rewriteFrame(frame, sc.Members, whole, &hdr)
		if !json.Valid(body) {
			t.Fatalf("frame %s with history %s gave invalid JSON %s", frame, prior, body)
		}
		got := gjson.ParseBytes(body)
		if got.Get("type").Exists() || got.Get("generate").Exists() || got.Get("session_id").Exists() {
			t.Fatalf("frame-only member left in %s", body)
		}
		if got.Get("stream").Type != gjson.True {
			t.Fatalf("not streamed: %s", body)
		}
		if expand && (!got.Get("input").IsArray() || got.Get("previous_response_id").Exists()) {
			t.Fatalf("expanded body %s", body)
		}
	})
}
