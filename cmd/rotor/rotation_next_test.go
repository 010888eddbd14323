package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// `rotor rotation status` names, as next, the account the running serve's
// next new conversation actually goes to (docs/commands.md "who is next and why"):
// the serve's own pick, with its own tie-breaker and what it knows in
// memory, never one worked out by the command's process. Checked against
// a real serve across pool states: fresh, quota known, an account
// disabled and back, pinned and unpinned, after a socket; with no serve
// it works the pick out itself and says so.
func TestRotationStatusNamesTheServesNextPick(t *testing.T) {
	t.Parallel()
	up := upstreamtest.New("../../testdata")
	if err := up.Start(""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	h := newHome(t)
	h.setenv("ROTOR_OPENAI_BASE_URL", up.OpenAIBase())
	h.setenv("ROTOR_CLIENT_KEY", raceClientKey)
	keys := []string{"sk-1", "sk-2"}
	for _, k := range keys {
		h.addKey(k[3:], k)
	}
	p := raceServe(t, rotorBin, h.env, "serve")

	// next is the account rotation status names as next, and why.
	next := func() (int, string) {
		t.Helper()
		r := h.ok("", "rotation", "status", "--json")
		var v struct {
			Next struct {
				Index    *int   `json:"index"`
				Reason   string `json:"reason"`
				Source   string `json:"source"`
				ServePID *int   `json:"serve_pid"`
			} `json:"next"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.Next.Index == nil {
			t.Fatalf("rotation status --json: %v\n%s", err, r.stdout)
		}
		if v.Next.Source != "serve" || v.Next.ServePID == nil || *v.Next.ServePID != p.cmd.Process.Pid {
			t.Fatalf("next was not the serve's (pid %d): %s", p.cmd.Process.Pid, r.stdout)
		}
		return *v.Next.Index, v.Next.Reason
	}
	// served is the account (1-based) whose key the fake saw during f.
	served := func(f func()) int {
		t.Helper()
		before := make([]int, len(keys))
		for i, k := range keys {
			before[i] = up.Count(k)
		}
		f()
		got := 0
		for i, k := range keys {
			if up.Count(k) > before[i] {
				if got != 0 {
					t.Fatalf("one conversation reached accounts %d and %d", got, i+1)
				}
				got = i + 1
			}
		}
		return got
	}
	n := 0
	// newConversation sends one new conversation over HTTP, its input a
	// string or an array of messages, and returns the account it went to.
	newConversation := func(array bool) int {
		t.Helper()
		n++
		input := fmt.Sprintf("%q", fmt.Sprintf("conversation %d", n))
		if array {
			input = fmt.Sprintf(`[{"role":"user","content":"conversation %d"}]`, n)
		}
		return served(func() {
			req, _ := http.NewRequest("POST", p.url+"/responses", strings.NewReader(`{"model":"gpt-5","stream":true,"store":false,"input":`+input+`}`))
			req.Header.Set("Authorization", "Bearer "+raceClientKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := raceHTTP.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(body), "response.completed") {
				t.Fatalf("new conversation %d: %d %.300s", n, resp.StatusCode, body)
			}
		})
	}
	check := func(state string, rounds int, wantReason string) {
		t.Helper()
		for i := range rounds {
			named, why := next()
			if got := newConversation(i%2 == 1); got != named {
				t.Errorf("%s, round %d: rotation status named account %d (%s) as next; the new conversation went to account %d", state, i+1, named, why, got)
			}
			if wantReason != "" && why != wantReason {
				t.Errorf("%s, round %d: next's reason %q, want %q", state, i+1, why, wantReason)
			}
		}
	}
	// settle waits until the serve has surely read a change to the home
	// (it looks every 250 ms).
	settle := func() { time.Sleep(time.Second) }

	check("fresh pool", 3, "")
	// Quota known: the accounts answer with different windows.
	for i, used := range []string{"62", "10"} {
		up.Set(keys[i], upstreamtest.Behavior{Headers: map[string]string{
			"x-codex-primary-used-percent": used, "x-codex-primary-window-minutes": "300", "x-codex-primary-reset-after-seconds": "7980",
			"x-codex-secondary-used-percent": "35", "x-codex-secondary-window-minutes": "10080", "x-codex-secondary-reset-after-seconds": "345600"}})
	}
	check("quota known", 4, "")

	h.ok("", "disable", "1")
	settle()
	check("account 1 disabled", 2, "")
	h.ok("", "enable", "1")
	settle()
	check("account 1 enabled again", 3, "")

	h.ok("", "switch", "1")
	settle()
	check("pinned to account 1", 2, "manual pin")
	h.ok("", "unpin")
	settle()
	check("unpinned", 3, "")

	// A turn over a socket, then new conversations over HTTP.
	served(func() {
		hdr := http.Header{}
		hdr.Set("Authorization", "Bearer "+raceClientKey)
		c, _, err := (&websocket.Dialer{HandshakeTimeout: 5 * time.Second}).Dial("ws://"+hostOf(p.url)+"/v1/responses", hdr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create","model":"gpt-5","input":[{"role":"user","content":"over a socket"}]}`))
		c.SetReadDeadline(time.Now().Add(15 * time.Second))
		for {
			_, b, err := c.ReadMessage()
			if err != nil {
				t.Fatalf("socket turn: %v", err)
			}
			if strings.Contains(string(b), `"type":"response.completed"`) {
				break
			}
		}
	})
	check("after a socket", 3, "")

	// The text says whose pick it is.
	if r := h.ok("", "rotation", "status"); !strings.Contains(r.stdout, fmt.Sprintf("as rotor serve (pid %d) will choose for a new conversation", p.cmd.Process.Pid)) {
		t.Errorf("rotation status does not say the pick is the serve's:\n%s", r.stdout)
	}

	// No serve: worked out here, and said so.
	p.stop(t)
	r := h.ok("", "rotation", "status", "--json")
	var v struct {
		Next map[string]any `json:"next"`
	}
	json.Unmarshal([]byte(r.stdout), &v)
	if v.Next["source"] != "local" || v.Next["serve_pid"] != nil || v.Next["local_because"] != "no rotor serve runs" || v.Next["index"] == nil {
		t.Errorf("next without a serve: %v", v.Next)
	}
	if r := h.ok("", "rotation", "status"); !strings.Contains(r.stdout, "worked out here: no rotor serve runs; a serve may choose otherwise") {
		t.Errorf("rotation status without a serve does not say the pick is its own:\n%s", r.stdout)
	}
}
