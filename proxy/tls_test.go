package proxy

import (
	"strings"
	"testing"

	"github.com/rotorproxy/rotor/accounts"
)

// The real backends are served over TLS. A request reaches an upstream
// over HTTPS through the HTTP client, and a socket's turn through the
// WebSocket dialer, each checking the upstream's certificate against the
// roots the proxy was given. A proxy trusting only the system's roots
// refuses the same upstream: the certificate is checked, not waved
// through.
func TestUpstreamOverTLS(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, []acct{{accounts.KindAPIKey, "k1"}}, peerConfig{seed: 1, tls: true})
	if !strings.HasPrefix(e.up.URL(), "https://") {
		t.Fatalf("the upstream is at %s, want https", e.up.URL())
	}
	resp := e.do("POST", "/v1/responses", `{"model":"gpt-5","input":"hi","stream":true}`)
	if got := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(got, "response.completed") {
		t.Fatalf("HTTP over TLS: %d %.300s", resp.StatusCode, got)
	}
	c := e.openSocket()
	if got := types(turn(t, c, createFrame)); got[len(got)-1] != "response.completed" {
		t.Fatalf("a socket's turn over TLS: %v", got)
	}
	var ws bool
	for _, r := range e.up.Requests() {
		ws = ws || r.Method == "WS"
	}
	if !ws {
		t.Errorf("the turn did not go up on an upstream socket: %+v", e.up.Requests())
	}

	strict := e.peer(withSystemRoots())
	resp = strict.do("POST", "/v1/responses", `{"model":"gpt-5","input":"hi","stream":true}`)
	if got := readAll(t, resp); resp.StatusCode == 200 || strings.Contains(got, "response.completed") {
		t.Errorf("a proxy with the system's roots was answered by the fake: %d %.300s", resp.StatusCode, got)
	}
}
