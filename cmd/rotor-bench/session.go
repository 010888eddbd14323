package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
)

// A session is what Codex CLI does in one turn with tools: 20 requests in
// a row, each answered with a tool call whose output the next request
// carries. Over HTTP every request sends the whole conversation so far;
// over one socket a request sends only its new items and names the
// previous response (previous_response_id), and rotor keeps a socket of
// its own to the upstream. The session scenario runs both through rotor,
// interleaved, and compares time per turn and rotor's CPU per turn.
const (
	sessionTurns    = 20
	sessionCount    = 30
	sessionToolSize = 8 << 10 // bytes of tool output a turn adds
)

// sessionResult is what one transport's sessions measured.
type sessionResult struct {
	turns []time.Duration
	cpu   time.Duration
	errs  int
}

// runSessions measures sessions over HTTP and over one socket through
// rotor (started afresh in front of up) and prints their table.
func runSessions(ctx context.Context, cfg config, up string, out, log io.Writer) error {
	peers, stop, err := startPeers(ctx, cfg, up, log, false)
	if err != nil {
		return err
	}
	defer stop()
	rotor := peers[len(peers)-1]
	var overHTTP, overSocket sessionResult
	for i := range sessionCount * max(cfg.rounds, 1) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(log, "rotor-bench: session %d over HTTP and over a socket\n", i+1)
		overHTTP.run(rotor, func() error { return httpSession(ctx, rotor, &overHTTP) })
		overSocket.run(rotor, func() error { return socketSession(ctx, rotor, &overSocket) })
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
	perTurn := func(r *sessionResult) time.Duration { return r.cpu / time.Duration(max(len(r.turns), 1)) }
	ratio := func(a, b time.Duration) string {
		if b <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", float64(a)/float64(b))
	}
	name := fmt.Sprintf("%d-turn tool session through rotor", sessionTurns)
	fmt.Fprintf(out, "\n| scenario | measure | over HTTP | over one socket | socket vs HTTP |\n|---|---|---|---|---|\n")
	fmt.Fprintf(out, "| %s | time per turn p50 | %s | %s | %s |\n", name,
		ms(pct(overHTTP.turns, 50)), ms(pct(overSocket.turns, 50)), ratio(pct(overSocket.turns, 50), pct(overHTTP.turns, 50)))
	fmt.Fprintf(out, "| %s | whole session p50 | %s | %s | %s |\n", name,
		ms(sessionTurns*pct(overHTTP.turns, 50)), ms(sessionTurns*pct(overSocket.turns, 50)), ratio(pct(overSocket.turns, 50), pct(overHTTP.turns, 50)))
	fmt.Fprintf(out, "| %s | rotor CPU per turn | %s | %s | %s |\n", name,
		ms(perTurn(&overHTTP)), ms(perTurn(&overSocket)), ratio(perTurn(&overSocket), perTurn(&overHTTP)))
	fmt.Fprintf(out, "| %s | failed turns | %d | %d | - |\n", name, overHTTP.errs, overSocket.errs)
	return nil
}

// run runs one session and adds rotor's CPU time over it to r.
func (r *sessionResult) run(rotor peer, session func() error) {
	cpu0 := cpuTime(rotor.pid)
	if err := session(); err != nil {
		r.errs++
	}
	r.cpu += cpuTime(rotor.pid) - cpu0
}

// toolOutput is the function_call_output item a turn adds.
func toolOutput(turn int) string {
	return `{"type":"function_call_output","call_id":"call_` + strconv.Itoa(turn) + `","output":"` +
		strings.Repeat("o", sessionToolSize) + `"}`
}

const sessionFirstItem = `{"type":"message","role":"user","content":[{"type":"input_text","text":"fix the tests"}]}`

// httpSession posts every turn with the whole conversation, as Codex does
// over HTTP.
func httpSession(ctx context.Context, p peer, r *sessionResult) error {
	items := []string{sessionFirstItem}
	client := &http.Client{Timeout: 60 * time.Second}
	for turn := range sessionTurns {
		body := `{"model":"gpt-5","stream":true,"store":false,"input":[` + strings.Join(items, ",") + `]}`
		req := newRequest(ctx, p, "", []byte(body))
		req.Header.Set("session_id", "bench-http")
		req.Header.Set("x-bench-session", "1")
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		call, err := readSessionSSE(resp)
		if err != nil {
			return err
		}
		r.turns = append(r.turns, time.Since(t0))
		items = append(items, call, toolOutput(turn))
	}
	return nil
}

// readSessionSSE reads one streamed answer to its end and returns the
// function_call item it carried.
func readSessionSSE(resp *http.Response) (string, error) {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", errors.New(resp.Status)
	}
	br := bufio.NewReader(resp.Body)
	call := ""
	for {
		line, err := br.ReadBytes('\n')
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			if item := gjson.GetBytes(data, "item"); item.Exists() {
				call = item.Raw
			}
		}
		if err != nil {
			if call == "" {
				return "", errors.New("no tool call in the answer")
			}
			return call, nil
		}
	}
}

// socketSession sends every turn on one socket with only its new items,
// naming the previous response, as Codex does over its WebSocket.
func socketSession(ctx context.Context, p peer, r *sessionResult) error {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+clientKey)
	h.Set("OpenAI-Beta", "responses_websockets=2026-02-06")
	h.Set("session_id", "bench-socket")
	h.Set("x-bench-session", "1")
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, EnableCompression: true}
	conn, _, err := d.DialContext(ctx, "ws"+strings.TrimPrefix(p.base, "http")+"/responses", h)
	if err != nil {
		return err
	}
	defer conn.Close()
	items, prev := []string{sessionFirstItem}, ""
	for turn := range sessionTurns {
		frame := `{"type":"response.create","model":"gpt-5","store":false,"input":[` + strings.Join(items, ",") + `]`
		if prev != "" {
			frame += `,"previous_response_id":"` + prev + `"`
		}
		frame += "}"
		t0 := time.Now()
		if err := conn.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
			return err
		}
		conn.SetReadDeadline(time.Now().Add(60 * time.Second))
		call := ""
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				return err
			}
			if item := gjson.GetBytes(data, "item"); item.Exists() {
				call = item.Raw
			}
			if typ := gjson.GetBytes(data, "type").Str; typ == "response.completed" {
				prev = gjson.GetBytes(data, "response.id").Str
				break
			} else if typ == "error" {
				return fmt.Errorf("error frame: %s", data)
			}
		}
		r.turns = append(r.turns, time.Since(t0))
		items = []string{call, toolOutput(turn)}
	}
	return nil
}

// sessionEvents are the events of one session answer: a tool call, then
// the completed response whose id the next request may name.
func sessionEvents(id string) [][]byte {
	call := `{"type":"function_call","id":"fc_` + id + `","call_id":"call_` + id + `","name":"shell","arguments":"{\"cmd\":[\"go\",\"test\"]}","status":"completed"}`
	return [][]byte{
		[]byte(`{"type":"response.created","response":{"id":"` + id + `","object":"response","status":"in_progress","output":[]}}`),
		[]byte(`{"type":"response.output_item.done","output_index":0,"item":` + call + `}`),
		[]byte(`{"type":"response.completed","response":{"id":"` + id + `","object":"response","status":"completed","model":"gpt-5","output":[` + call + `],"usage":{"input_tokens":100,"output_tokens":10,"total_tokens":110}}}`),
	}
}

var sessionIDs atomic.Int64

func nextSessionID() string { return "resp_bench_" + strconv.FormatInt(sessionIDs.Add(1), 10) }

// serveSessionSSE answers a session request over HTTP.
func serveSessionSSE(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for _, ev := range sessionEvents(nextSessionID()) {
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", gjson.GetBytes(ev, "type").Str, ev)
		fl.Flush()
	}
}

// upgrader serves the upstream's sockets.
var upgrader = websocket.Upgrader{EnableCompression: true, CheckOrigin: func(*http.Request) bool { return true }}

// serveSessionSocket answers session requests on a socket, each
// response.create with the events of serveSessionSSE, one per frame.
func serveSessionSocket(w http.ResponseWriter, r *http.Request) {
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			return
		}
		if gjson.GetBytes(data, "type").Str != "response.create" {
			continue
		}
		for _, ev := range sessionEvents(nextSessionID()) {
			if conn.WriteMessage(websocket.TextMessage, ev) != nil {
				return
			}
		}
	}
}
