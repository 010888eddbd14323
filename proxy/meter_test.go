package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// Tests of docs/selection.md on the wire: the fake meters as the backend does
// (upstreamtest.Meter), and rotor reads the whole meter, over HTTP and
// over a socket.

const sonicModel = "gpt-5.2-codex-sonic"

// sonicFamily is a family of its own for the sonic model, used used
// percent.
func sonicFamily(used float64) upstreamtest.Family {
	return upstreamtest.Family{ID: "codex_bengalfox", LimitName: sonicModel,
		Primary: &upstreamtest.MeterWindow{UsedPercent: used, Minutes: 300, ResetIn: 2 * time.Hour}}
}

// mainFamily is the main family, used used percent, resetting in an hour.
func mainFamily(used float64) upstreamtest.Family {
	return upstreamtest.Family{ID: "codex", Primary: &upstreamtest.MeterWindow{UsedPercent: used, Minutes: 300, ResetIn: time.Hour}}
}

// responsesBody is a streamed Responses request for model.
func responsesBody(model string) string {
	return fmt.Sprintf(`{"model":%q,"stream":true,"input":"hi"}`, model)
}

// records are the usage records e's serve wrote so far.
func (e *env) records() []usage.Record {
	e.t.Helper()
	e.usage.Flush()
	var recs []usage.Record
	if _, err := usage.Read(e.store.Dir(), func(u usage.Record) { recs = append(recs, u) }); err != nil {
		e.t.Fatal(err)
	}
	return recs
}

// served sends one streamed request for model and returns its status and
// body.
func (e *env) served(model string) (int, string) {
	e.t.Helper()
	resp := e.do("POST", "/v1/responses", responsesBody(model))
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// asker sends one Responses request for model to e, over HTTP or over
// one socket it keeps, and returns the status and the error object (the
// body over HTTP, the error frame on a socket) or the final event.
func asker(t *testing.T, e *env, viaSocket bool) func(model string) (int, string) {
	if !viaSocket {
		return e.served
	}
	c := e.openSocket()
	return func(model string) (int, string) {
		fs := turn(t, c, fmt.Sprintf(`{"type":"response.create","model":%q,"input":"hi"}`, model))
		last := fs[len(fs)-1].data
		if gjson.GetBytes(last, "type").Str == "error" {
			return int(gjson.GetBytes(last, "status").Int()), string(last)
		}
		return http.StatusOK, string(last)
	}
}

// transports names the two ways in, for subtests.
var transports = map[bool]string{false: "http", true: "socket"}

// A usage limit of the family that meters one model keeps the account for
// that model only: other models keep using it. Over HTTP and over a
// socket.
func TestAModelLimitKeepsTheAccountForOtherModels(t *testing.T) {
	t.Parallel()
	for viaSocket, name := range transports {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, []acct{{accounts.KindChatGPT, "A"}})
			e.up.Set("A", upstreamtest.Behavior{Meter: &upstreamtest.Meter{Families: []upstreamtest.Family{mainFamily(10), sonicFamily(100)}}})
			ask := asker(t, e, viaSocket)
			if code, body := ask(sonicModel); code == http.StatusOK || !strings.Contains(body, "usage_limit") {
				t.Fatalf("the spent model was served: %s", body)
			}
			st := e.state(1)
			if lim := st.FamilyLimits["codex_bengalfox"]; !lim.After(time.Now().Add(time.Hour)) || !st.RateLimitedUntil.IsZero() {
				t.Fatalf("limits after the model's 429: family %v, main %v; want the family's only, until its reset", st.FamilyLimits, st.RateLimitedUntil)
			}
			if code, body := ask("gpt-5-codex"); code != http.StatusOK {
				t.Fatalf("another model was refused: %s", body)
			}
			if code, body := ask(sonicModel); code != http.StatusTooManyRequests || !strings.Contains(body, "limit codex_bengalfox") {
				t.Fatalf("the spent model again: %d %s; want rotor's 429 naming its limit", code, body)
			}
			if n := e.up.Metered("cg-A").Refused; n != 1 {
				t.Errorf("the upstream refused %d requests; rotor should have asked it once", n)
			}
		})
	}
}

// x-codex-active-limit names the family that metered a request, and wins
// over the request's model.
func TestTheActiveLimitWinsOverTheModel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "A"}})
	e.up.Set("A", upstreamtest.Behavior{Status: 429, Headers: map[string]string{
		"x-codex-active-limit":                      "codex-other",
		"x-codex-other-primary-used-percent":        "100",
		"x-codex-other-primary-reset-after-seconds": "1800",
		"x-codex-other-limit-name":                  "gpt-other",
	}})
	if code, body := e.served(sonicModel); code == http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	st := e.state(1)
	if _, ok := st.FamilyLimits["codex_other"]; !ok || !st.RateLimitedUntil.IsZero() {
		t.Fatalf("limits %v, main %v; want codex_other's only", st.FamilyLimits, st.RateLimitedUntil)
	}
	if q := st.Quota; q == nil || q.Family("codex_other") == nil || q.Family("codex_other").LimitName != "gpt-other" {
		t.Fatalf("families read: %+v", q)
	}
}

// creditsPool is two ChatGPT accounts: A at 100% of its window with 12.50
// of credits, B with 3% of it left; their usage is read as a serve reads
// it at start.
func creditsPool(t *testing.T, policy rotation.CreditsPolicy) *env {
	t.Helper()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "A"}, {accounts.KindChatGPT, "B"}})
	e.sel.SetCredits(policy)
	e.up.Set("A", upstreamtest.Behavior{Meter: &upstreamtest.Meter{Families: []upstreamtest.Family{mainFamily(100)},
		Credits: &upstreamtest.Credits{Balance: 12.5}, Cost: 0.5}})
	e.up.Set("B", upstreamtest.Behavior{Meter: &upstreamtest.Meter{Families: []upstreamtest.Family{mainFamily(97)}, Step: 1}})
	var ur usageReader
	e.pass(&ur)
	return e
}

// last-resort: every request goes to the account with included quota
// while it has some, then to the credits account, whose usage records say
// so; nothing is spent before.
func TestCreditsLastResort(t *testing.T) {
	t.Parallel()
	e := creditsPool(t, rotation.CreditsLastResort)
	for i := range 3 {
		if code, body := e.served("gpt-5-codex"); code != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}
	if a, b := e.up.Metered("cg-A"), e.up.Metered("cg-B"); a.Served != 0 || a.Credits.Balance != 12.5 || b.Served != 3 {
		t.Fatalf("A served %d (balance %.2f), B %d; want every request on B's included quota", a.Served, a.Credits.Balance, b.Served)
	}
	// B's window fills; its usage limit sends the rest to A's credits.
	for range 3 {
		e.served("gpt-5-codex")
	}
	a := e.up.Metered("cg-A")
	if a.OnCredits == 0 || a.Credits.Balance >= 12.5 {
		t.Fatalf("A served %d on credits; want the last requests there once B is spent", a.OnCredits)
	}
	if st := e.state(2); st.RateLimitedUntil.IsZero() {
		t.Fatalf("B is not limited: %+v", st)
	}
	onCredits := 0
	for _, r := range e.records() {
		if r.Credits {
			onCredits++
			if r.AccountID != e.id(1) {
				t.Errorf("a record on credits names %s", r.AccountID)
			}
		}
	}
	if onCredits != a.OnCredits {
		t.Errorf("%d records say credits; the upstream spent credits on %d", onCredits, a.OnCredits)
	}
}

// never: the request gets the usage limit it would get with no credits,
// saying credits were held back, with the soonest reset; no credit is
// spent.
func TestCreditsNever(t *testing.T) {
	t.Parallel()
	for viaSocket, name := range transports {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := creditsPool(t, rotation.CreditsNever)
			e.sel.Runtime().RateLimited(e.id(2), time.Now().Add(3*time.Hour))
			code, body := asker(t, e, viaSocket)("gpt-5-codex")
			if code != http.StatusTooManyRequests || gjson.Get(body, "error.credits_held_back").Bool() != true ||
				!strings.Contains(gjson.Get(body, "error.message").Str, "credits were held back") {
				t.Fatalf("%d %s", code, body)
			}
			reset := gjson.Get(body, "error.resets_in_seconds").Int()
			if reset < 3500 || reset > 3600 {
				t.Errorf("resets in %d s; want A's window, about an hour", reset)
			}
			if a := e.up.Metered("cg-A"); a.Served != 0 || a.Credits.Balance != 12.5 {
				t.Errorf("A served %d, balance %.2f: credits were spent", a.Served, a.Credits.Balance)
			}
		})
	}
}

// spend: credits count as quota: the credits account takes requests
// while the other still has some quota.
func TestCreditsSpend(t *testing.T) {
	t.Parallel()
	e := creditsPool(t, rotation.CreditsSpend)
	for range 4 {
		e.served("gpt-5-codex")
	}
	if a := e.up.Metered("cg-A"); a.OnCredits == 0 {
		t.Fatalf("A never served: credits were not counted as quota")
	}
}

// The same last resort on a socket: its frames go to the account with
// quota, its codex.rate_limits events tell rotor the credits.
func TestCreditsLastResortOverASocket(t *testing.T) {
	t.Parallel()
	e := creditsPool(t, rotation.CreditsLastResort)
	c := e.openSocket()
	for i := range 3 {
		fs := turn(t, c, `{"type":"response.create","model":"gpt-5-codex","input":"hi"}`)
		if last := gjson.GetBytes(fs[len(fs)-1].data, "type").Str; last != "response.completed" {
			t.Fatalf("turn %d: %v", i, types(fs))
		}
	}
	if a := e.up.Metered("cg-A"); a.Served != 0 {
		t.Fatalf("A served %d frames on credits while B had quota", a.Served)
	}
	// B's window fills; the next frames go to A's credits, and their
	// records say so.
	for i := range 3 {
		fs := turn(t, c, `{"type":"response.create","model":"gpt-5-codex","input":"hi"}`)
		if last := gjson.GetBytes(fs[len(fs)-1].data, "type").Str; last != "response.completed" {
			t.Fatalf("turn %d after B filled: %v", i+4, types(fs))
		}
	}
	a := e.up.Metered("cg-A")
	if a.OnCredits == 0 {
		t.Fatal("A never served once B was spent")
	}
	eventually(t, 5*time.Second, "six usage records", func() bool { return len(e.records()) == 6 })
	onCredits := 0
	for _, r := range e.records() {
		if r.Credits {
			onCredits++
		}
	}
	if onCredits != a.OnCredits {
		t.Errorf("%d records say credits; the upstream spent credits on %d frames", onCredits, a.OnCredits)
	}
}

// A workspace account has no windows: shown as such, never as no quota.
// Its reached type is a limit only the owner lifts: the account waits for
// a usage read that says it can serve, and the 429 names the reason.
func TestAWorkspaceLimitWaitsForAUsageRead(t *testing.T) {
	t.Parallel()
	for viaSocket, name := range transports {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, clk, _ := frozenEnv(t, []acct{{accounts.KindChatGPT, "W"}})
			m := &upstreamtest.Meter{Workspace: true, ReachedType: "workspace_owner_credits_depleted"}
			e.up.Set("W", upstreamtest.Behavior{Meter: m})
			ask := asker(t, e, viaSocket)
			if code, body := ask("gpt-5-codex"); code != http.StatusTooManyRequests {
				t.Fatalf("status %d %s", code, body)
			}
			st := e.state(1)
			if st.LimitReason != "workspace_owner_credits_depleted" || st.RateLimitedUntil.Before(clk.Now().Add(24*time.Hour)) {
				t.Fatalf("state %+v; want the reason, waiting for a read", st)
			}
			code, body := ask("gpt-5-codex")
			if code != http.StatusTooManyRequests || gjson.Get(body, "error.rate_limit_reached_type").Str != "workspace_owner_credits_depleted" ||
				!strings.Contains(gjson.Get(body, "error.message").Str, "workspace's owner") {
				t.Fatalf("%d %s", code, body)
			}
			// A read while the owner has not lifted it changes nothing.
			var ur usageReader
			e.pass(&ur)
			if st := e.state(1); st.RateLimitedUntil.IsZero() {
				t.Fatal("lifted before the owner did")
			}
			if q := e.state(1).Quota; q == nil || !q.Workspace || q.Primary != nil {
				t.Fatalf("quota %+v; want a workspace with no windows", q)
			}
			// The owner lifts it; the next read lets the account serve.
			m.ReachedType = ""
			e.up.Set("W", upstreamtest.Behavior{Meter: m})
			clk.Advance(usageEvery + usageJitter)
			e.pass(&ur)
			if st := e.state(1); !st.RateLimitedUntil.IsZero() || st.LimitReason != "" {
				t.Fatalf("after the owner lifted it: %+v", st)
			}
			if code, body := ask("gpt-5-codex"); code != http.StatusOK {
				t.Fatalf("%d %s", code, body)
			}
		})
	}
}

// The tier asked for is kept in the usage record.
func TestTheTierIsRecorded(t *testing.T) {
	t.Parallel()
	for viaSocket, name := range transports {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, []acct{{accounts.KindChatGPT, "A"}})
			e.up.Set("A", upstreamtest.Behavior{Meter: &upstreamtest.Meter{}})
			if viaSocket {
				fs := turn(t, e.openSocket(), `{"type":"response.create","model":"gpt-5-codex","input":"hi","service_tier":"priority"}`)
				if last := gjson.GetBytes(fs[len(fs)-1].data, "type").Str; last != "response.completed" {
					t.Fatalf("%v", types(fs))
				}
			} else {
				readAll(t, e.do("POST", "/v1/responses", `{"model":"gpt-5-codex","stream":true,"input":"hi","service_tier":"priority"}`))
			}
			eventually(t, 5*time.Second, "the usage record", func() bool { return len(e.records()) == 1 })
			if recs := e.records(); recs[0].Tier != "priority" {
				t.Fatalf("records %+v", recs)
			}
			if n := e.up.Metered("cg-A").Tiers["priority"]; n != 1 {
				t.Errorf("the upstream saw %d priority requests: the tier was not forwarded", n)
			}
		})
	}
}

// Codex's /status through rotor carries every family and the pool's
// credits: the usage read it asks rotor for, the headers of an answer and
// its codex.rate_limits events; each the pool's, in shapes Codex reads.
func TestCodexStatusShowsFamiliesAndThePoolsCredits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "A"}, {accounts.KindChatGPT, "B"}})
	e.up.Set("A", upstreamtest.Behavior{Meter: &upstreamtest.Meter{Families: []upstreamtest.Family{mainFamily(100), sonicFamily(20)},
		Credits: &upstreamtest.Credits{Balance: 12.5}}})
	e.up.Set("B", upstreamtest.Behavior{Meter: &upstreamtest.Meter{Families: []upstreamtest.Family{mainFamily(30), sonicFamily(60)},
		Credits: &upstreamtest.Credits{Balance: 3}}})
	var ur usageReader
	e.pass(&ur)

	for _, path := range usagePaths {
		p := getUsage(t, e, path)
		var credits struct {
			HasCredits *bool   `json:"has_credits"`
			Unlimited  *bool   `json:"unlimited"`
			Balance    *string `json:"balance"`
		}
		if err := json.Unmarshal(p.Credits, &credits); err != nil || credits.HasCredits == nil || !*credits.HasCredits ||
			credits.Unlimited == nil || credits.Balance == nil || *credits.Balance != "15.50" {
			t.Errorf("%s: credits %s; want the pool's: has_credits, balance 15.50", path, p.Credits)
		}
		var extra []struct {
			LimitName      *string                `json:"limit_name"`
			MeteredFeature *string                `json:"metered_feature"`
			RateLimit      *codexRateLimitDetails `json:"rate_limit"`
		}
		dec := json.NewDecoder(bytes.NewReader(p.AdditionalRateLimits))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&extra); err != nil || len(extra) != 1 || extra[0].LimitName == nil || *extra[0].LimitName != sonicModel ||
			extra[0].MeteredFeature == nil || *extra[0].MeteredFeature != "codex_bengalfox" || extra[0].RateLimit == nil ||
			!extra[0].RateLimit.Allowed || extra[0].RateLimit.PrimaryWindow == nil || extra[0].RateLimit.PrimaryWindow.UsedPercent != 20 {
			t.Errorf("%s: additional_rate_limits %s (%v); want the sonic family at its roomiest account's 20%%", path, p.AdditionalRateLimits, err)
		}
	}

	// An answer of B (A is on credits, so B serves) tells the pool's
	// credits and families in its headers.
	resp := e.do("POST", "/v1/responses", responsesBody("gpt-5-codex"))
	readAll(t, resp)
	if got := resp.Header.Get("x-codex-credits-balance"); got != "15.50" || resp.Header.Get("x-codex-credits-has-credits") != "true" {
		t.Errorf("credits headers %q %q; want the pool's", resp.Header.Get("x-codex-credits-has-credits"), got)
	}
	if resp.Header.Get("x-codex-bengalfox-limit-name") != sonicModel || resp.Header.Get("x-codex-bengalfox-primary-used-percent") == "" {
		t.Errorf("family headers missing: %v", resp.Header)
	}
	// Its codex.rate_limits events too, over a socket.
	c := e.openSocket()
	fs := turn(t, c, `{"type":"response.create","model":"gpt-5-codex","input":"hi"}`)
	seen := 0
	for _, f := range fs {
		if gjson.GetBytes(f.data, "type").Str != "codex.rate_limits" {
			continue
		}
		seen++
		if b := gjson.GetBytes(f.data, "credits.balance").Str; b != "15.50" {
			t.Errorf("event credits %s; want the pool's balance", f.data)
		}
	}
	if seen == 0 {
		t.Errorf("no codex.rate_limits event reached the client: %v", types(fs))
	}
}

// The tier and the routing hint go upstream as the client sent them:
// over HTTP, and from a socket's frame served over HTTP (docs/selection.md).
func TestTheTierAndRoutingHintAreForwarded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "A"}})
	overHTTP(e, nil)
	readAll(t, e.do("POST", "/v1/responses", `{"model":"gpt-5-codex","stream":true,"input":"hi","service_tier":"flex"}`,
		"x-codex-routing-hint", "hint-1"))
	c := e.openSocket("x-codex-routing-hint", "hint-2")
	fs := turn(t, c, `{"type":"response.create","model":"gpt-5-codex","input":"hi","service_tier":"priority"}`)
	if last := gjson.GetBytes(fs[len(fs)-1].data, "type").Str; last != "response.completed" {
		t.Fatalf("%v", types(fs))
	}
	var got []string
	for _, r := range e.up.Requests() {
		if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/responses") {
			got = append(got, gjson.GetBytes(r.Body, "service_tier").Str+" "+r.Header.Get("x-codex-routing-hint"))
		}
	}
	if want := []string{"flex hint-1", "priority hint-2"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("upstream got tier and hint %q, want %q", got, want)
	}
}
