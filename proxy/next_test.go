package proxy

import (
	"encoding/json"
	"io"
	"os"
	"testing"
)

// GET /rotor/next takes the client key like every route, and names the
// account the next new conversation goes to as the forward loop picks
// it: an account behind an endpoint that failed lately is left out, as
// the pick leaves it out, even when it scores best.
func TestNextIsTheForwardLoopsPick(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoAPIKeys())
	expectError(t, e.doAs("", "GET", NextPath, ""), 401, "runtime_rotation_proxy_unauthorized")

	next := func() Next {
		t.Helper()
		resp := e.do("GET", NextPath, "")
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var n Next
		if err := json.Unmarshal(body, &n); resp.StatusCode != 200 || err != nil {
			t.Fatalf("GET %s: %d %s", NextPath, resp.StatusCode, body)
		}
		if n.PID != os.Getpid() {
			t.Errorf("pid %d, want %d", n.PID, os.Getpid())
		}
		return n
	}
	dead := closedPort(t)
	e.setBaseURL(1, "http://"+dead+"/v1")
	e.prefer(1)
	if n := next(); n.Index != 1 || n.AccountID != e.id(1) {
		t.Fatalf("before its endpoint failed: next %+v, want account 1", n)
	}
	expectStream(t, e.do("POST", "/v1/responses", streamBody))
	e.expectCounts(map[string]int{"bad": 0, "good": 1})
	e.prefer(1)
	n := next()
	if n.Index != 2 || n.AccountID != e.id(2) || n.Reason != "best score" {
		t.Errorf("account 1's endpoint is down: next %+v, want account 2", n)
	}
	expectStream(t, e.do("POST", "/v1/responses", `{"model":"gpt-5","stream":true,"input":"another conversation"}`))
	e.expectCounts(map[string]int{"bad": 0, "good": 2})
}
