package proxy

import (
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/backend"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation"
)

// Codex signed in as itself (docs/codex.md) sends its own access token where
// other clients send the client key.

// setToken gives account i a new access token, as a refresh by another
// process would.
func (e *env) setToken(i int, token string) {
	e.t.Helper()
	sec, err := secrets.Open(e.store.Dir(), "file", io.Discard)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := sec.Set(e.id(i), secrets.Secret{AccessToken: token, RefreshToken: "r-" + token}); err != nil {
		e.t.Fatal(err)
	}
	e.sel.Runtime().TokensChanged(e.id(i))
}

func TestAPoolAccountsTokenIsACredential(t *testing.T) {
	t.Parallel()
	e, clk, _ := frozenEnv(t, []acct{{accounts.KindChatGPT, "tok-one"}, {accounts.KindChatGPT, "tok-two"}})
	resp := e.doAs("tok-one", "POST", "/v1/responses", streamBody, "ChatGPT-Account-ID", "cg-tok-one")
	if ev := sseEvents(t, resp.Body); resp.StatusCode != 200 || ev[len(ev)-1] != "response.completed" {
		t.Fatalf("Codex's own token: %d %v", resp.StatusCode, ev)
	}
	// The request went through selection: it reached an upstream with
	// that account's token, never the client's header as it came.
	if r := e.up.Requests(); len(r) != 1 || (r[0].Token != "tok-one" && r[0].Token != "tok-two") {
		t.Fatalf("upstream requests: %+v", r)
	}
	for _, c := range []struct {
		name, bearer string
		hdr          []string
	}{
		{"foreign token", "tok-three", nil},
		{"a token's prefix", "tok-on", nil},
		{"a bare ChatGPT-Account-ID", "", []string{"ChatGPT-Account-ID", "cg-tok-one"}},
	} {
		resp := e.doAs(c.bearer, "POST", "/v1/responses", streamBody, c.hdr...)
		er := decodeError(t, resp)
		if resp.StatusCode != 401 || er.Code != rerr.ProxyUnauthorized || !strings.Contains(er.Message, "rotor import codex") {
			t.Errorf("%s: %d %+v", c.name, resp.StatusCode, er)
		}
	}
	// Refreshed by another process: the new token is taken, and the old
	// one for two minutes after rotor saw the change.
	e.setToken(1, "tok-one-new")
	clk.Advance(secretTTL) // the cache reads the store again
	for _, tok := range []string{"tok-one-new", "tok-one"} {
		if resp := e.doAs(tok, "GET", "/v1/models", ""); resp.StatusCode != 200 {
			t.Errorf("%s within the grace: %d %s", tok, resp.StatusCode, readAll(t, resp))
		} else {
			readAll(t, resp)
		}
	}
	clk.Advance(backend.TokenGrace + time.Second)
	if resp := e.doAs("tok-one", "GET", "/v1/models", ""); resp.StatusCode != 401 {
		t.Errorf("the old token after the grace: %d", resp.StatusCode)
	}
	if resp := e.doAs("tok-one-new", "GET", "/v1/models", ""); resp.StatusCode != 200 {
		t.Errorf("the new token after the grace: %d", resp.StatusCode)
	}
}

func TestBackendCallsPassThroughAsTheirAccount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "tok-one"}, {accounts.KindChatGPT, "tok-two"}})
	fp := startForwardProxy(t, "", "")
	e.setProxy(2, fp.url(""))
	const body = `{"plugin":"github","enabled":true}`
	resp := e.doAs("tok-two", "POST", "/backend-api/plugins/settings?scope=user&v=2", body,
		"originator", "codex_cli_rs", "x-codex-window-id", "w-1")
	got := readAll(t, resp)
	if resp.StatusCode != 404 || !strings.Contains(got, "Not Found") {
		t.Errorf("the upstream's answer was not relayed: %d %s", resp.StatusCode, got)
	}
	reqs := e.up.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	r := reqs[0]
	if r.Method != "POST" || r.Path != "/backend-api/plugins/settings" || r.RawQuery != "scope=user&v=2" || string(r.Body) != body ||
		r.Token != "tok-two" || r.Header.Get("chatgpt-account-id") != "cg-tok-two" ||
		r.Header.Get("originator") != "codex_cli_rs" || r.Header.Get("x-codex-window-id") != "w-1" {
		t.Errorf("passed through as %s %s?%s %s, token %s, headers %v", r.Method, r.Path, r.RawQuery, r.Body, r.Token, r.Header)
	}
	if fp.carried.Load() != 1 {
		t.Errorf("the call did not go through the account's proxy (%d carried)", fp.carried.Load())
	}
	// With the client key, or a token rotor does not know, nothing passes.
	resp = e.do("GET", "/backend-api/plugins/list", "")
	if er := decodeError(t, resp); resp.StatusCode != 404 || er.Code != rerr.ProxyNotFound {
		t.Errorf("the client key on a backend path: %d %+v", resp.StatusCode, er)
	}
	if resp := e.doAs("nobody", "GET", "/backend-api/plugins/list", ""); resp.StatusCode != 401 {
		t.Errorf("an unknown token on a backend path: %d", resp.StatusCode)
	}
	// Codex's /status still asks rotor, which answers from the pool.
	resp = e.doAs("tok-one", "GET", "/backend-api/wham/usage", "")
	if got := readAll(t, resp); resp.StatusCode != 200 || !gjson.Get(got, "rate_limit").Exists() {
		t.Errorf("wham/usage: %d %s", resp.StatusCode, got)
	}
	if n := len(e.up.Requests()); n != 1 {
		t.Errorf("wham/usage went upstream")
	}
}

// The limits an answer shows Codex are the pool's, whichever account
// served it: one nearly spent serves a conversation bound to it, another
// has room, and Codex sees the room (docs/codex.md), over HTTP and in a
// socket's codex.rate_limits.
func TestStreamedLimitsDescribeThePool(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "full"}, {accounts.KindChatGPT, "room"}})
	e.up.Set("full", upstreamtest.Behavior{Stream: "rate_limits_spent.sse", Headers: map[string]string{
		"x-codex-primary-used-percent": "97", "x-codex-primary-window-minutes": "300",
		"x-codex-primary-reset-after-seconds": "3600", "x-codex-plan-type": "plus"}})
	// The conversation starts on "full" while nothing is known of either.
	compatPrefer(e, 1)
	readAll(t, e.do("POST", "/v1/responses", streamBody, "session_id", "s-pool"))
	if servedBy(t, e.up) != "full" {
		t.Fatalf("the conversation did not start on the account steered to")
	}
	// Then "room" is known to have room, as its backend's usage says.
	e.sel.Runtime().SetQuota(e.id(2), rotation.Quota{Primary: &rotation.Window{UsedPercent: 10, WindowMinutes: 300,
		ResetsAt: time.Now().Add(time.Hour)}, PlanType: "plus"})
	resp := e.do("POST", "/v1/responses", streamBody, "session_id", "s-pool")
	body := readAll(t, resp)
	if servedBy(t, e.up) != "full" {
		t.Fatalf("affinity did not keep the conversation on its nearly spent account")
	}
	if got := resp.Header.Get("x-codex-primary-used-percent"); got != "10" {
		t.Errorf("the client was shown %s%% used, not the pool's 10%%", got)
	}
	limits := ""
	for _, l := range strings.Split(body, "\n") {
		if d, ok := strings.CutPrefix(l, "data: "); ok && gjson.Get(d, "type").Str == "codex.rate_limits" {
			limits = d
		}
	}
	if gjson.Get(limits, "rate_limits.primary.used_percent").Float() != 10 || !gjson.Get(limits, "credits").Exists() {
		t.Errorf("codex.rate_limits as relayed: %s", limits)
	}
	if q := e.state(1).Quota; q == nil || q.Primary == nil || q.Primary.UsedPercent != 97 {
		t.Errorf("the serving account's own quota was not kept: %+v", q)
	}
	// The same conversation on a socket: its first frame shows the pool.
	c := e.openSocket("session_id", "s-pool")
	got := turn(t, c, `{"type":"response.create","model":"gpt-5","input":[`+userOne+`]}`)
	if servedBy(t, e.up) != "full" {
		t.Fatalf("the socket did not keep the conversation's account")
	}
	if d := got[0].data; gjson.GetBytes(d, "type").Str != "codex.rate_limits" || gjson.GetBytes(d, "rate_limits.primary.used_percent").Float() != 10 {
		t.Errorf("the socket's first frame: %s", d)
	}
}

// adopterFunc adopts what its function says.
type adopterFunc func(a accounts.Account) (secrets.Secret, bool)

func (f adopterFunc) Adopt(a accounts.Account) (secrets.Secret, bool) { return f(a) }

// Codex refreshed its login itself: its new token is not rotor's yet,
// and is let in once rotor has taken it over from the linked auth.json.
func TestATokenCodexRefreshedItselfIsAdopted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "tok-old"}})
	if _, err := e.store.Update(func(p *accounts.Pool) error {
		p.At(1).CodexAuthFile = "/codex/auth.json"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	adopt := adopterFunc(func(a accounts.Account) (secrets.Secret, bool) {
		asked.Add(1)
		if a.CodexAuthFile != "/codex/auth.json" {
			return secrets.Secret{}, false
		}
		e.setToken(1, "tok-codex") // as oauth.Refresher.Adopt stores it
		return secrets.Secret{AccessToken: "tok-codex", RefreshToken: "r-tok-codex"}, true
	})
	e2 := startProxy(t, e.up, e.store.Dir(), peerConfig{seed: 3, adopter: adopt})
	resp := e2.doAs("tok-codex", "POST", "/v1/responses", streamBody)
	if ev := sseEvents(t, resp.Body); resp.StatusCode != 200 || ev[len(ev)-1] != "response.completed" {
		t.Fatalf("Codex's own refreshed token: %d %v", resp.StatusCode, ev)
	}
	if asked.Load() != 1 || servedBy(t, e.up) != "tok-codex" {
		t.Errorf("adopt asked %d times; served with %s", asked.Load(), servedBy(t, e.up))
	}
	// A stranger's bearer makes rotor look again at most once a second.
	for range 5 {
		readAll(t, e2.doAs("stranger", "GET", "/v1/models", ""))
	}
	if n := asked.Load(); n > 2 {
		t.Errorf("the linked files were read %d times for strangers", n)
	}
}

// Codex's models catalog comes from a ChatGPT account while one can
// answer: an API key's OpenAI list is not a catalog Codex can read.
func TestCodexCatalogComesFromAChatGPTAccount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}, {accounts.KindChatGPT, "c1"}, {accounts.KindAPIKey, "k2"}})
	for range 4 {
		resp := e.do("GET", "/v1/models?client_version=0.169.0", "")
		if body := readAll(t, resp); resp.StatusCode != 200 || !gjson.Get(body, "models").IsArray() {
			t.Fatalf("Codex's catalog: %d %.200s", resp.StatusCode, body)
		}
	}
	for _, r := range e.up.Requests() {
		if r.Token != "c1" {
			t.Errorf("an API key was asked for Codex's catalog: %s %s", r.Token, r.Path)
		}
	}
	// Any other client's list may come from any account.
	readAll(t, e.do("GET", "/v1/models", ""))
}

// A backend call goes as its account, with the account's current token,
// whatever bearer let it in: Codex may still send the token rotor just
// replaced (its grace, docs/codex.md), and the backend no longer takes that
// one.
func TestBackendCallsCarryTheCurrentTokenAfterARefresh(t *testing.T) {
	t.Parallel()
	e := newChatGPTRefreshEnv(t, []acct{{accounts.KindChatGPT, "c1"}})
	// Codex calls with the account's token, which rotor so sees as current.
	readAll(t, e.doAs("c1", "GET", "/backend-api/plugins/list", ""))
	// The backend then refuses that token, and rotor refreshes the account.
	e.up.Set("c1", upstreamtest.Behavior{Status: 401})
	e.auth.AddRefreshToken("r-c1")
	chatgptExpectOK(t, e.do("POST", "/v1/responses", streamBody))
	issued := e.auth.Issued()
	if len(issued) != 1 {
		t.Fatalf("%d tokens issued, want 1 refresh", len(issued))
	}
	// Codex has not read the new token yet: its call, with the old one,
	// reaches the backend with the new one.
	before := len(e.up.Requests())
	resp := e.doAs("c1", "GET", "/backend-api/plugins/list", "")
	if got := readAll(t, resp); resp.StatusCode != 404 || !strings.Contains(got, "Not Found") {
		t.Fatalf("the call with the previous token in its grace: %d %s", resp.StatusCode, got)
	}
	reqs := e.up.Requests()
	if len(reqs) != before+1 {
		t.Fatalf("%d upstream requests for one backend call", len(reqs)-before)
	}
	if r := reqs[before]; r.Path != "/backend-api/plugins/list" || r.Token != issued[0].AccessToken {
		t.Errorf("the backend call reached %s with token %q, want the refreshed %q", r.Path, r.Token, issued[0].AccessToken)
	}
}
