package proxy

import (
	"strconv"
	"strings"
	"testing"

	"github.com/rotorproxy/rotor/accounts"
	rerr "github.com/rotorproxy/rotor/errors"
)

// A backend call passes through with its target as the client sent it
// (SPEC §14: "unchanged"), only /backend-api swapped for the account's
// base: the backend decodes it once, as it would have come direct. A
// target that names a . or .. segment however often it is decoded, or
// that is not under /backend-api/, could reach another of the backend's
// paths (its OpenAI API, its sign-in) as the account, and is refused.
func TestBackendCallsPassTheTargetAsSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "tok-one"}})
	send := func(method, target, body string) string {
		t.Helper()
		return e.rawRequest(method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer tok-one\r\n" +
			"Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body)
	}
	for _, target := range []string{
		"/backend-api/a%3Fb",
		"/backend-api/a%2Fb",
		"/backend-api/a%23b/c?d=%23e",
		"/backend-api/plugins/list?scope=user&v=2&",
		"/backend-api/files/x%252e%252ey/..z",
		"/backend-api/tasks//list",
	} {
		before := len(e.up.Requests())
		out := send("GET", target, "")
		if !strings.HasPrefix(out, "HTTP/1.1 404") || !strings.Contains(out, "Not Found") {
			t.Errorf("%s: the upstream's answer was not relayed: %.200s", target, out)
			continue
		}
		reqs := e.up.Requests()[before:]
		if want := target; len(reqs) != 1 || reqs[0].RawURI != want || reqs[0].Token != "tok-one" {
			t.Errorf("%s reached the backend as %+v, want exactly %s", target, reqs, want)
		}
	}
	for _, c := range []struct{ method, target string }{
		{"GET", "/backend-api/%252e%252e/%252e%252e/v1/models"},
		{"POST", "/backend-api/%252e%252e/oauth/token"},
		{"GET", "/backend-api/%25252e%25252E/v1/models"},
		{"GET", "/backend-api/x/%2e%2e/y"},
		{"GET", "/backend-api/%2e/plugins"},
		{"GET", "/backend-api/./plugins"},
		{"GET", "/backend-api/a%5c..%5cb"},
		{"GET", "/backend-api/..%252f..%252fv1/models"},
		{"GET", "/x/../backend-api/plugins"},
		{"GET", "/backend-api/../backend-api/plugins"},
	} {
		before := len(e.up.Requests())
		out := send(c.method, c.target, `{"grant_type":"refresh_token"}`)
		if !strings.HasPrefix(out, "HTTP/1.1 400") || !strings.Contains(out, rerr.ProxyBadRequest) {
			t.Errorf("%s %s: %.300s, want a 400 %s", c.method, c.target, out, rerr.ProxyBadRequest)
		}
		if reqs := e.up.Requests()[before:]; len(reqs) != 0 {
			t.Errorf("%s %s reached the backend as %s", c.method, c.target, reqs[0].RawURI)
		}
	}
}
