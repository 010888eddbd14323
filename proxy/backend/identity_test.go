package backend

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

func TestEachAccountIsShownItsOwnInstallationID(t *testing.T) {
	ids := NewIdentities([]byte("home-secret"))
	a, b := ids.Of("acct-a"), ids.Of("acct-b")
	if a == b || a != NewIdentities([]byte("home-secret")).Of("acct-a") || a == NewIdentities([]byte("other")).Of("acct-a") {
		t.Fatalf("ids: a %s, b %s", a, b)
	}
	if len(a) != 36 || a[14] != '4' || strings.Count(a, "-") != 4 {
		t.Errorf("not UUID-shaped: %s", a)
	}
	const client = "0b8e1c55-7a3e-4f6b-9d0c-1e2f3a4b5c6d"
	h := new(fasthttp.RequestHeader)
	h.Set(InstallationHeader, client)
	body := []byte(`{"client_metadata":{"x-codex-installation-id":"` + client + `"},"input":[]}`)
	cid := Installation(h.Peek(InstallationHeader), nil)
	if meta := gjson.GetBytes(body, "client_metadata").Raw; Installation(nil, []byte(meta)) != cid || Installation(nil, nil) != "" {
		t.Errorf("the installation id is read from the header or else the body's client_metadata")
	}
	out := ids.Own(cid, "acct-a", body)
	if bytes.Contains(out, []byte(client)) || gjson.GetBytes(out, "client_metadata.x-codex-installation-id").Str != a {
		t.Errorf("body to acct-a: %s", out)
	}
	up := new(fasthttp.RequestHeader)
	up.Set(InstallationHeader, client)
	up.Set("x-codex-turn-metadata", `{"installation_id":"`+client+`","turn_id":"t1"}`)
	ids.OwnHeaders(cid, "acct-b", up.Peek, up.Set)
	if string(up.Peek(InstallationHeader)) != b || !strings.Contains(string(up.Peek("x-codex-turn-metadata")), b) {
		t.Errorf("headers to acct-b: %s", up.Header())
	}
}
