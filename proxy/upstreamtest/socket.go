package upstreamtest

// The Responses API over WebSocket, as the ChatGPT backend
// ({chatgptPrefix}/codex/responses) and api.openai.com ({openaiPrefix}/responses)
// serve it: GET with Upgrade: websocket on the path of the POST route, then
// one response.create text frame per request, answered with one text frame
// per event.
//
// RFC 6455 is implemented here by hand, on purpose: rotor's WebSocket code
// uses github.com/fasthttp/websocket, and a fake built on the same library
// would share its framing bugs instead of catching them. The fake never
// negotiates an extension, so every frame is uncompressed and a set RSV bit
// is a protocol error.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

const (
	// websocketGUID is RFC 6455's fixed key suffix for Sec-WebSocket-Accept.
	websocketGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

	// maxMessage caps one client message, fragments included.
	maxMessage = 64 << 20

	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xA

	closeProtocolError = 1002
	closeInvalidData   = 1007
	closeTooBig        = 1009

	// socketMethod is Recorded.Method for a request sent as a frame.
	socketMethod = "WS"
)

// isSocketRequest reports whether r opens a Responses WebSocket: a GET of
// one of the two Responses paths with Upgrade: websocket. Any other upgrade
// request is routed like plain HTTP.
func isSocketRequest(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	if p := r.URL.Path; p != chatgptPrefix+"/codex/responses" && p != openaiPrefix+"/responses" {
		return false
	}
	return headerHasToken(r.Header, "Upgrade", "websocket")
}

// headerHasToken reports whether a comma-separated header holds token,
// case-insensitively.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), token) {
				return true
			}
		}
	}
	return false
}

// refusesHandshake reports whether an error Behavior refuses the upgrade
// itself, with its HTTP status and body: authentication failures come
// before any socket. Other errors are answered frame by frame.
func refusesHandshake(b Behavior) bool {
	return b.Status == http.StatusUnauthorized || strings.HasPrefix(b.ErrorFixture, "token_invalidated")
}

// acceptKey is Sec-WebSocket-Accept for a Sec-WebSocket-Key.
func acceptKey(key string) string {
	sum := sha1.Sum([]byte(key + websocketGUID))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// serveSocket answers a WebSocket handshake (the request is recorded, the
// token is known, HangHeaders and HeaderDelay are done and b.Headers are set
// on w): it refuses it as b says, or switches protocols and serves the socket
// in a goroutine of its own, so the handler returns and Open no longer counts
// it.
func (s *Server) serveSocket(w http.ResponseWriter, r *http.Request, token string, b Behavior, fill filler) {
	switch {
	case b.NoWebSocket:
		notFound(w, r.Method, r.URL.Path)
		return
	case b.Status >= 400 && refusesHandshake(b):
		s.serveError(w, b, fill)
		return
	}
	key := r.Header.Get("Sec-WebSocket-Key")
	if k, err := base64.StdEncoding.DecodeString(key); err != nil || len(k) != 16 ||
		!headerHasToken(r.Header, "Connection", "upgrade") || !r.ProtoAtLeast(1, 1) {
		http.Error(w, "upstreamtest: bad WebSocket handshake (RFC 6455 section 4.2.1)", http.StatusBadRequest)
		return
	}
	if r.Header.Get("Sec-WebSocket-Version") != "13" {
		w.Header().Set("Sec-WebSocket-Version", "13")
		http.Error(w, "upstreamtest: unsupported WebSocket version", http.StatusUpgradeRequired)
		return
	}
	select {
	case <-s.done:
		abortConn(http.NewResponseController(w))
		return
	default:
	}

	owner := identity(r.Header, token)
	h := s.switchingHeaders(w.Header(), owner)
	h.Set("Upgrade", "websocket")
	h.Set("Connection", "Upgrade")
	h.Set("Sec-WebSocket-Accept", acceptKey(key))
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "upstreamtest: cannot hijack: "+err.Error(), http.StatusInternalServerError)
		return
	}
	var answer bytes.Buffer
	answer.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	_ = h.Write(&answer)
	answer.WriteString("\r\n")
	// Counted before the 101 leaves, so a client that has its socket
	// finds it counted, and before the handler returns, so Close, which
	// waits for Open to drop first, never misses one.
	s.sockets.Add(1)
	if _, err := conn.Write(answer.Bytes()); err != nil {
		s.sockets.Add(-1)
		_ = conn.Close()
		return
	}
	// Whatever net/http read ahead belongs to the first frames; after it,
	// read the connection itself (the server's reader must not be used once
	// hijacked).
	var src io.Reader = conn
	if n := brw.Reader.Buffered(); n > 0 {
		ahead, _ := brw.Reader.Peek(n)
		src = io.MultiReader(bytes.NewReader(bytes.Clone(ahead)), conn)
	}
	sk := &socket{
		s:        s,
		conn:     conn,
		br:       bufio.NewReaderSize(src, 64<<10),
		token:    token,
		owner:    owner,
		lite:     isTrue(r.Header.Get(liteHeader)),
		opened:   time.Now(),
		path:     r.URL.Path,
		rawQuery: r.URL.RawQuery,
		rawURI:   r.RequestURI,
		header:   r.Header.Clone(),
		resumed:  r.TLS != nil && r.TLS.DidResume,
		in:       inbox{ready: make(chan struct{}, 1)},
	}
	go sk.run()
}

// switchingHeaders are the headers of a socket's 101 answer for owner:
// what the backend's says about the socket, under set (Behavior.Headers,
// which win, so a test can send other values).
func (s *Server) switchingHeaders(set http.Header, owner string) http.Header {
	h := set.Clone()
	for k, v := range map[string]string{
		"x-codex-turn-state":   s.Mint(owner),
		"x-models-etag":        codexModelsETag,
		"openai-model":         socketModel,
		"x-reasoning-included": "true",
	} {
		if h.Get(k) == "" {
			h.Set(k, v)
		}
	}
	return h
}

// socket is one open WebSocket. A reader goroutine reads frames, answers
// pings and closes, and queues messages; run answers the queued messages in
// order, so a stalled answer still leaves pings answered and a close frame
// noticed.
type socket struct {
	s        *Server
	conn     net.Conn
	br       *bufio.Reader
	token    string
	owner    string    // identity of the handshake: blobs are minted for it and checked against it
	lite     bool      // the handshake carried the Lite marker
	opened   time.Time // for Behavior.SocketLifetime
	path     string
	rawQuery string
	rawURI   string
	header   http.Header // the handshake's, recorded with every request
	resumed  bool        // the connection resumed a TLS session

	wmu       sync.Mutex
	closeSent bool // a close frame went out: nothing more is written

	in inbox

	// ids are the responses this connection produced (warm-ups and
	// streamed answers), the ones a previous_response_id may name; the
	// newest maxSocketIDs of them. Only the answering goroutine touches it.
	ids idRing
	// expired is set once a request came after Behavior.SocketLifetime:
	// every later one is refused the same way. Answering goroutine only.
	expired bool
}

// message is one reassembled client message.
type message struct {
	op   byte // opText or opBinary
	data []byte
}

// inbox is an unbounded queue from the reader to the answering goroutine.
type inbox struct {
	mu    sync.Mutex
	q     []message
	ready chan struct{} // capacity 1: something was pushed
}

func (in *inbox) push(m message) {
	in.mu.Lock()
	in.q = append(in.q, m)
	in.mu.Unlock()
	select {
	case in.ready <- struct{}{}:
	default:
	}
}

// pop returns the next message, waiting for one; false when ctx ends first.
func (in *inbox) pop(ctx context.Context) (message, bool) {
	for {
		in.mu.Lock()
		if len(in.q) > 0 {
			m := in.q[0]
			in.q[0] = message{}
			in.q = in.q[1:]
			in.mu.Unlock()
			return m, true
		}
		in.mu.Unlock()
		select {
		case <-in.ready:
		case <-ctx.Done():
			return message{}, false
		}
	}
}

// run serves the socket until the client goes (close frame or read error),
// a fault ends it, or Close; then the connection is closed and Sockets
// drops.
func (sk *socket) run() {
	defer sk.s.sockets.Add(-1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-ctx.Done():
		case <-sk.s.done:
			cancel()
		}
		// Closing the connection ends the reader and any blocked write.
		_ = sk.conn.Close()
	})
	wg.Go(func() {
		defer cancel()
		sk.read()
	})
	for {
		m, ok := sk.in.pop(ctx)
		if !ok || !sk.answer(ctx, m) {
			break
		}
	}
	cancel()
	wg.Wait()
}

// protocolError is a client frame RFC 6455 forbids; the socket is closed
// with code.
type protocolError struct {
	code   uint16
	reason string
}

func (e *protocolError) Error() string { return "websocket: " + e.reason }

// read reads client frames until the connection ends: it answers pings,
// echoes a close frame, reassembles fragmented messages and queues them.
func (sk *socket) read() {
	var (
		msg   []byte
		msgOp byte // opcode of the message being reassembled, 0 when none
	)
	fail := func(code uint16, reason string) {
		sk.closeWith(code, reason)
	}
	for {
		fin, op, p, err := readClientFrame(sk.br, maxMessage-len(msg))
		if err != nil {
			if pe, ok := errors.AsType[*protocolError](err); ok {
				fail(pe.code, pe.reason)
			}
			return
		}
		switch op {
		case opPing:
			if !sk.write(opPong, p) {
				return
			}
		case opPong:
		case opClose:
			if len(p) == 1 {
				fail(closeProtocolError, "close payload of one byte")
				return
			}
			if len(p) > 2 && !utf8.Valid(p[2:]) {
				fail(closeInvalidData, "close reason is not UTF-8")
				return
			}
			sk.write(opClose, p[:min(len(p), 2)]) // echo the status code
			return
		case opText, opBinary:
			if msgOp != 0 {
				fail(closeProtocolError, "new message inside a fragmented one")
				return
			}
			if !fin {
				msgOp, msg = op, p
				continue
			}
			if !sk.deliver(op, p) {
				return
			}
		case opContinuation:
			if msgOp == 0 {
				fail(closeProtocolError, "continuation frame outside a message")
				return
			}
			msg = append(msg, p...)
			if !fin {
				continue
			}
			if !sk.deliver(msgOp, msg) {
				return
			}
			msg, msgOp = nil, 0
		default:
			fail(closeProtocolError, "reserved opcode")
			return
		}
	}
}

// deliver queues a complete message; a text message must be UTF-8.
func (sk *socket) deliver(op byte, data []byte) bool {
	if op == opText && !utf8.Valid(data) {
		sk.closeWith(closeInvalidData, "text message is not UTF-8")
		return false
	}
	sk.in.push(message{op: op, data: data})
	return true
}

// readClientFrame reads one client frame. A data frame longer than budget
// is refused before its payload is read.
func readClientFrame(br *bufio.Reader, budget int) (fin bool, op byte, payload []byte, err error) {
	var h [2]byte
	if _, err = io.ReadFull(br, h[:]); err != nil {
		return false, 0, nil, err
	}
	fin, op = h[0]&0x80 != 0, h[0]&0x0f
	if h[0]&0x70 != 0 {
		return false, 0, nil, &protocolError{closeProtocolError, "RSV bit set, no extension was negotiated"}
	}
	if h[1]&0x80 == 0 {
		return false, 0, nil, &protocolError{closeProtocolError, "client frame is not masked"}
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var ext [2]byte
		if _, err = io.ReadFull(br, ext[:]); err != nil {
			return false, 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(ext[:]))
	case 127:
		var ext [8]byte
		if _, err = io.ReadFull(br, ext[:]); err != nil {
			return false, 0, nil, err
		}
		n = binary.BigEndian.Uint64(ext[:])
		if n>>63 != 0 {
			return false, 0, nil, &protocolError{closeProtocolError, "64-bit length with the high bit set"}
		}
	}
	if op >= opClose {
		if !fin || n > 125 {
			return false, 0, nil, &protocolError{closeProtocolError, "fragmented or oversized control frame"}
		}
	} else if n > uint64(max(budget, 0)) {
		return false, 0, nil, &protocolError{closeTooBig, "message larger than 64 MiB"}
	}
	var mask [4]byte
	if _, err = io.ReadFull(br, mask[:]); err != nil {
		return false, 0, nil, err
	}
	payload = make([]byte, n)
	if _, err = io.ReadFull(br, payload); err != nil {
		return false, 0, nil, err
	}
	for i := range payload {
		payload[i] ^= mask[i%4]
	}
	return fin, op, payload, nil
}

// write sends one unmasked, unfragmented frame. It reports false when the
// frame could not be written, or a close frame already went out.
func (sk *socket) write(op byte, p []byte) bool {
	sk.wmu.Lock()
	defer sk.wmu.Unlock()
	if sk.closeSent {
		return false
	}
	if op == opClose {
		sk.closeSent = true
	}
	frame := make([]byte, 0, 10+len(p))
	frame = append(frame, 0x80|op)
	switch n := len(p); {
	case n <= 125:
		frame = append(frame, byte(n))
	case n <= 0xffff:
		frame = append(frame, 126)
		frame = binary.BigEndian.AppendUint16(frame, uint16(n))
	default:
		frame = append(frame, 127)
		frame = binary.BigEndian.AppendUint64(frame, uint64(n))
	}
	frame = append(frame, p...)
	_, err := sk.conn.Write(frame)
	return err == nil
}

// closeWith sends a close frame with code and reason.
func (sk *socket) closeWith(code uint16, reason string) {
	p := binary.BigEndian.AppendUint16(nil, code)
	sk.write(opClose, append(p, reason[:min(len(reason), 123)]...))
}

// createFrame is what the fake reads of a client frame besides the
// request itself (requestBody).
type createFrame struct {
	Type     string `json:"type"`
	Generate *bool  `json:"generate"`
}

// answer handles one client message. It reports false when the socket must
// end: a write failed, a fault ended it, or a wait was cut short.
func (sk *socket) answer(ctx context.Context, m message) bool {
	if m.op == opBinary {
		return sk.sendError(http.StatusBadRequest, invalidFrameError("Binary WebSocket messages are not supported; send response.create as a text frame."), nil)
	}
	var f createFrame
	if err := json.Unmarshal(m.data, &f); err != nil {
		return sk.sendError(http.StatusBadRequest, invalidFrameError("We could not parse the JSON body of your request."), nil)
	}
	if f.Type != "response.create" {
		return true // response.processed and the like need no answer
	}
	s := sk.s
	s.record(Recorded{
		Method:   socketMethod,
		Path:     sk.path,
		RawQuery: sk.rawQuery,
		RawURI:   sk.rawURI,
		Header:   sk.header,
		Body:     m.data,
		Token:    sk.token,
		// TLSResumed is the socket's connection's, for each of its turns.
		TLSResumed: sk.resumed,
	})
	b := s.behavior(sk.token)
	fill := newFiller(time.Now(), cmp.Or(b.ResetIn, defaultResetIn))
	// The socket's age comes first: the backend refuses the frame before
	// it looks at the request or counts it.
	if sk.expired || time.Since(sk.opened) >= cmp.Or(max(b.SocketLifetime, 0), defaultSocketLifetime) {
		sk.expired = true
		return sk.sendFixtureError(http.StatusBadRequest, "websocket_connection_limit_400.json", b.Headers, fill)
	}
	if b.LimitAfter > 0 && s.addTurn(sk.token) > b.LimitAfter {
		b = limitReached(b)
	}
	if b.Status >= 400 {
		return sk.sendFixtureError(b.Status, cmp.Or(b.ErrorFixture, defaultErrorFixture(b.Status)), b.Headers, fill)
	}
	req := parseRequest(m.data)
	// The meter, when the account has one: a usage limit is answered
	// before the other rules, and every answer carries the meter's
	// headers.
	var mt *metering
	if b.Meter != nil {
		mt = s.meter(b.Meter, sk.owner, &req, time.Now())
		b.Headers = mt.merged(b.Headers)
		if mt.refused {
			return sk.sendFixtureError(http.StatusTooManyRequests, mt.fixture, b.Headers, mt.fill, mt.repl...)
		}
	}
	sc := scope{
		owner:  sk.owner,
		codex:  sk.path == chatgptPrefix+"/codex/responses",
		lite:   sk.lite || req.liteMarked(),
		known:  sk.ids.has,
		window: b.contextWindow(),
	}
	if rf := s.check(&req, sc); rf != nil {
		return sk.refuse(ctx, b, rf, &req, fill)
	}
	if f.Generate != nil && !*f.Generate {
		return sk.warmUp(req.Model) // generates nothing: not metered
	}
	mt.charge()
	if mt != nil {
		for _, ev := range mt.events {
			if !sk.write(opText, ev) {
				return false
			}
		}
	}
	name, _ := b.answers(&req)
	return sk.stream(ctx, b, "sse/"+name, req.Model, fill, s.minting(sk.owner, &req), true)
}

// refuse answers a request the backend's rules refuse: an error frame, or
// for BlobRefusalStream the response.created and response.failed frames.
func (sk *socket) refuse(ctx context.Context, b Behavior, rf *refusal, req *requestBody, fill filler) bool {
	fixture, stream, err := rf.form(b, true)
	switch {
	case err != nil:
		return sk.sendError(http.StatusInternalServerError, fixtureMissingBody(err), nil)
	case stream != "":
		// No stream faults, and a failed response is nothing to continue.
		return sk.stream(ctx, Behavior{}, "sse/"+stream, req.Model, fill, replacing(rf.repl), false)
	}
	return sk.sendFixtureError(rf.status, fixture, b.Headers, fill, rf.repl...)
}

// stream replays the fixture name (a path under testdata), one event
// payload per text frame, with the stream faults of b; edit, when not nil,
// rewrites each payload. remember records the response's id for
// previous_response_id.
func (sk *socket) stream(ctx context.Context, b Behavior, name, model string, fill filler, edit eventEdit, remember bool) bool {
	fx, err := sk.s.fixtures.stream(name)
	if err != nil {
		return sk.sendError(http.StatusInternalServerError, fixtureMissingBody(err), nil)
	}
	echo := modelEcho(fx.model, model)
	n := len(fx.events)
	stallAt, resetAt := eventLimit(b.StallAfter, n), eventLimit(b.ResetAfter, n)
	closeAt := eventLimit(b.CloseAfter, n)
	var id string
	for i := 0; ; i++ {
		switch {
		case i == resetAt:
			resetConn(sk.conn)
			return false
		case i == closeAt:
			_ = sk.conn.Close() // in good order, and without a close frame
			return false
		case i == stallAt:
			sk.s.wait(ctx, 0) // silent until the client goes, or Close
			return false
		case i == n:
			if id != "" && remember {
				sk.ids.add(id)
			}
			return true
		}
		if i > 0 && b.EventDelay > 0 && !sk.s.wait(ctx, b.EventDelay) {
			return false
		}
		ev := fx.events[i]
		p := echo(fill.bytes(ev.data))
		if edit != nil {
			p = edit(ev.typ, p)
		}
		if !sk.write(opText, p) {
			return false
		}
		if rid := responseEventID(ev.typ, p); rid != "" {
			id = rid
		}
	}
}

// responseEventID is response.id of a response-level event
// (response.created, response.completed, ...), "" for any other event.
func responseEventID(typ string, data []byte) string {
	rest, ok := strings.CutPrefix(typ, "response.")
	if !ok || strings.Contains(rest, ".") {
		return ""
	}
	var env struct {
		Response struct {
			ID string `json:"id"`
		} `json:"response"`
	}
	_ = json.Unmarshal(data, &env)
	return env.Response.ID
}

// warmUp answers "generate":false as the Responses API does: a response that
// is created and completed at once, with no output and no usage. The next
// request may name it.
func (sk *socket) warmUp(model string) bool {
	var raw [24]byte
	_, _ = rand.Read(raw[:])
	id := "resp_" + hex.EncodeToString(raw[:])
	type usage struct {
		InputTokens        int            `json:"input_tokens"`
		InputTokensDetails map[string]int `json:"input_tokens_details"`
		OutputTokens       int            `json:"output_tokens"`
		OutputDetails      map[string]int `json:"output_tokens_details"`
		TotalTokens        int            `json:"total_tokens"`
	}
	type response struct {
		ID        string `json:"id"`
		Object    string `json:"object"`
		CreatedAt int64  `json:"created_at"`
		Status    string `json:"status"`
		Model     string `json:"model,omitempty"`
		Output    []any  `json:"output"`
		Usage     *usage `json:"usage"`
	}
	type event struct {
		Type     string   `json:"type"`
		Sequence int      `json:"sequence_number"`
		Response response `json:"response"`
	}
	resp := response{ID: id, Object: "response", CreatedAt: time.Now().Unix(), Status: "in_progress", Model: model, Output: []any{}}
	created, _ := json.Marshal(event{"response.created", 0, resp})
	resp.Status = "completed"
	resp.Usage = &usage{InputTokensDetails: map[string]int{"cached_tokens": 0}, OutputDetails: map[string]int{"reasoning_tokens": 0}}
	completed, _ := json.Marshal(event{"response.completed", 1, resp})
	if !sk.write(opText, created) || !sk.write(opText, completed) {
		return false
	}
	sk.ids.add(id)
	return true
}

// sendFixtureError sends the error frame for status with the "error" object
// of testdata/errors/name and headers, all filled, with the old, new pairs
// of repl replaced in it (the id or blob a refusal names).
func (sk *socket) sendFixtureError(status int, name string, headers map[string]string, fill filler, repl ...string) bool {
	raw, err := sk.s.fixtures.raw("errors/" + name)
	if err != nil {
		return sk.sendError(http.StatusInternalServerError, fixtureMissingBody(err), nil)
	}
	obj := errorObject(status, replaceAll(fill.bytes(raw), repl))
	filled := make(map[string]string, len(headers))
	for k, v := range headers {
		filled[strings.ToLower(k)] = fill.string(v)
	}
	return sk.sendError(status, obj, filled)
}

// errorObject is the object an error frame carries for an error body: its
// "error" object; for the ChatGPT backend's {"detail": ...} bodies the
// detail (as {"message": detail} when it is a string); for anything else
// (the Cloudflare HTML page) {"message": status text}.
func errorObject(status int, body []byte) []byte {
	var env struct {
		Error  json.RawMessage `json:"error"`
		Detail json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &env) == nil {
		for _, v := range []json.RawMessage{env.Error, env.Detail} {
			var buf bytes.Buffer
			if bytes.HasPrefix(bytes.TrimSpace(v), []byte("{")) && json.Compact(&buf, v) == nil {
				return buf.Bytes()
			}
		}
		var detail string
		if json.Unmarshal(env.Detail, &detail) == nil && detail != "" {
			obj, _ := json.Marshal(map[string]string{"message": detail})
			return obj
		}
	}
	obj, _ := json.Marshal(map[string]string{"message": http.StatusText(status)})
	return obj
}

// invalidFrameError is the error object for a frame the fake cannot read.
func invalidFrameError(msg string) []byte {
	obj, _ := json.Marshal(map[string]any{"message": msg, "type": "invalid_request_error", "param": nil, "code": nil})
	return obj
}

// sendError sends one error frame in the shape Codex reads:
// {"type":"error","status":N,"error":{...},"headers":{...}}.
func (sk *socket) sendError(status int, errObj []byte, headers map[string]string) bool {
	if headers == nil {
		headers = map[string]string{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(struct {
		Type    string            `json:"type"`
		Status  int               `json:"status"`
		Error   json.RawMessage   `json:"error"`
		Headers map[string]string `json:"headers"`
	}{"error", status, errObj, headers})
	return sk.write(opText, bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}
