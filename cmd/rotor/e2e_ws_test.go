package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// e2eRequestLogs are the request log lines (JSON) rotor wrote on stderr.
func e2eRequestLogs(stderr string) []gjson.Result {
	var out []gjson.Result
	for l := range strings.SplitSeq(stderr, "\n") {
		if j := gjson.Parse(l); j.Get("message").Str == "request" {
			out = append(out, j)
		}
	}
	return out
}

// Codex CLI linked by rotor exec talks Responses over one WebSocket, as it
// does to OpenAI directly: a turn with a tool call is several requests on
// one socket, and when the account serving the socket reaches its usage
// limit in the middle, the next request moves to another account with
// the whole conversation.
func TestE2ECodexWebSocketSession(t *testing.T) {
	cache := e2eClients(t)
	w := newE2EWorld(t)
	w.useClients(cache)
	keys := []string{"sk-e2e-ws-one", "sk-e2e-ws-two"}
	for i, k := range keys {
		w.addKey([]string{"one", "two"}[i], k)
		// The first answer of a turn is a tool call; whichever account
		// gives it is at its limit for the next request.
		w.up.Set(k, upstreamtest.Behavior{ToolRoundTrip: true, LimitAfter: 1})
	}
	args := append([]string{"exec", "--log-format", "json", "--log-level", "info", "--", "codex"}, e2eCodexFlags...)
	r := w.rotor(e2eCodexTimeout, "", append(args, "what is the weather in Paris?")...)
	if r.code != 0 || !strings.Contains(r.stdout, e2eHello) {
		t.Fatalf("codex exec over the socket failed: %v", r)
	}
	if strings.Contains(r.stderr, "Falling back from WebSockets") || strings.Contains(r.stderr, "Reconnecting") {
		t.Errorf("Codex did not keep its WebSocket: %s", r.stderr)
	}
	for _, l := range e2eRequestLogs(r.stderr) {
		if l.Get("transport").Str != "websocket" {
			t.Errorf("a request did not come over the socket: %s", l.Raw)
		}
	}
	e2eMovedSession(t, r.stderr, "websocket")
	// The request after the failover carried the whole conversation: the
	// tool call the first account made, and Codex's answer to it.
	calls := e2eResponses(w.up)
	last := gjson.ParseBytes(calls[len(calls)-1].Body)
	var types []string
	for _, it := range last.Get("input").Array() {
		types = append(types, it.Get("type").Str)
	}
	if !slices.Contains(types, "function_call") || !slices.Contains(types, "function_call_output") || last.Get("previous_response_id").Exists() {
		t.Errorf("the moved request lacks the conversation: input types %v, previous_response_id %s", types, last.Get("previous_response_id").Raw)
	}
}

// codex doctor, through rotor exec, finds the Responses WebSocket.
func TestE2ECodexDoctorWebSocket(t *testing.T) {
	cache := e2eClients(t)
	w := newE2EWorld(t)
	w.useClients(cache)
	w.addKey("one", "sk-e2e-doctor")
	r := w.rotor(e2eCodexTimeout, "", "exec", "--", "codex", "-c", "check_for_update_on_startup=false", "doctor", "--json", "--network-only")
	j := gjson.Parse(r.stdout)
	var ws gjson.Result
	j.Get("checks").ForEach(func(_, c gjson.Result) bool {
		if strings.Contains(c.Get("id").Str+c.Get("name").Str, "websocket") {
			ws = c
		}
		return true
	})
	if !ws.Exists() {
		t.Fatalf("codex doctor reported no WebSocket check: %v", r)
	}
	if ws.Get("status").Str != "ok" || !strings.Contains(ws.Get("summary").Str, "handshake succeeded") {
		t.Errorf("codex doctor's WebSocket check: %s", ws.Raw)
	}
}
