package websocket

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/proxy/jsonscan"
)

// A frame's fields are read from its members as sent: a warm-up, the
// response it names, and its input's items when the input is an array.
func TestReadFields(t *testing.T) {
	for _, tc := range []struct {
		frame string
		want  Fields
	}{
		{`{"type":"response.create","generate":false,"input":[ {"a":1} , 2 ]}`,
			Fields{NoGenerate: true, InputArray: true, Input: []byte(`{"a":1} , 2`)}},
		{`{"previous_response_id":"resp_1","input":"text"}`, Fields{PreviousResponse: "resp_1"}},
		{`{"generate":true,"input":[]}`, Fields{InputArray: true, Input: []byte{}}},
	} {
		var sc jsonscan.Scanned
		if !jsonscan.Scan([]byte(tc.frame), &sc) {
			t.Fatalf("scan %s", tc.frame)
		}
		got := ReadFields([]byte(tc.frame), sc.Members)
		if got.NoGenerate != tc.want.NoGenerate || got.PreviousResponse != tc.want.PreviousResponse ||
			got.InputArray != tc.want.InputArray || string(got.Input) != string(tc.want.Input) {
			t.Errorf("ReadFields(%s) = %+v, want %+v", tc.frame, got, tc.want)
		}
	}
}

// A history joins its parts and the new items with single commas, skips
// what is empty, and is nothing at all when there is none.
func TestHistoryWith(t *testing.T) {
	var none *History
	if got := none.With([]byte(`1`)); got != nil {
		t.Errorf("no history gave %q", got)
	}
	var h History
	h.Add([]byte(" 1,2 "))
	h.Add([]byte("  "))
	h.Add([]byte("3"))
	if got := string(h.With([]byte(" 4 "))); got != "1,2,3,4" {
		t.Errorf("With = %q", got)
	}
	if got := string(h.With(nil)); got != "1,2,3" {
		t.Errorf("With(nil) = %q", got)
	}
	if len(h.Parts()) != 2 {
		t.Errorf("parts %q", h.Parts())
	}
}

// The exchange a frame names is remembered only when it is the socket's
// last one and the frame's input is an array; the next exchange grows a
// copy, never the parts the named one still holds.
func TestSocketRemembersItsLastExchange(t *testing.T) {
	var sk Socket
	sk.WarmUp(&Writer{failed: true}, "resp_w", Fields{InputArray: true, Input: []byte(`1`)})
	if sk.History.ID != "resp_w" {
		t.Fatalf("warm-up history %+v", sk.History)
	}
	if sk.Prior(Fields{PreviousResponse: "resp_other", InputArray: true}) != nil ||
		sk.Prior(Fields{PreviousResponse: "resp_w"}) != nil {
		t.Error("a frame naming another exchange, or with a string input, got a prior")
	}
	f := Fields{PreviousResponse: "resp_w", InputArray: true, Input: []byte(`2`)}
	prior := sk.Prior(f)
	if prior == nil {
		t.Fatal("no prior for the last exchange")
	}
	out := &Output{ResponseID: "resp_2", items: []byte(`3`)}
	sk.Remember(prior, f, out, nil)
	if got := string(sk.History.With(nil)); sk.History.ID != "resp_2" || got != "1,2,3" {
		t.Errorf("history %q: %q", sk.History.ID, got)
	}
	if got := string(prior.With(nil)); got != "1" {
		t.Errorf("the prior changed: %q", got)
	}
	sk.Remember(nil, f, &Output{ResponseID: "resp_3", overflow: true}, nil)
	if sk.History.ID != "" {
		t.Errorf("an answer too long to keep left %q", sk.History.ID)
	}
}

// The members Codex sends in a frame for headers are the ids and the
// x- values; client_metadata's ws_request_header_ members become
// headers when they are plain names with plain values.
func TestFrameHeaders(t *testing.T) {
	for k, want := range map[string]bool{"session_id": true, "thread_id": true, "turn_id": true,
		"x-codex-window-id": true, "model": false, "input": false, "xcodex": false} {
		if IsFrameHeader(k) != want {
			t.Errorf("IsFrameHeader(%q) = %v", k, !want)
		}
	}
	var h fasthttp.RequestHeader
	MetadataHeaders([]byte(`{"ws_request_header_x_a":"1","ws_request_header_bad name":"2","ws_request_header_x_b":"a\nb",`+
		`"ws_request_header_x_c":3,"other":"4"}`), &h)
	if string(h.Peek("x-a")) != "1" || len(h.Peek("x-b")) != 0 || len(h.Peek("x-c")) != 0 || len(h.Peek("other")) != 0 {
		t.Errorf("headers: %s", h.Header())
	}
	if strings.Contains(string(h.Header()), "bad") {
		t.Errorf("a name that is no token became a header: %s", h.Header())
	}
}
