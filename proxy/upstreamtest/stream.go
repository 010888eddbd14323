package upstreamtest

import (
	"bytes"
	"cmp"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// event is one server-sent event of a fixture.
type event struct {
	typ  string
	raw  []byte // the event exactly as in the fixture: "event: T\ndata: {...}\n\n"
	data []byte // its data payload
}

// sseFixture is a parsed stream fixture.
type sseFixture struct {
	events []event
	// model is the response.model the fixture was recorded with, replaced by
	// the request's model at serve time ("" when no event carries one).
	model string
}

// fixtureCache loads fixtures lazily and keeps them: tests and benchmarks
// serve the same few files thousands of times. Failed loads are not cached.
type fixtureCache struct {
	dir     string
	mu      sync.Mutex
	raws    map[string][]byte
	streams map[string]*sseFixture
}

// raw returns the bytes of dir/name. name is slash-separated and must stay
// inside dir.
func (c *fixtureCache) raw(name string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.raws[name]; ok {
		return b, nil
	}
	local := filepath.FromSlash(name)
	if !filepath.IsLocal(local) {
		return nil, fmt.Errorf("fixture name %q leaves the testdata directory", name)
	}
	b, err := os.ReadFile(filepath.Join(c.dir, local))
	if err != nil {
		return nil, fmt.Errorf("fixture %s: %w", name, err)
	}
	if c.raws == nil {
		c.raws = make(map[string][]byte)
	}
	c.raws[name] = b
	return b, nil
}

// stream returns the parsed SSE fixture dir/name.
func (c *fixtureCache) stream(name string) (*sseFixture, error) {
	c.mu.Lock()
	fx, ok := c.streams[name]
	c.mu.Unlock()
	if ok {
		return fx, nil
	}
	raw, err := c.raw(name)
	if err != nil {
		return nil, err
	}
	fx, err = parseSSE(raw)
	if err != nil {
		return nil, fmt.Errorf("fixture %s: %w", name, err)
	}
	c.mu.Lock()
	if c.streams == nil {
		c.streams = make(map[string]*sseFixture)
	}
	c.streams[name] = fx
	c.mu.Unlock()
	return fx, nil
}

// parseSSE splits a fixture into events. Events are separated by a blank
// line; each keeps its original bytes so the fake replays exactly what was
// recorded.
func parseSSE(raw []byte) (*sseFixture, error) {
	raw = bytes.ReplaceAll(raw, []byte("\r\n"), []byte("\n"))
	fx := &sseFixture{}
	for block := range bytes.SplitSeq(raw, []byte("\n\n")) {
		block = bytes.Trim(block, "\n")
		if len(block) == 0 {
			continue
		}
		ev := event{raw: append(append([]byte(nil), block...), '\n', '\n')}
		var data [][]byte
		for line := range bytes.SplitSeq(block, []byte("\n")) {
			switch {
			case bytes.HasPrefix(line, []byte("event:")):
				ev.typ = string(bytes.TrimSpace(line[len("event:"):]))
			case bytes.HasPrefix(line, []byte("data:")):
				d := line[len("data:"):]
				d = bytes.TrimPrefix(d, []byte(" "))
				data = append(data, d)
			}
		}
		ev.data = bytes.Join(data, []byte("\n"))
		if ev.typ == "" {
			// A data-only event: its type is the payload's "type".
			var t struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(ev.data, &t)
			ev.typ = t.Type
		}
		if fx.model == "" {
			// Responses events carry it in response, chat chunks at the top.
			var m struct {
				Model    string `json:"model"`
				Response struct {
					Model string `json:"model"`
				} `json:"response"`
			}
			if json.Unmarshal(ev.data, &m) == nil {
				fx.model = cmp.Or(m.Response.Model, m.Model)
			}
		}
		fx.events = append(fx.events, ev)
	}
	if len(fx.events) == 0 {
		return nil, errors.New("no events")
	}
	return fx, nil
}

// modelEcho returns a function that rewrites the fixture's model to the
// requested one, as a real server reports the model it was asked for. A plain
// substitution of the `"model":"<fixture model>"` pair is enough here: the
// fixtures are compact JSON and the fake is not performance critical.
func modelEcho(fixtureModel, requested string) func([]byte) []byte {
	if fixtureModel == "" || requested == "" || fixtureModel == requested {
		return func(b []byte) []byte { return b }
	}
	oldQ, _ := json.Marshal(fixtureModel)
	newQ, _ := json.Marshal(requested)
	from := append([]byte(`"model":`), oldQ...)
	to := append([]byte(`"model":`), newQ...)
	return func(b []byte) []byte { return bytes.ReplaceAll(b, from, to) }
}

// eventLimit turns a StallAfter/ResetAfter setting into the event index at
// which it fires: -1 for never, and at most n (after the last event).
func eventLimit(after, n int) int {
	if after <= 0 {
		return -1
	}
	return min(after, n)
}

// serveStream replays the SSE fixture name (a path under testdata), one
// flushed write per event; edit, when not nil, rewrites each event's data
// (minting encrypted_content, naming a refused blob). lead, when not nil,
// is sent first, in the same write as the headers: events the backend puts
// at the head of every stream (the meter's codex.rate_limits).
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, b Behavior, name, model string, fill filler, edit eventEdit, lead []byte) {
	fx, err := s.fixtures.stream(name)
	if err != nil {
		fixtureMissing(w, err)
		return
	}
	ctx := r.Context()
	rc := http.NewResponseController(w)
	echo := modelEcho(fx.model, model)
	n := len(fx.events)
	stallAt, resetAt := eventLimit(b.StallAfter, n), eventLimit(b.ResetAfter, n)
	closeAt := eventLimit(b.CloseAfter, n)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if len(lead) > 0 {
		if _, err := w.Write(lead); err != nil {
			return
		}
	}
	for i := 0; ; i++ {
		if i == resetAt {
			abortConn(rc)
			return
		}
		if i == closeAt {
			if conn, _, err := rc.Hijack(); err == nil {
				_ = conn.Close() // in good order; Hijack flushed the events sent
			}
			return
		}
		if i == stallAt {
			// Headers and earlier events are already flushed; now go silent
			// with the connection open, as a stuck upstream does.
			s.hold(ctx, w, 0)
			return
		}
		if i == n {
			return
		}
		if i > 0 && b.EventDelay > 0 && !s.hold(ctx, w, b.EventDelay) {
			return
		}
		if _, err := w.Write(editedRaw(fx.events[i], echo, fill, edit)); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// editedRaw is the bytes to send for ev: the recorded event, filled and with
// the model echoed, or, when edit changes its data, the event written
// again around the new data (fixtures are one event line and one data
// line, so nothing else is lost).
func editedRaw(ev event, echo func([]byte) []byte, fill filler, edit eventEdit) []byte {
	raw := echo(fill.bytes(ev.raw))
	if edit == nil {
		return raw
	}
	data := echo(fill.bytes(ev.data))
	edited := edit(ev.typ, data)
	if bytes.Equal(edited, data) {
		return raw
	}
	out := make([]byte, 0, len(edited)+len(ev.typ)+20)
	if bytes.HasPrefix(raw, []byte("event:")) {
		out = append(out, "event: "...)
		out = append(out, ev.typ...)
		out = append(out, '\n')
	}
	out = append(out, "data: "...)
	out = append(out, edited...)
	return append(out, "\n\n"...)
}

// serveChatCompletion answers a non-streaming Chat Completions request with
// the recorded chat.completion object base+".json". The stream faults map
// onto it as in serveAssembled: EventDelay delays the answer by the time the
// stream base+".sse" would have taken, StallAfter hangs and ResetAfter resets
// before any header.
func (s *Server) serveChatCompletion(w http.ResponseWriter, r *http.Request, b Behavior, base, model string, fill filler) {
	raw, err := s.fixtures.raw(base + ".json")
	if err != nil {
		fixtureMissing(w, err)
		return
	}
	ctx := r.Context()
	switch {
	case b.ResetAfter > 0:
		abortConn(http.NewResponseController(w))
		return
	case b.StallAfter > 0:
		s.hold(ctx, w, 0)
		return
	case b.EventDelay > 0:
		fx, err := s.fixtures.stream(base + ".sse")
		if err != nil {
			fixtureMissing(w, err)
			return
		}
		if n := len(fx.events); n > 1 && !s.hold(ctx, w, b.EventDelay*time.Duration(n-1)) {
			return
		}
	}
	var m struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(raw, &m)
	writeJSON(w, http.StatusOK, modelEcho(m.Model, model)(fill.bytes(raw)))
}

// failedBody is the error a non-streaming request gets when the fixture's
// response failed, in the api.openai.com error shape.
type failedBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// serveAssembled answers a non-streaming API-style request with the single
// Response object of the fixture's response.completed event, as
// api.openai.com does for "stream":false. The stream faults map onto it:
// EventDelay delays the answer by the time the stream would have taken,
// StallAfter hangs before the headers, ResetAfter resets before the headers.
// A fixture ending in response.failed becomes the error status and body the
// API sends (503 for overload codes, else 500). edit, when not nil,
// rewrites the final event as it would the stream's.
func (s *Server) serveAssembled(w http.ResponseWriter, r *http.Request, b Behavior, name, model string, fill filler, edit eventEdit) {
	fx, err := s.fixtures.stream("sse/" + name)
	if err != nil {
		fixtureMissing(w, err)
		return
	}
	ctx := r.Context()
	switch {
	case b.ResetAfter > 0:
		abortConn(http.NewResponseController(w))
		return
	case b.StallAfter > 0:
		s.hold(ctx, w, 0)
		return
	case b.EventDelay > 0 && len(fx.events) > 1:
		if !s.hold(ctx, w, b.EventDelay*time.Duration(len(fx.events)-1)) {
			return
		}
	}
	echo := modelEcho(fx.model, model)
	for _, ev := range fx.events {
		switch ev.typ {
		case "response.completed":
			var env struct {
				Response json.RawMessage `json:"response"`
			}
			data := echo(fill.bytes(ev.data))
			if edit != nil {
				data = edit(ev.typ, data)
			}
			if err := json.Unmarshal(data, &env); err != nil || len(env.Response) == 0 {
				fixtureMissing(w, fmt.Errorf("fixture sse/%s: response.completed has no response object", name))
				return
			}
			writeJSON(w, http.StatusOK, env.Response)
			return
		case "response.failed":
			var env struct {
				Response struct {
					Error struct {
						Code    string `json:"code"`
						Message string `json:"message"`
					} `json:"error"`
				} `json:"response"`
			}
			_ = json.Unmarshal(fill.bytes(ev.data), &env)
			var out failedBody
			out.Error.Message = env.Response.Error.Message
			out.Error.Type = "server_error"
			status := http.StatusInternalServerError
			if code := env.Response.Error.Code; code != "" {
				out.Error.Code = &code
				if code == "server_is_overloaded" || code == "slow_down" {
					status = http.StatusServiceUnavailable
				}
			}
			body, _ := json.Marshal(out)
			writeJSON(w, status, body)
			return
		}
	}
	fixtureMissing(w, fmt.Errorf("fixture sse/%s: no response.completed or response.failed event", name))
}

// abortConn drops the connection with a TCP reset: no terminating chunk, no
// FIN handshake, the way a crashed upstream or a middlebox kill looks to the
// client. If the connection cannot be hijacked it still aborts, through the
// panic net/http reserves for exactly this.
func abortConn(rc *http.ResponseController) {
	// Hijack itself flushes whatever was written, so the events sent so far
	// reach the client before the reset; nothing is written when no header
	// was (the reset then comes before any status line).
	conn, _, err := rc.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	resetConn(conn)
}

// resetConn closes conn with a TCP reset. Under TLS the reset goes under
// it too: closing the TLS connection would send a close_notify first, an
// orderly end a crashed upstream never sends.
func resetConn(conn net.Conn) {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close sends RST instead of FIN
	}
	_ = conn.Close()
}
