package upstreamtest

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// wsClient is a minimal RFC 6455 client for these tests: it masks its
// frames and checks that the server's are unmasked, unfragmented and carry
// no RSV bit.
type wsClient struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
}

// handshake sends a WebSocket upgrade for path on s with token ("" for
// none) and extra header pairs, and returns the answer; on 101 the client
// is ready for frames.
func handshake(t *testing.T, s *Server, path, token string, hdr ...string) (*wsClient, *http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	key := base64.StdEncoding.EncodeToString(raw[:])
	req, _ := http.NewRequest("GET", s.URL()+path, nil)
	req.Header.Set("Upgrade", "WebSocket") // case-insensitive
	req.Header.Set("Connection", "keep-alive, Upgrade")
	req.Header.Set("Sec-WebSocket-Key", key)
	req.Header.Set("Sec-WebSocket-Version", "13")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatal(err)
	}
	return &wsClient{t: t, conn: conn, br: br}, resp, key
}

// dial is handshake that must switch protocols.
func dial(t *testing.T, s *Server, path, token string, hdr ...string) *wsClient {
	t.Helper()
	c, resp, _ := handshake(t, s, path, token, hdr...)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("handshake: %s %s", resp.Status, body)
	}
	return c
}

// writeFrame sends one masked frame; rsv is ORed into the first byte.
func (c *wsClient) writeFrame(fin bool, op byte, p []byte, rsv byte) {
	c.t.Helper()
	b0 := op | rsv
	if fin {
		b0 |= 0x80
	}
	f := []byte{b0}
	switch n := len(p); {
	case n <= 125:
		f = append(f, 0x80|byte(n))
	case n <= 0xffff:
		f = binary.BigEndian.AppendUint16(append(f, 0x80|126), uint16(n))
	default:
		f = binary.BigEndian.AppendUint64(append(f, 0x80|127), uint64(n))
	}
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	f = append(f, mask[:]...)
	for i, v := range p {
		f = append(f, v^mask[i%4])
	}
	if _, err := c.conn.Write(f); err != nil {
		c.t.Fatalf("write frame: %v", err)
	}
}

func (c *wsClient) send(text string) { c.t.Helper(); c.writeFrame(true, opText, []byte(text), 0) }

// readFrame reads one server frame.
func (c *wsClient) readFrame() (op byte, p []byte, err error) {
	var h [2]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		return 0, nil, err
	}
	if h[0]&0x70 != 0 || h[1]&0x80 != 0 || h[0]&0x80 == 0 {
		return 0, nil, fmt.Errorf("server frame %08b %08b: RSV set, masked or fragmented", h[0], h[1])
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var e [2]byte
		if _, err := io.ReadFull(c.br, e[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(e[:]))
	case 127:
		var e [8]byte
		if _, err := io.ReadFull(c.br, e[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(e[:])
	}
	p = make([]byte, n)
	if _, err := io.ReadFull(c.br, p); err != nil {
		return 0, nil, err
	}
	return h[0] & 0x0f, p, nil
}

// read reads one text frame.
func (c *wsClient) read() []byte {
	c.t.Helper()
	op, p, err := c.readFrame()
	if err != nil {
		c.t.Fatalf("read frame: %v", err)
	}
	if op != opText {
		c.t.Fatalf("frame opcode %d (%q), want text", op, p)
	}
	return p
}

// stamped is a frame and when it came.
type stamped struct {
	data []byte
	at   time.Time
}

// turn sends one frame and reads text frames up to a final event or an
// error frame.
func (c *wsClient) turn(frame string) []stamped {
	c.t.Helper()
	c.send(frame)
	var out []stamped
	for {
		p := c.read()
		out = append(out, stamped{p, time.Now()})
		switch frameType(p) {
		case "response.completed", "response.failed", "response.incomplete", "error":
			return out
		}
	}
}

func frameType(p []byte) string {
	var v struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(p, &v)
	return v.Type
}

func frameTypes(fs []stamped) string {
	var out []string
	for _, f := range fs {
		out = append(out, frameType(f.data))
	}
	return strings.Join(out, ",")
}

// errorFrame is the error frame Codex reads.
type errorFrame struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Error  struct {
		Type     string `json:"type"`
		Code     string `json:"code"`
		Message  string `json:"message"`
		ResetsAt int64  `json:"resets_at"`
	} `json:"error"`
	Headers map[string]string `json:"headers"`
}

func parseErrorFrame(t *testing.T, p []byte) errorFrame {
	t.Helper()
	var e errorFrame
	if err := json.Unmarshal(p, &e); err != nil || e.Type != "error" {
		t.Fatalf("not an error frame: %s (%v)", p, err)
	}
	return e
}

// waitSockets polls Sockets() until it is want, for at most 2 s.
func waitSockets(t *testing.T, s *Server, want int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for s.Sockets() != want {
		if time.Now().After(deadline) {
			t.Fatalf("Sockets() = %d after 2s, want %d", s.Sockets(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fixtureEvents is the data payloads of testdata/sse/name, read from the
// file (not through the fake's parser), with the recorded model from
// replaced by to, as the fake echoes the model asked for.
func fixtureEvents(t *testing.T, name, from, to string) [][]byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testdata, "sse", name))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(bytes.NewReader(raw))
	var out [][]byte
	for {
		ev, err := readEvent(br)
		if err != nil {
			break
		}
		out = append(out, []byte(strings.ReplaceAll(ev.data, `"model":"`+from+`"`, `"model":"`+to+`"`)))
	}
	return out
}

const create = `{"type":"response.create","model":"gpt-test","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}]}`

func TestSocketHandshake(t *testing.T) {
	s, _ := start(t)
	s.Set("tok", Behavior{Headers: map[string]string{"x-codex-turn-state": "ts-1", "x-reset": "{{RESETS_IN}}"}})
	for _, path := range []string{"/backend-api/codex/responses", "/v1/responses"} {
		c, resp, key := handshake(t, s, path+"?client=test", "tok",
			"Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits")
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("%s: %s", path, resp.Status)
		}
		sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		if got, want := resp.Header.Get("Sec-WebSocket-Accept"), base64.StdEncoding.EncodeToString(sum[:]); got != want {
			t.Errorf("%s: accept %q, want %q", path, got, want)
		}
		if !strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") || !strings.EqualFold(resp.Header.Get("Connection"), "upgrade") {
			t.Errorf("%s: upgrade headers %v", path, resp.Header)
		}
		if ext := resp.Header.Get("Sec-WebSocket-Extensions"); ext != "" {
			t.Errorf("%s: negotiated %q, want no extension", path, ext)
		}
		if resp.Header.Get("x-codex-turn-state") != "ts-1" || resp.Header.Get("x-reset") != "60" || resp.Header.Get("x-request-id") == "" {
			t.Errorf("%s: handshake headers %v", path, resp.Header)
		}
		// The socket works: a ping gets its pong.
		c.writeFrame(true, opPing, []byte("are you there"), 0)
		if op, p, err := c.readFrame(); err != nil || op != opPong || string(p) != "are you there" {
			t.Errorf("%s: pong %d %q %v", path, op, p, err)
		}
	}
	waitSockets(t, s, 2)
	// The handshake's handler returns just after the 101 is written: give
	// it that moment on a loaded machine.
	for deadline := time.Now().Add(2 * time.Second); s.Open() != 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if n := s.Open(); n != 0 {
		t.Errorf("Open() = %d with only sockets open, want 0", n)
	}
	rec := s.Requests()
	if len(rec) != 2 || rec[0].Method != "GET" || rec[0].Path != "/backend-api/codex/responses" || rec[0].RawQuery != "client=test" ||
		rec[0].Token != "tok" || rec[0].Header.Get("Sec-WebSocket-Key") == "" || rec[1].Path != "/v1/responses" {
		t.Fatalf("recorded %+v", rec)
	}
	if s.Count("tok") != 2 {
		t.Errorf("Count = %d, want 2 handshakes", s.Count("tok"))
	}
}

func TestSocketHandshakeRefused(t *testing.T) {
	s, _ := start(t)
	s.Set("nows", Behavior{NoWebSocket: true, Status: 429})
	s.Set("expired", Behavior{Status: 401})
	s.Set("invalidated", Behavior{Status: 401, ErrorFixture: "token_invalidated_401.json"})
	s.Set("limited", Behavior{Status: 429}) // answered per frame, not here
	cases := []struct {
		path, token string
		status      int
		body        string
	}{
		{"/v1/responses", "", 401, missingKeyBody},
		{"/backend-api/codex/responses", "", 401, missingKeyBody},
		{"/v1/responses", "nows", 404, `{"error":{"message":"Invalid URL (GET /v1/responses)","type":"invalid_request_error","param":null,"code":null}}`},
		{"/backend-api/codex/responses", "nows", 404, `{"detail":"Not Found"}`},
		{"/backend-api/codex/responses", "expired", 401, `"token_expired"`},
		{"/v1/responses", "invalidated", 401, `"token_invalidated"`},
	}
	for _, tc := range cases {
		_, resp, _ := handshake(t, s, tc.path, tc.token)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.body) || resp.Header.Get("Sec-WebSocket-Accept") != "" {
			t.Errorf("%s %q: %s %s, want %d with %s", tc.path, tc.token, resp.Status, body, tc.status, tc.body)
		}
	}
	dial(t, s, "/v1/responses", "limited")
	// Not a socket path, or no upgrade: plain HTTP.
	_, resp, _ := handshake(t, s, "/v1/models", "tok")
	if resp.StatusCode != 200 {
		t.Errorf("upgrade on /v1/models: %s, want its plain answer", resp.Status)
	}
	if n := s.Sockets(); n != 1 {
		t.Errorf("Sockets() = %d, want 1", n)
	}
}

func TestSocketHandshakeWaits(t *testing.T) {
	s, _ := start(t)
	s.Set("slow", Behavior{HeaderDelay: 150 * time.Millisecond})
	s.Set("hang", Behavior{HangHeaders: true})
	begin := time.Now()
	dial(t, s, "/v1/responses", "slow")
	if took := time.Since(begin); took < 150*time.Millisecond {
		t.Errorf("handshake answered after %s, want HeaderDelay first", took)
	}
	c, err := net.Dial("tcp", strings.TrimPrefix(s.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET /v1/responses HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer hang\r\nUpgrade: websocket\r\n"+
		"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	waitOpen(t, s, 1)
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("hung handshake answered: %d %v", n, err)
	}
	c.Close()
	waitOpen(t, s, 0)
	if n := s.Sockets(); n != 1 {
		t.Errorf("Sockets() = %d, want only the slow one", n)
	}
}

func TestSocketStreamsEveryEventAsItsOwnFrame(t *testing.T) {
	s, _ := start(t)
	c := dial(t, s, "/backend-api/codex/responses", "tok", "session_id", "sess-1")
	got := c.turn(create)
	want := fixtureEvents(t, "hello.sse", "gpt-5-2025-08-07", "gpt-test")
	if len(want) < 10 || !bytes.Contains(want[0], []byte(`"model":"gpt-test"`)) {
		t.Fatalf("fixture read as %d events: %s", len(want), want[0])
	}
	if len(got) != len(want) {
		t.Fatalf("got %d frames (%s), want %d", len(got), frameTypes(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].data, want[i]) {
			t.Errorf("frame %d:\n got %s\nwant %s", i, got[i].data, want[i])
		}
	}
	rec := s.Requests()
	if len(rec) != 2 {
		t.Fatalf("recorded %d requests, want handshake + frame", len(rec))
	}
	r := rec[1]
	if r.Method != "WS" || r.Path != "/backend-api/codex/responses" || r.Token != "tok" || string(r.Body) != create ||
		r.Header.Get("session_id") != "sess-1" {
		t.Errorf("frame recorded as %+v", r)
	}
	if s.Count("tok") != 2 {
		t.Errorf("Count = %d, want 2", s.Count("tok"))
	}
	// Frames the fake has no answer for are ignored; the socket goes on.
	c.send(`{"type":"response.processed","response_id":"x"}`)
	if got := c.turn(create); len(got) != len(want) || frameType(got[len(got)-1].data) != "response.completed" {
		t.Errorf("second turn: %s", frameTypes(got))
	}
	if s.Count("tok") != 3 {
		t.Errorf("Count = %d, want 3 (response.processed is not a request)", s.Count("tok"))
	}
}

func TestSocketToolRoundTrip(t *testing.T) {
	s, _ := start(t)
	s.Set("tok", Behavior{ToolRoundTrip: true})
	c := dial(t, s, "/v1/responses", "tok")
	if got := c.turn(create); !strings.Contains(string(got[len(got)-1].data), `"function_call"`) {
		t.Errorf("first answer is not the tool call: %s", got[len(got)-1].data)
	}
	after := `{"type":"response.create","model":"gpt-test","input":[{"type":"function_call_output","call_id":"c","output":"sunny"}]}`
	if got := c.turn(after); strings.Contains(string(got[len(got)-1].data), `"function_call"`) {
		t.Errorf("after the tool result, still a tool call: %s", got[len(got)-1].data)
	}
}

func TestSocketEventDelaySpreadsFrames(t *testing.T) {
	s, _ := start(t)
	const delay = 40 * time.Millisecond
	s.Set("tok", Behavior{EventDelay: delay})
	c := dial(t, s, "/v1/responses", "tok")
	sent := time.Now()
	got := c.turn(create)
	// The fake sleeps before each frame after the first, so frame i cannot
	// arrive before i delays have passed; a late reader only adds to that.
	for i := 1; i < len(got); i++ {
		if at := got[i].at.Sub(sent); at < time.Duration(i)*delay {
			t.Errorf("frame %d came %s after the request, want at least %s", i, at, time.Duration(i)*delay)
		}
	}
	// And not all at the end: the first was read long before the last
	// was sent (half the delays leave room for a reader held up by load).
	if n := len(got); got[n-1].at.Sub(got[0].at) < time.Duration(n-1)*delay/2 {
		t.Errorf("first frame at %s, last at %s: sent together", got[0].at.Sub(sent), got[n-1].at.Sub(sent))
	}
}

func TestSocketErrorFrameKeepsTheSocket(t *testing.T) {
	s, _ := start(t)
	s.Set("tok", Behavior{Status: 429, ResetIn: 90 * time.Second,
		Headers: map[string]string{"X-Codex-Primary-Used-Percent": "100", "retry-after": "{{RESETS_IN}}"}})
	c := dial(t, s, "/backend-api/codex/responses", "tok")
	got := c.turn(create)
	if len(got) != 1 {
		t.Fatalf("want one error frame, got %s", frameTypes(got))
	}
	e := parseErrorFrame(t, got[0].data)
	if e.Status != 429 || e.Error.Type != "usage_limit_reached" || e.Error.ResetsAt < time.Now().Unix()+80 ||
		e.Headers["x-codex-primary-used-percent"] != "100" || e.Headers["retry-after"] != "90" {
		t.Errorf("error frame: %s", got[0].data)
	}
	if bytes.Contains(got[0].data, []byte("{{")) || bytes.Contains(got[0].data, []byte("\n")) {
		t.Errorf("placeholders or newlines left: %s", got[0].data)
	}
	// The Behavior is read at each frame: the same socket now succeeds.
	s.Set("tok", Behavior{})
	if got := c.turn(create); frameType(got[len(got)-1].data) != "response.completed" {
		t.Errorf("after the error: %s", frameTypes(got))
	}
	// A Cloudflare page has no error object; the frame still has one.
	s.Set("tok", Behavior{Status: 403})
	e = parseErrorFrame(t, c.turn(create)[0].data)
	if e.Status != 403 || e.Error.Message == "" {
		t.Errorf("403 frame: %+v", e)
	}
}

func TestSocketWarmUpThenPreviousResponse(t *testing.T) {
	s, _ := start(t)
	c := dial(t, s, "/v1/responses", "tok")
	got := c.turn(`{"type":"response.create","model":"gpt-test","generate":false,"input":[]}`)
	if frameTypes(got) != "response.created,response.completed" {
		t.Fatalf("warm-up: %s", frameTypes(got))
	}
	var done struct {
		Response struct {
			ID     string            `json:"id"`
			Status string            `json:"status"`
			Model  string            `json:"model"`
			Output []json.RawMessage `json:"output"`
			Usage  struct {
				TotalTokens *int `json:"total_tokens"`
			} `json:"usage"`
		} `json:"response"`
	}
	if err := json.Unmarshal(got[1].data, &done); err != nil {
		t.Fatal(err)
	}
	r := done.Response
	if !strings.HasPrefix(r.ID, "resp_") || len(r.ID) < 20 || r.Status != "completed" || r.Model != "gpt-test" ||
		len(r.Output) != 0 || r.Usage.TotalTokens == nil || *r.Usage.TotalTokens != 0 {
		t.Fatalf("warm-up response: %s", got[1].data)
	}
	next := `{"type":"response.create","model":"gpt-test","previous_response_id":"` + r.ID + `","input":[]}`
	got = c.turn(next)
	last := got[len(got)-1].data
	if frameType(last) != "response.completed" {
		t.Fatalf("after the warm-up: %s", frameTypes(got))
	}
	// The streamed answer may be named in turn.
	var fin struct {
		Response struct {
			ID string `json:"id"`
		} `json:"response"`
	}
	_ = json.Unmarshal(last, &fin)
	got = c.turn(`{"type":"response.create","model":"gpt-test","previous_response_id":"` + fin.Response.ID + `","input":[]}`)
	if frameType(got[len(got)-1].data) != "response.completed" {
		t.Fatalf("naming the streamed answer: %s", frameTypes(got))
	}
	// Another socket does not know these ids.
	other := dial(t, s, "/v1/responses", "tok")
	e := parseErrorFrame(t, other.turn(next)[0].data)
	if e.Status != 400 || e.Error.Code != "previous_response_not_found" || !strings.Contains(e.Error.Message, r.ID) {
		t.Errorf("other socket: %+v", e)
	}
	if warmups := s.Count("tok"); warmups != 2+4 {
		t.Errorf("Count = %d, want 2 handshakes + 4 response.create", warmups)
	}
}

func TestSocketUnknownPreviousResponse(t *testing.T) {
	s, _ := start(t)
	c := dial(t, s, "/backend-api/codex/responses", "tok")
	got := c.turn(`{"type":"response.create","model":"gpt-test","previous_response_id":"resp_nowhere","input":[]}`)
	e := parseErrorFrame(t, got[0].data)
	if len(got) != 1 || e.Status != 400 || e.Error.Code != "previous_response_not_found" || e.Error.Type != "invalid_request_error" ||
		e.Error.Message != "Previous response with id 'resp_nowhere' not found." {
		t.Fatalf("got %s", got[0].data)
	}
	// Not JSON, or binary: an error frame, and the socket goes on.
	for _, f := range []func(){
		func() { c.send("not json") },
		func() { c.writeFrame(true, opBinary, []byte(create), 0) },
	} {
		f()
		if e := parseErrorFrame(t, c.read()); e.Status != 400 {
			t.Errorf("bad frame: %+v", e)
		}
	}
	if got := c.turn(create); frameType(got[len(got)-1].data) != "response.completed" {
		t.Errorf("socket did not go on: %s", frameTypes(got))
	}
}

func TestSocketLimitAfter(t *testing.T) {
	s, _ := start(t)
	s.Set("tok", Behavior{LimitAfter: 2})
	c := dial(t, s, "/v1/responses", "tok")
	for i := range 2 {
		if got := c.turn(create); frameType(got[len(got)-1].data) != "response.completed" {
			t.Fatalf("turn %d: %s", i+1, frameTypes(got))
		}
	}
	e := parseErrorFrame(t, c.turn(create)[0].data)
	if e.Status != 429 || e.Error.Type != "usage_limit_reached" {
		t.Fatalf("turn 3: %+v", e)
	}
	// The count is the token's, shared with HTTP.
	resp := do(t, t.Context(), &http.Client{Transport: &http.Transport{}}, "POST", s.OpenAIBase()+"/responses", "tok", `{"model":"m","stream":true}`)
	if resp.StatusCode != 429 {
		t.Errorf("HTTP after the socket's turns: %d", resp.StatusCode)
	}
}

func TestSocketFragmentsAndControlFrames(t *testing.T) {
	s, _ := start(t)
	c := dial(t, s, "/v1/responses", "tok")
	// A message in three fragments, with a ping in the middle.
	c.writeFrame(false, opText, []byte(create[:10]), 0)
	c.writeFrame(false, opContinuation, []byte(create[10:40]), 0)
	c.writeFrame(true, opPing, nil, 0)
	c.writeFrame(true, opContinuation, []byte(create[40:]), 0)
	if op, _, err := c.readFrame(); err != nil || op != opPong {
		t.Fatalf("pong: %d %v", op, err)
	}
	var last []byte
	for frameType(last) != "response.completed" {
		last = c.read()
	}
	if rec := s.Requests(); string(rec[len(rec)-1].Body) != create {
		t.Errorf("reassembled %q", rec[len(rec)-1].Body)
	}
	// A long frame (16-bit length) and a longer one (64-bit length).
	for _, n := range []int{300, 70 << 10} {
		big := `{"type":"response.create","model":"gpt-test","input":"` + strings.Repeat("x", n) + `"}`
		if got := c.turn(big); frameType(got[len(got)-1].data) != "response.completed" {
			t.Errorf("%d-byte frame: %s", n, frameTypes(got))
		}
	}
	// The client closes: the close is echoed, the socket ends.
	c.writeFrame(true, opClose, binary.BigEndian.AppendUint16(nil, 1000), 0)
	op, p, err := c.readFrame()
	if err != nil || op != opClose || binary.BigEndian.Uint16(p) != 1000 {
		t.Fatalf("close echo: %d %v %v", op, p, err)
	}
	if _, err := c.br.ReadByte(); err != io.EOF {
		t.Errorf("after the close: %v, want EOF", err)
	}
	waitSockets(t, s, 0)
}

func TestSocketProtocolErrors(t *testing.T) {
	s, _ := start(t)
	cases := []struct {
		name string
		send func(c *wsClient)
		code uint16
	}{
		{"rsv bit", func(c *wsClient) { c.writeFrame(true, opText, []byte(create), 0x40) }, 1002},
		{"unmasked", func(c *wsClient) { c.conn.Write([]byte{0x81, 0x02, 'h', 'i'}) }, 1002},
		{"reserved opcode", func(c *wsClient) { c.writeFrame(true, 0x3, nil, 0) }, 1002},
		{"stray continuation", func(c *wsClient) { c.writeFrame(true, opContinuation, []byte("x"), 0) }, 1002},
		{"fragmented ping", func(c *wsClient) { c.writeFrame(false, opPing, nil, 0) }, 1002},
		{"bad utf-8", func(c *wsClient) { c.writeFrame(true, opText, []byte{0xff, 0xfe}, 0) }, 1007},
		{"too big", func(c *wsClient) {
			c.conn.Write(binary.BigEndian.AppendUint64([]byte{0x81, 0x80 | 127}, 64<<20+1))
		}, 1009},
	}
	for _, tc := range cases {
		c := dial(t, s, "/v1/responses", "tok")
		tc.send(c)
		op, p, err := c.readFrame()
		if err != nil || op != opClose || len(p) < 2 || binary.BigEndian.Uint16(p) != tc.code {
			t.Errorf("%s: got %d %q %v, want close %d", tc.name, op, p, err, tc.code)
		}
	}
	waitSockets(t, s, 0)
}

func TestSocketStallAndReset(t *testing.T) {
	s, _ := start(t)
	s.Set("stall", Behavior{StallAfter: 3})
	s.Set("reset", Behavior{ResetAfter: 3})
	c := dial(t, s, "/v1/responses", "reset")
	c.send(create)
	for range 3 {
		c.read()
	}
	if _, _, err := c.readFrame(); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("after ResetAfter: %v, want a connection reset", err)
	}
	waitSockets(t, s, 0)

	c = dial(t, s, "/v1/responses", "stall")
	c.send(create)
	for range 3 {
		c.read()
	}
	// Silent, but alive: a ping is still answered.
	c.writeFrame(true, opPing, []byte("p"), 0)
	if op, _, err := c.readFrame(); err != nil || op != opPong {
		t.Fatalf("ping while stalled: %d %v", op, err)
	}
	if s.Sockets() != 1 {
		t.Errorf("Sockets() = %d while stalled", s.Sockets())
	}
	c.conn.Close() // the client goes: the stalled socket ends
	waitSockets(t, s, 0)
}

func TestSocketCloseEndsSockets(t *testing.T) {
	s := New(testdata)
	if err := s.Start(""); err != nil {
		t.Fatal(err)
	}
	s.Set("stall", Behavior{StallAfter: 2})
	idle := dial(t, s, "/v1/responses", "tok")
	busy := dial(t, s, "/backend-api/codex/responses", "stall")
	busy.send(create)
	busy.read()
	busy.read()
	waitSockets(t, s, 2)
	begin := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > time.Second {
		t.Errorf("Close took %s", took)
	}
	if n := s.Sockets(); n != 0 {
		t.Errorf("Sockets() = %d after Close", n)
	}
	for _, c := range []*wsClient{idle, busy} {
		if _, _, err := c.readFrame(); err == nil {
			t.Errorf("a socket still reads after Close")
		}
	}
}
