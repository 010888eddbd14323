package websocket

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/fasthttp/websocket"
)

// An upstream socket has expired when it says so in an error frame, in
// either place the code is sent, or closes with 1008 in its place; any
// other error or frame is not that.
func TestExpired(t *testing.T) {
	for frame, want := range map[string]bool{
		`{"type":"error","error":{"code":"websocket_connection_limit_reached"}}`:                        true,
		`{"type":"error","code":"websocket_connection_limit_reached"}`:                                  true,
		`{"type":"error","error":{"code":"rate_limit"},"message":"websocket_connection_limit_reached"}`: false,
		`{"type":"response.created","code":"websocket_connection_limit_reached"}`:                       false,
	} {
		if Expired([]byte(frame), nil) != want {
			t.Errorf("Expired(%s) = %v", frame, !want)
		}
	}
	if !Expired(nil, &websocket.CloseError{Code: websocket.ClosePolicyViolation}) {
		t.Error("a close with 1008 is not expiry")
	}
	if Expired(nil, &websocket.CloseError{Code: websocket.CloseGoingAway}) || Expired(nil, errors.New("reset")) {
		t.Error("another close, or a broken connection, is expiry")
	}
}

// An error frame before any output stands for the failed HTTP answer it
// carries: its status, its headers, the frame itself as the body.
func TestErrorFrame(t *testing.T) {
	frame := []byte(`{"type":"error","status":429,"headers":{"x-request-id":"req_1","retry-after":"7"},"error":{"code":"rate_limit_exceeded"}}`)
	ref := ErrorFrame(frame)
	if ref == nil || ref.Status != 429 || string(ref.Header.Peek("x-request-id")) != "req_1" ||
		string(ref.Header.Peek("Retry-After")) != "7" || string(ref.Body) != string(frame) {
		t.Fatalf("ErrorFrame = %+v", ref)
	}
	for _, f := range []string{`{"type":"error","status":200}`, `{"type":"error"}`, `{"type":"response.created","status":500}`} {
		if ErrorFrame([]byte(f)) != nil {
			t.Errorf("ErrorFrame(%s) is a refusal", f)
		}
	}
}

func TestSocketURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://chatgpt.com/backend-api/codex/responses": "wss://chatgpt.com/backend-api/codex/responses",
		"http://127.0.0.1:9/v1/responses":                 "ws://127.0.0.1:9/v1/responses",
	} {
		if got := socketURL(in); got != want {
			t.Errorf("socketURL(%q) = %q", in, got)
		}
	}
}

// The endpoints that refused sockets are remembered, and forgotten all at
// once past the bound rather than grown without end.
func TestNoSockets(t *testing.T) {
	var n NoSockets
	n.Add("a")
	if !n.Has("a") || n.Has("b") {
		t.Fatal("Has")
	}
	for i := range maxNoSockets {
		n.Add("endpoint-" + strconv.Itoa(i))
	}
	if n.Has("a") || len(n.m) > maxNoSockets {
		t.Errorf("not bounded: %d endpoints", len(n.m))
	}
}

// A shutdown with no socket open has nothing to wait for, and refuses the
// sockets that come after it.
func TestSetShutdownIdle(t *testing.T) {
	var ss Set
	if err := ss.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ss.add(&Socket{}) || ss.Count() != 0 {
		t.Error("a socket joined a set that is shutting down")
	}
}
