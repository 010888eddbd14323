package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/prices"
	"github.com/rotorproxy/rotor/proxy/dashboard"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/usage"
	"github.com/rotorproxy/rotor/rotation/view"
)

// dashboardPool is a real `rotor serve` with three accounts as a user
// would see them: alice at her usage limit (met through a failover), bob
// serving, and dana, a ChatGPT account with quota windows known. Requests
// have gone through it, so usage.jsonl has records to chart, priced with
// the home's prices.json (dashPrices).
type dashboardPool struct {
	h    *cliHome
	p    *raceProc
	base string // http://127.0.0.1:PORT
	// secrets are strings that must never reach a page.
	secrets []string
}

func newDashboardPool(t *testing.T) *dashboardPool {
	t.Helper()
	up := upstreamtest.New("../../testdata")
	if err := up.Start(""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	up.Set("sk-dash-alice", upstreamtest.Behavior{Status: 429, ResetIn: time.Hour})

	h := newHome(t)
	h.setenv("ROTOR_OPENAI_BASE_URL", up.OpenAIBase())
	h.setenv("ROTOR_CHATGPT_BASE_URL", up.ChatGPTBase())
	h.setenv("ROTOR_CLIENT_KEY", raceClientKey)
	h.addKey("alice", "sk-dash-alice")
	h.addKey("bob", "sk-dash-bob")
	auth := codexFixture(t)
	h.ok("", "import", "codex", "--file", auth, "--label", "dana")
	authJSON, _ := os.ReadFile(auth)
	// dana's backend tells the same windows when serve reads her usage
	// (docs/selection.md) as the state already holds.
	login, err := accounts.ReadCodexAuth(auth)
	if err != nil {
		t.Fatal(err)
	}
	up.Set(login.AccessToken, upstreamtest.Behavior{Headers: map[string]string{
		"x-codex-primary-used-percent": "62", "x-codex-primary-window-minutes": "300", "x-codex-primary-reset-after-seconds": "7980",
		"x-codex-secondary-used-percent": "35", "x-codex-secondary-window-minutes": "10080", "x-codex-secondary-reset-after-seconds": "345600",
		// What the backend meters beyond the main windows (docs/selection.md).
		"x-codex-credits-has-credits": "true", "x-codex-credits-unlimited": "false", "x-codex-credits-balance": "12.50",
		"x-codex-bengalfox-primary-used-percent": "40", "x-codex-bengalfox-primary-window-minutes": "300",
		"x-codex-bengalfox-primary-reset-after-seconds": "3600", "x-codex-bengalfox-limit-name": "gpt-5.2-codex-sonic",
	}})

	rt := rotation.NewRuntime(h.dir, clock.System{})
	rt.SetQuota(h.pool().At(3).ID, rotation.Quota{
		Primary:    &rotation.Window{UsedPercent: 62, WindowMinutes: 300, ResetsAt: time.Now().Add(2*time.Hour + 13*time.Minute)},
		Secondary:  &rotation.Window{UsedPercent: 35, WindowMinutes: 10080, ResetsAt: time.Now().Add(4 * 24 * time.Hour)},
		ObservedAt: time.Now(),
		Credits:    &rotation.Credits{HasCredits: true, Balance: "12.50"},
		Families: []rotation.Family{{ID: "codex_bengalfox", LimitName: "gpt-5.2-codex-sonic",
			Primary: &rotation.Window{UsedPercent: 40, WindowMinutes: 300, ResetsAt: time.Now().Add(time.Hour)}}},
	})
	if err := rt.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.path("prices.json"), []byte(dashPrices), 0o600); err != nil {
		t.Fatal(err)
	}

	p := raceServe(t, rotorBin, h.env, "serve")
	sent := 0
	for ; up.Count("sk-dash-alice") == 0 || sent < 4; sent++ {
		if sent == 12 {
			t.Fatal("alice was never tried")
		}
		if code, body, err := raceRequest(p); err != nil || code != 200 {
			t.Fatalf("request %d: %d %v %.200s", sent, code, err, body)
		}
	}
	// serve writes usage records behind the answers, within 100 ms.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		data, _ := os.ReadFile(h.path("usage.jsonl"))
		if bytes.Count(data, []byte("\n")) >= sent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("usage.jsonl has %d records 5 s after the requests, want %d", bytes.Count(data, []byte("\n")), sent)
		}
	}
	var tokens struct {
		Tokens map[string]string `json:"tokens"`
	}
	json.Unmarshal(authJSON, &tokens)
	return &dashboardPool{h: h, p: p, base: strings.TrimSuffix(p.url, "/v1"),
		secrets: []string{raceClientKey, "sk-dash-alice", "sk-dash-bob", tokens.Tokens["access_token"],
			tokens.Tokens["refresh_token"], tokens.Tokens["id_token"]}}
}

// dashPrices is the dashboard pool's prices.json: gpt-5, which every
// request asks for, at prices of its own, so the page and /metrics show
// that the serve priced with it. hello.sse's 1280 input tokens, 1024 of
// them cached, and 9 output come to 256×$2 + 1024×$0.2 + 9×$20 per 1M:
// $0.0008968 a request; the cache saves 1024×$1.8 per 1M.
const dashPrices = `{"version":1,"date":"2025-12-01","models":{"gpt-5":{"input":2,"cached_input":0.2,"output":20}}}`

// money is what the serve's usage records come to at the home's prices,
// each as its account's kind says: what the page and /metrics must show.
func (d *dashboardPool) money(t *testing.T) (total prices.Sum, records int) {
	t.Helper()
	tab, err := prices.Load(d.h.dir)
	if err != nil || tab.About().FileDate != "2025-12-01" {
		t.Fatalf("prices.json: %v", err)
	}
	pool := d.h.pool()
	usage.Read(d.h.dir, func(u usage.Record) {
		if u.Tokens != nil {
			tab.Add(&total, kindOf(pool, u.AccountID), u.Model, u.Tokens.Input, u.Tokens.Cached, u.Tokens.Output)
			records++
		}
	})
	if records < 4 || !closeUSD(total.Cost+total.Value, prices.USD(records)*0.0008968) || !closeUSD(total.Saved, prices.USD(records)*0.0018432) {
		t.Fatalf("%d records price to %+v, want $0.0008968 each", records, total)
	}
	return total, records
}

// login is a fresh one-time login link from `rotor dashboard`.
func (d *dashboardPool) login(t *testing.T) string {
	t.Helper()
	r := d.h.ok("", "dashboard")
	link := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(link, d.base+"/login?token=") || !strings.Contains(r.stderr, "it works once") {
		t.Fatalf("rotor dashboard: %v", r)
	}
	return link
}

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{Timeout: 10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

type wireReq struct {
	method, path, cookie, origin, host, body, bearer string
}

func (d *dashboardPool) do(t *testing.T, r wireReq) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(cmpOr(r.method, "GET"), d.base+r.path, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if r.cookie != "" {
		req.Header.Set("Cookie", r.cookie)
	}
	if r.origin != "" {
		req.Header.Set("Origin", r.origin)
	}
	if r.host != "" {
		req.Host = r.host
	}
	if r.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+r.bearer)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// closeUSD reports whether two sums of the same amounts, added in another
// order, agree to a billionth of a cent.
func closeUSD(a, b prices.USD) bool { return math.Abs(float64(a-b)) < 1e-11 }

// metricSum sums the samples of name in a Prometheus text exposition whose
// labels include every one of want (as name="value").
func metricSum(t *testing.T, exposition, name string, want ...string) float64 {
	t.Helper()
	var sum float64
	for _, line := range strings.Split(exposition, "\n") {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			t.Fatalf("cannot read %q", line)
		}
		match := true
		for _, w := range want {
			match = match && strings.Contains(labels, w)
		}
		if match {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("cannot read %q: %v", line, err)
			}
			sum += v
		}
	}
	return sum
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// The dashboard's security on the wire (docs/dashboard.md): no cookie, no data; a
// login link works once; foreign Host or Origin get 403; a button needs
// the cookie and this serve's own Origin; nothing served holds a secret.
func TestDashboardOnTheWire(t *testing.T) {
	t.Parallel()
	d := newDashboardPool(t)

	for _, path := range []string{"/", "/dashboard/state", "/dashboard/events", "/dashboard/app.js"} {
		resp, body := d.do(t, wireReq{path: path})
		if resp.StatusCode != 401 || !strings.Contains(body, `Run "rotor dashboard"`) || strings.Contains(body, "alice") {
			t.Errorf("GET %s without a cookie: %d %q", path, resp.StatusCode, body)
		}
		// The client key opens the proxy, not the dashboard.
		if resp, _ := d.do(t, wireReq{path: path, bearer: raceClientKey}); resp.StatusCode != 401 {
			t.Errorf("GET %s with the client key and no cookie: %d", path, resp.StatusCode)
		}
	}

	link := d.login(t)
	u, _ := url.Parse(link)
	resp, _ := d.do(t, wireReq{path: u.RequestURI()})
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/" {
		t.Fatalf("login: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	set := resp.Header.Get("Set-Cookie")
	port := u.Port()
	for _, want := range []string{"rotor_dashboard_" + port + "=", "HttpOnly", "SameSite=Strict", "path=/"} {
		if !strings.Contains(set, want) {
			t.Errorf("Set-Cookie %q lacks %q", set, want)
		}
	}
	cookie := strings.SplitN(set, ";", 2)[0]
	if resp, body := d.do(t, wireReq{path: u.RequestURI()}); resp.StatusCode != 401 || !strings.Contains(body, "used up") {
		t.Errorf("the login link worked twice: %d %q", resp.StatusCode, body)
	}
	other := dashboard.LoginURL(d.base, strings.Repeat("x", 64), time.Now())
	ou, _ := url.Parse(other)
	if resp, _ := d.do(t, wireReq{path: ou.RequestURI()}); resp.StatusCode != 401 {
		t.Errorf("a link made with another serve's key logged in: %d", resp.StatusCode)
	}

	// A label is the user's text: inside the page it stays data.
	st, err := accounts.Open(d.h.dir)
	if err != nil {
		t.Fatal(err)
	}
	const evil = `bob</script><script>alert(1)</script>`
	st.Update(func(p *accounts.Pool) error { p.At(2).Label = evil; return nil })
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, page := d.do(t, wireReq{path: "/", cookie: cookie})
		if strings.Contains(page, `bob\u003c/script\u003e`) {
			if n := strings.Count(page, "</script>"); n != 2 {
				t.Errorf("the page has %d </script>, want the 2 of its own script tags:\n%s", n, page)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relabelled account never reached the page:\n%s", page)
		}
	}

	var served strings.Builder
	for _, path := range []string{"/", "/dashboard/app.js", "/dashboard/app.css", "/dashboard/state"} {
		resp, body := d.do(t, wireReq{path: path, cookie: cookie})
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s with the cookie: %d %s", path, resp.StatusCode, body)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		served.WriteString(body)
		for k, v := range resp.Header {
			served.WriteString(k + ": " + strings.Join(v, ",") + "\n")
		}
	}
	_, state := d.do(t, wireReq{path: "/dashboard/state", cookie: cookie})
	var snap struct {
		Accounts []struct {
			Index   int    `json:"index"`
			Label   string `json:"label"`
			Kind    string `json:"kind"`
			State   string `json:"state"`
			Quota   *view.Quota
			Enabled bool `json:"enabled"`
		} `json:"accounts"`
		Usage dashboard.UsageView `json:"usage"`
	}
	if err := json.Unmarshal([]byte(state), &snap); err != nil {
		t.Fatalf("state: %v %s", err, state)
	}
	if len(snap.Accounts) != 3 || snap.Accounts[0].State != "rate-limited" || snap.Accounts[2].Kind != "chatgpt" ||
		snap.Accounts[2].Quota == nil || snap.Accounts[2].Quota.Primary.UsedPercent != 62 {
		t.Errorf("state accounts: %+v", snap.Accounts)
	}
	if len(snap.Usage.Recent) < 4 || len(snap.Usage.Accounts) != 3 || len(snap.Usage.Hours) != 24 || len(snap.Usage.Days) != 7 {
		t.Errorf("state usage: %d recent, %d accounts", len(snap.Usage.Recent), len(snap.Usage.Accounts))
	}
	// The money card's figures: the records at prices.json's prices, the
	// API keys' as cost, dana's as value, in every window (docs/cost.md).
	want, _ := d.money(t)
	money := snap.Usage.Money
	if p := money.Prices; p.Date != "2025-11-20" || p.FileDate != "2025-12-01" || p.File != d.h.path("prices.json") {
		t.Errorf("card prices: %+v", p)
	}
	for name, got := range map[string]prices.Sum{"1h": money.Hour, "24h": money.Day, "7d": money.Week} {
		if !closeUSD(got.Cost, want.Cost) || !closeUSD(got.Value, want.Value) || !closeUSD(got.Saved, want.Saved) ||
			got.Unknown != 0 || len(got.Unpriced) != 0 || got.Cost == 0 {
			t.Errorf("card %s: %+v, want %+v", name, got, want)
		}
	}

	// The live stream sends a snapshot at once.
	req, _ := http.NewRequest("GET", d.base+"/dashboard/events", nil)
	req.Header.Set("Cookie", cookie)
	ev, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	first, err := bufio.NewReader(ev.Body).ReadString('\n')
	ev.Body.Close()
	if ev.Header.Get("Content-Type") != "text/event-stream" || !strings.HasPrefix(first, `data: {"now":`) {
		t.Errorf("events: %s %q %v", ev.Header.Get("Content-Type"), first, err)
	}
	served.WriteString(first)

	for _, s := range d.secrets {
		if s != "" && strings.Contains(served.String(), s) {
			t.Errorf("a secret reached the page: %.12s…", s)
		}
	}

	// Host and Origin checks come first, cookie or not.
	for _, r := range []wireReq{{path: "/", cookie: cookie, host: "evil.example"}, {path: "/dashboard/state", cookie: cookie, origin: "http://evil.example"},
		{path: "/login?token=x", host: "rebind.example:" + port}} {
		if resp, body := d.do(t, r); resp.StatusCode != 403 || !strings.Contains(body, "runtime_rotation_proxy_forbidden_host") {
			t.Errorf("%+v: %d %s", r, resp.StatusCode, body)
		}
	}

	// The metrics take the cookie in place of the key (docs/cost.md), under the
	// same Host and Origin checks.
	resp, body := d.do(t, wireReq{path: "/metrics", cookie: cookie})
	if resp.StatusCode != 200 || !strings.Contains(body, "rotor_requests_total") {
		t.Errorf("GET /metrics with the cookie: %d %.200s", resp.StatusCode, body)
	}
	// The same dollars in /metrics, at the same prices.
	if got := metricSum(t, body, "rotor_cost_usd_total", `kind="cost"`, `model="gpt-5"`); !closeUSD(prices.USD(got), want.Cost) {
		t.Errorf("rotor_cost_usd_total cost %v, want %v", got, want.Cost)
	}
	if got := metricSum(t, body, "rotor_cost_usd_total", `kind="value"`); !closeUSD(prices.USD(got), want.Value) {
		t.Errorf("rotor_cost_usd_total value %v, want %v", got, want.Value)
	}
	if got := metricSum(t, body, "rotor_cache_saved_usd_total"); !closeUSD(prices.USD(got), want.Saved) {
		t.Errorf("rotor_cache_saved_usd_total %v, want %v", got, want.Saved)
	}
	if resp, _ := d.do(t, wireReq{path: "/metrics", cookie: cookie, origin: "http://evil.example"}); resp.StatusCode != 403 {
		t.Errorf("GET /metrics with the cookie from a foreign Origin: %d", resp.StatusCode)
	}
	if resp, _ := d.do(t, wireReq{path: "/metrics", cookie: "rotor_dashboard_" + port + "=forged"}); resp.StatusCode != 401 {
		t.Errorf("GET /metrics with a forged cookie: %d", resp.StatusCode)
	}

	// Buttons: the cookie and this serve's own Origin, both.
	pin := wireReq{method: "POST", path: "/dashboard/pin", body: `{"index":2}`}
	for _, r := range []wireReq{
		{method: pin.method, path: pin.path, body: pin.body, cookie: cookie},                               // no Origin
		{method: pin.method, path: pin.path, body: pin.body, cookie: cookie, origin: "http://127.0.0.1:1"}, // another loopback origin
		{method: pin.method, path: pin.path, body: pin.body, origin: d.base, bearer: raceClientKey},        // no cookie
	} {
		if resp, _ := d.do(t, r); resp.StatusCode != 403 && resp.StatusCode != 401 {
			t.Errorf("pin %+v: %d", r, resp.StatusCode)
		}
	}
	if d.h.pool().Pinned() != 0 {
		t.Fatal("a refused pin pinned")
	}
	if resp, body := d.do(t, wireReq{method: "POST", path: "/dashboard/pin", body: `{"index":9}`, cookie: cookie, origin: d.base}); resp.StatusCode != 400 || !strings.Contains(body, "no account 9") {
		t.Errorf("pin 9: %d %s", resp.StatusCode, body)
	}
	if resp, body := d.do(t, wireReq{method: "POST", path: "/dashboard/pin", body: `{"index":2}`, cookie: cookie, origin: d.base}); resp.StatusCode != 200 {
		t.Fatalf("pin 2: %d %s", resp.StatusCode, body)
	}
	if d.h.pool().Pinned() != 2 {
		t.Errorf("pinned %d after the dashboard pinned 2", d.h.pool().Pinned())
	}
	if resp, _ := d.do(t, wireReq{method: "POST", path: "/dashboard/disable", body: `{"index":1}`, cookie: cookie, origin: d.base}); resp.StatusCode != 200 || d.h.pool().At(1).Enabled {
		t.Errorf("disable 1: %d, enabled %v", resp.StatusCode, d.h.pool().At(1).Enabled)
	}
}

// rotor dashboard --open hands the browser a 0600 page in the home that
// redirects to the link: the one-time token is never in another
// program's argv.
func TestDashboardOpenKeepsTheTokenOutOfArgv(t *testing.T) {
	t.Parallel()
	d := newDashboardPool(t)
	bin := t.TempDir()
	args := filepath.Join(bin, "args")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + args + "\n"
	if err := os.WriteFile(filepath.Join(bin, "xdg-open"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	d.h.setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	r := d.h.ok("", "dashboard", "--open")
	link := strings.TrimSpace(r.stdout)
	var argv []byte
	for deadline := time.Now().Add(5 * time.Second); len(argv) == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		argv, _ = os.ReadFile(args)
	}
	page := strings.TrimSpace(string(argv))
	if page != d.h.path("dashboard-open.html") || strings.Contains(string(argv), "token") {
		t.Fatalf("the browser was started with %q", argv)
	}
	fi, err := os.Stat(page)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("redirect page: %v %v", fi, err)
	}
	html, _ := os.ReadFile(page)
	if !strings.Contains(string(html), `content="0;url=`+link+`"`) {
		t.Errorf("redirect page does not lead to the link: %s", html)
	}
}
