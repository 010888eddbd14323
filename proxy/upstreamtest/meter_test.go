package upstreamtest

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"
)

const (
	sonicModel  = "gpt-5.2-codex-sonic"
	sonicFamily = "codex_bengalfox"
)

// codexBody is a Codex request body for model, with extra fields.
func codexBody(model string, extra ...string) string {
	b := `{"model":"` + model + `","stream":true,"store":false`
	for _, e := range extra {
		b += "," + e
	}
	return b + `,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}]}`
}

// rateLimitsEvent is what these tests read of a codex.rate_limits event.
type rateLimitsEvent struct {
	Type       string `json:"type"`
	PlanType   string `json:"plan_type"`
	RateLimits struct {
		Allowed      bool `json:"allowed"`
		LimitReached bool `json:"limit_reached"`
		Primary      *struct {
			UsedPercent   float64 `json:"used_percent"`
			WindowMinutes int     `json:"window_minutes"`
			ResetAt       int64   `json:"reset_at"`
		} `json:"primary"`
		Secondary *struct {
			UsedPercent float64 `json:"used_percent"`
		} `json:"secondary"`
	} `json:"rate_limits"`
	Credits struct {
		HasCredits bool    `json:"has_credits"`
		Unlimited  bool    `json:"unlimited"`
		Balance    *string `json:"balance"`
	} `json:"credits"`
	MeteredLimitName string `json:"metered_limit_name"`
}

// leadingRateLimits is the codex.rate_limits events at the head of a
// payload list, failing unless something follows them.
func leadingRateLimits(t *testing.T, payloads [][]byte) []rateLimitsEvent {
	t.Helper()
	var out []rateLimitsEvent
	for _, p := range payloads {
		if frameType(p) != "codex.rate_limits" {
			return out
		}
		var ev rateLimitsEvent
		if err := json.Unmarshal(p, &ev); err != nil {
			t.Fatalf("%v: %s", err, p)
		}
		out = append(out, ev)
	}
	t.Fatalf("nothing but codex.rate_limits: %q", payloads)
	return nil
}

func ssePayloads(t *testing.T, body []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for _, ev := range events(t, body) {
		out = append(out, []byte(ev.data))
	}
	return out
}

// usage is what these tests read of wham/usage.
type usage struct {
	PlanType  string          `json:"plan_type"`
	RateLimit json.RawMessage `json:"rate_limit"`
	Main      *usageLimit     `json:"-"`
	Extra     []struct {
		LimitName      string     `json:"limit_name"`
		MeteredFeature string     `json:"metered_feature"`
		RateLimit      usageLimit `json:"rate_limit"`
	} `json:"additional_rate_limits"`
	Credits struct {
		HasCredits bool    `json:"has_credits"`
		Unlimited  bool    `json:"unlimited"`
		Balance    *string `json:"balance"`
	} `json:"credits"`
	ResetCredits struct {
		AvailableCount int `json:"available_count"`
	} `json:"rate_limit_reset_credits"`
	ReachedType *struct {
		Type string `json:"type"`
	} `json:"rate_limit_reached_type"`
	SpendControl *struct {
		Reached bool `json:"reached"`
	} `json:"spend_control"`
}

type usageLimit struct {
	Allowed      bool         `json:"allowed"`
	LimitReached bool         `json:"limit_reached"`
	Primary      *usageWindow `json:"primary_window"`
	Secondary    *usageWindow `json:"secondary_window"`
}

type usageWindow struct {
	UsedPercent int   `json:"used_percent"`
	WindowSecs  int   `json:"limit_window_seconds"`
	ResetAfter  int64 `json:"reset_after_seconds"`
	ResetAt     int64 `json:"reset_at"`
}

func whamUsage(t *testing.T, s *Server, c *http.Client, token string, hdr ...string) usage {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", s.ChatGPTBase()+"/wham/usage", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := readBody(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("wham/usage: %d %s", resp.StatusCode, body)
	}
	var u usage
	if err := json.Unmarshal(body, &u); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if string(u.RateLimit) != "null" {
		u.Main = new(usageLimit)
		if err := json.Unmarshal(u.RateLimit, u.Main); err != nil {
			t.Fatalf("rate_limit: %v: %s", err, u.RateLimit)
		}
	}
	return u
}

// used is the live used percent of a window of family (-1 when it has
// none).
func used(t *testing.T, st MeterState, family string, secondary bool) float64 {
	t.Helper()
	f, ok := st.Family(family)
	if !ok {
		t.Fatalf("no family %s in %+v", family, st)
	}
	w := f.Primary
	if secondary {
		w = f.Secondary
	}
	if w == nil {
		return -1
	}
	return w.UsedPercent
}

func wantHeaders(t *testing.T, h http.Header, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got, ok := h[http.CanonicalHeaderKey(k)]; v == "<absent>" && ok {
			t.Errorf("%s: %q, want none", k, got)
		} else if v != "<absent>" && h.Get(k) != v {
			t.Errorf("%s: %q, want %q", k, h.Get(k), v)
		}
	}
}

func familiesMeter() *Meter {
	return &Meter{Families: []Family{
		{ID: MainFamily, Primary: &MeterWindow{UsedPercent: 20}, Secondary: &MeterWindow{UsedPercent: 5}},
		{ID: sonicFamily, LimitName: sonicModel, Primary: &MeterWindow{}, Secondary: &MeterWindow{UsedPercent: 40, Minutes: 1440}},
	}}
}

func TestMeterFamilies(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	s.Set("tok", Behavior{Meter: familiesMeter(), Headers: map[string]string{"x-codex-primary-used-percent": "77", "x-other": "kept"}})
	acct := []string{"chatgpt-account-id", "acct-1"}

	status, h, body := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok", codexBody(sonicModel), acct...)
	if status != 200 {
		t.Fatalf("sonic: %d %s", status, body)
	}
	// Every family's headers, as they stood before this request.
	wantHeaders(t, h, map[string]string{
		"x-codex-active-limit":                       sonicFamily,
		"x-codex-primary-used-percent":               "20", // the Meter's wins over Headers
		"x-codex-primary-window-minutes":             "300",
		"x-codex-secondary-used-percent":             "5",
		"x-codex-secondary-window-minutes":           "10080",
		"x-codex-bengalfox-primary-used-percent":     "0",
		"x-codex-bengalfox-primary-window-minutes":   "300",
		"x-codex-bengalfox-secondary-used-percent":   "40",
		"x-codex-bengalfox-secondary-window-minutes": "1440",
		"x-codex-bengalfox-limit-name":               sonicModel,
		"x-codex-limit-name":                         "<absent>",
		"x-codex-plan-type":                          "plus",
		"x-codex-credits-has-credits":                "false",
		"x-codex-credits-unlimited":                  "false",
		"x-codex-credits-balance":                    "<absent>",
		"x-other":                                    "kept",
	})
	now := time.Now().Unix()
	if at, _ := strconv.ParseInt(h.Get("x-codex-bengalfox-secondary-reset-at"), 10, 64); at < now+1440*60-5 || at > now+1440*60+5 {
		t.Errorf("bengalfox secondary reset-at %d, now %d", at, now)
	}
	if after := h.Get("x-codex-primary-reset-after-seconds"); after != "18000" && after != "17999" {
		t.Errorf("primary reset-after %q", after)
	}
	evs := leadingRateLimits(t, ssePayloads(t, body))
	if len(evs) != 2 || evs[0].MeteredLimitName != "" || evs[1].MeteredLimitName != sonicFamily {
		t.Fatalf("rate_limits events %+v", evs)
	}
	if p := evs[1].RateLimits.Primary; p == nil || p.UsedPercent != 0 || evs[0].RateLimits.Primary.UsedPercent != 20 ||
		evs[1].RateLimits.Secondary.UsedPercent != 40 || !evs[1].RateLimits.Allowed || evs[1].PlanType != "plus" {
		t.Errorf("rate_limits events %+v", evs)
	}

	// Only the sonic family moved.
	st := s.Metered("acct-1")
	if used(t, st, sonicFamily, false) != 10 || used(t, st, sonicFamily, true) != 50 ||
		used(t, st, MainFamily, false) != 20 || used(t, st, MainFamily, true) != 5 || st.Served != 1 {
		t.Errorf("after sonic: %+v", st)
	}

	// Any other model is the main family's, on /v1 as well.
	status, h, body = post(t, c, s.OpenAIBase()+"/responses", "tok", codexBody("gpt-5-codex"), acct...)
	if status != 200 {
		t.Fatalf("codex: %d %s", status, body)
	}
	wantHeaders(t, h, map[string]string{
		"x-codex-active-limit":                   MainFamily,
		"x-codex-primary-used-percent":           "20",
		"x-codex-bengalfox-primary-used-percent": "10",
	})
	st = s.Metered("acct-1")
	if used(t, st, MainFamily, false) != 30 || used(t, st, MainFamily, true) != 15 || used(t, st, sonicFamily, false) != 10 {
		t.Errorf("after codex: %+v", st)
	}

	u := whamUsage(t, s, c, "tok", acct...)
	if u.Main == nil || u.Main.Primary.UsedPercent != 30 || u.Main.Secondary.UsedPercent != 15 || u.Main.Primary.WindowSecs != 18000 || !u.Main.Allowed {
		t.Errorf("wham rate_limit %s", u.RateLimit)
	}
	if len(u.Extra) != 1 || u.Extra[0].LimitName != sonicModel || u.Extra[0].MeteredFeature != sonicFamily ||
		u.Extra[0].RateLimit.Primary.UsedPercent != 10 || u.Extra[0].RateLimit.Secondary.UsedPercent != 50 ||
		u.Extra[0].RateLimit.Secondary.WindowSecs != 1440*60 {
		t.Errorf("wham additional_rate_limits %+v", u.Extra)
	}
	if u.ReachedType != nil || u.PlanType != "plus" || u.Credits.HasCredits || u.Credits.Balance != nil {
		t.Errorf("wham %+v", u)
	}
	// The meter is the account's: another account, same token, starts
	// from the Meter.
	if _, h, _ := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok", codexBody("gpt-5-codex"), "chatgpt-account-id", "acct-2"); h.Get("x-codex-primary-used-percent") != "20" {
		t.Errorf("acct-2's first request: primary %q", h.Get("x-codex-primary-used-percent"))
	}
	if st := s.Metered("acct-1"); used(t, st, MainFamily, false) != 30 {
		t.Errorf("acct-1 after acct-2's request: %+v", st)
	}
}

func TestMeterLimitIsPerFamily(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	m := &Meter{Families: []Family{
		{ID: MainFamily, Primary: &MeterWindow{UsedPercent: 50}},
		{ID: sonicFamily, LimitName: sonicModel, Primary: &MeterWindow{UsedPercent: 90}, Secondary: &MeterWindow{UsedPercent: 100, ResetIn: 3 * time.Hour}},
	}}
	s.Set("tok", Behavior{Meter: m})
	status, h, body := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok", codexBody(sonicModel))
	if status != 429 {
		t.Fatalf("sonic with a full window: %d %s", status, body)
	}
	var e struct {
		Error struct {
			Type     string `json:"type"`
			PlanType string `json:"plan_type"`
			ResetsAt int64  `json:"resets_at"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	now := time.Now().Unix()
	if e.Error.Type != "usage_limit_reached" || e.Error.ResetsAt < now+3*3600-5 || e.Error.ResetsAt > now+3*3600+5 {
		t.Errorf("429 body %s (now %d)", body, now)
	}
	wantHeaders(t, h, map[string]string{
		"x-codex-active-limit":                     sonicFamily,
		"x-codex-bengalfox-secondary-used-percent": "100",
		"x-codex-primary-used-percent":             "50",
		"x-codex-secondary-used-percent":           "<absent>",
		"x-codex-rate-limit-reached-type":          "<absent>",
	})
	// Other models keep using the account.
	if status, h, body := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok", codexBody("gpt-5-codex")); status != 200 || h.Get("x-codex-active-limit") != MainFamily {
		t.Fatalf("codex model: %d %s", status, body)
	}
	st := s.Metered("tok")
	if st.Refused != 1 || st.Served != 1 || used(t, st, MainFamily, false) != 60 || used(t, st, sonicFamily, false) != 90 || used(t, st, MainFamily, true) != -1 {
		t.Errorf("meter %+v", st)
	}
	u := whamUsage(t, s, c, "tok")
	if u.ReachedType != nil || !u.Main.Allowed || u.Main.Secondary != nil || len(u.Extra) != 1 ||
		u.Extra[0].RateLimit.Allowed || !u.Extra[0].RateLimit.LimitReached {
		t.Errorf("wham %+v %s", u, u.RateLimit)
	}
}

func TestMeterCredits(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	m := &Meter{
		Families: []Family{{ID: MainFamily, Primary: &MeterWindow{UsedPercent: 100, ResetIn: 2 * time.Hour}, Secondary: &MeterWindow{UsedPercent: 60}}},
		Credits:  &Credits{Balance: 1.2},
		Cost:     0.5,
	}
	s.Set("tok", Behavior{Meter: m, ResetCredits: 2})
	for i, want := range []string{"1.20", "0.70", "0.20"} {
		status, h, body := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok", codexBody("gpt-5-codex"))
		if status != 200 {
			t.Fatalf("request %d on credits: %d %s", i+1, status, body)
		}
		wantHeaders(t, h, map[string]string{
			"x-codex-credits-has-credits":    "true",
			"x-codex-credits-unlimited":      "false",
			"x-codex-credits-balance":        want,
			"x-codex-primary-used-percent":   "100",
			"x-codex-secondary-used-percent": "60", // spent credits, not quota
		})
		evs := leadingRateLimits(t, ssePayloads(t, body))
		if len(evs) != 1 || !evs[0].Credits.HasCredits || evs[0].Credits.Balance == nil || *evs[0].Credits.Balance != want ||
			!evs[0].RateLimits.LimitReached || !evs[0].RateLimits.Allowed {
			t.Errorf("request %d: rate_limits %+v", i+1, evs)
		}
		if i == 0 {
			u := whamUsage(t, s, c, "tok")
			if !u.Credits.HasCredits || u.Credits.Balance == nil || *u.Credits.Balance != "0.70" || !u.Main.LimitReached ||
				!u.Main.Allowed || u.ReachedType != nil || u.ResetCredits.AvailableCount != 2 {
				t.Errorf("wham on credits %+v %s", u, u.RateLimit)
			}
		}
	}
	st := s.Metered("tok")
	if st.Credits == nil || st.Credits.Balance != 0 || st.OnCredits != 3 || st.Served != 3 || used(t, st, MainFamily, true) != 60 {
		t.Fatalf("after three on credits: %+v %+v", st, st.Credits)
	}
	// The balance is gone: the usage limit, with the window's reset.
	status, h, body := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok", codexBody("gpt-5-codex"))
	var e struct {
		Error struct {
			Type     string `json:"type"`
			ResetsAt int64  `json:"resets_at"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	now := time.Now().Unix()
	if status != 429 || e.Error.Type != "usage_limit_reached" || e.Error.ResetsAt < now+7200-5 || e.Error.ResetsAt > now+7200+5 {
		t.Fatalf("balance gone: %d %s (now %d)", status, body, now)
	}
	wantHeaders(t, h, map[string]string{"x-codex-credits-has-credits": "false", "x-codex-credits-balance": "0.00", "x-codex-active-limit": MainFamily})
	u := whamUsage(t, s, c, "tok")
	if u.Credits.HasCredits || u.Main.Allowed || !u.Main.LimitReached || u.ReachedType == nil || u.ReachedType.Type != ReachedWindow {
		t.Errorf("wham with the balance gone %+v %s", u, u.RateLimit)
	}

	// Unlimited credits are never spent.
	s.Set("unl", Behavior{Meter: &Meter{Families: m.Families, Credits: &Credits{Unlimited: true}}})
	for range 2 {
		if status, h, body := post(t, c, s.OpenAIBase()+"/responses", "unl", `{"model":"gpt-5-codex"}`); status != 200 ||
			h.Get("x-codex-credits-unlimited") != "true" || h.Get("x-codex-credits-has-credits") != "true" {
			t.Fatalf("unlimited: %d %v %s", status, h, body)
		}
	}
	if st := s.Metered("unl"); st.OnCredits != 2 || st.Credits == nil || !st.Credits.Unlimited || st.Credits.Balance != 0 {
		t.Errorf("unlimited %+v", st)
	}
}

func TestMeterWindowResets(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	s.Set("tok", Behavior{Meter: &Meter{Families: []Family{{ID: MainFamily, Primary: &MeterWindow{UsedPercent: 100, Minutes: 60, ResetIn: 300 * time.Millisecond}}}}})
	if status, _, body := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok", codexBody("gpt-5-codex")); status != 429 {
		t.Fatalf("full window: %d %s", status, body)
	}
	time.Sleep(400 * time.Millisecond)
	status, h, body := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok", codexBody("gpt-5-codex"))
	if status != 200 || h.Get("x-codex-primary-used-percent") != "0" || h.Get("x-codex-primary-reset-after-seconds") != "3600" {
		t.Fatalf("after the reset: %d %v %s", status, h, body)
	}
	if st := s.Metered("tok"); used(t, st, MainFamily, false) != 10 {
		t.Errorf("meter %+v", st)
	}
}

func TestMeterPriorityTier(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	s.Set("tok", Behavior{Meter: &Meter{Step: 5}})
	for _, tier := range []string{`"service_tier":"priority"`, `"service_tier":"flex"`, ""} {
		var extra []string
		if tier != "" {
			extra = append(extra, tier)
		}
		if status, _, body := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok", codexBody("gpt-5-codex", extra...)); status != 200 {
			t.Fatalf("%s: %d %s", tier, status, body)
		}
	}
	st := s.Metered("tok")
	// The default Meter: a main family with a 5-hour and a weekly window.
	if used(t, st, MainFamily, false) != 20 || used(t, st, MainFamily, true) != 20 {
		t.Errorf("priority 10 + flex 5 + default 5: %+v", st.Families[0].Primary)
	}
	if f := st.Families[0]; f.Primary.Minutes != 300 || f.Secondary.Minutes != 10080 || len(st.Families) != 1 {
		t.Errorf("default families %+v", st.Families)
	}
	if st.Tiers["priority"] != 1 || st.Tiers["flex"] != 1 || st.Tiers[""] != 1 || st.Served != 3 {
		t.Errorf("tiers %v", st.Tiers)
	}
}

func TestMeterWorkspace(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	m := &Meter{Workspace: true, Credits: &Credits{Balance: 40}}
	s.Set("tok", Behavior{Meter: m})
	u := whamUsage(t, s, c, "tok")
	if u.Main != nil || u.PlanType != "business" || u.SpendControl == nil || u.SpendControl.Reached || u.ReachedType != nil ||
		!u.Credits.HasCredits || *u.Credits.Balance != "40.00" {
		t.Fatalf("workspace wham %+v %s", u, u.RateLimit)
	}
	status, h, body := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok", codexBody("gpt-5-codex"))
	if status != 200 {
		t.Fatalf("workspace: %d %s", status, body)
	}
	wantHeaders(t, h, map[string]string{
		"x-codex-plan-type":               "business",
		"x-codex-primary-used-percent":    "<absent>",
		"x-codex-secondary-used-percent":  "<absent>",
		"x-codex-rate-limit-reached-type": "<absent>",
		"x-codex-credits-balance":         "40.00",
	})
	if evs := leadingRateLimits(t, ssePayloads(t, body)); len(evs) != 1 || evs[0].RateLimits.Primary != nil || !evs[0].RateLimits.Allowed {
		t.Errorf("workspace rate_limits %+v", evs)
	}

	for _, reached := range []string{ReachedOwnerCredits, ReachedMemberCredits, ReachedOwnerUsage, ReachedMemberUsage} {
		m.ReachedType = reached
		s.Set("tok", Behavior{Meter: m}) // the same Meter: the live one is kept
		status, h, body := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok", codexBody("gpt-5-codex"))
		var e struct {
			Error struct {
				Type        string          `json:"type"`
				PlanType    string          `json:"plan_type"`
				ResetsAt    json.RawMessage `json:"resets_at"`
				ReachedType struct {
					Type string `json:"type"`
				} `json:"rate_limit_reached_type"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		if status != 429 || e.Error.Type != "usage_limit_reached" || e.Error.ResetsAt != nil || e.Error.ReachedType.Type != reached || e.Error.PlanType != "business" {
			t.Errorf("%s: %d %s", reached, status, body)
		}
		wantHeaders(t, h, map[string]string{"x-codex-rate-limit-reached-type": reached, "x-codex-plan-type": "business"})
		u := whamUsage(t, s, c, "tok")
		if u.ReachedType == nil || u.ReachedType.Type != reached || u.Main != nil || !u.SpendControl.Reached {
			t.Errorf("%s: wham %+v", reached, u)
		}
	}
	// Only the owner lifts it: the test, here.
	m.ReachedType = ""
	s.Set("tok", Behavior{Meter: m})
	if status, _, body := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok", codexBody("gpt-5-codex")); status != 200 {
		t.Fatalf("lifted: %d %s", status, body)
	}
	if st := s.Metered("tok"); st.Served != 2 || st.Refused != 4 || st.Credits.Balance != 40 {
		t.Errorf("meter %+v", st)
	}
}

func TestMeterSocket(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	m := familiesMeter()
	m.Families[0].Primary = &MeterWindow{UsedPercent: 80, ResetIn: time.Hour}
	m.Credits = &Credits{Balance: 0.5}
	s.Set("tok", Behavior{Meter: m})
	ws, resp, _ := handshake(t, s, "/backend-api/codex/responses", "tok", "chatgpt-account-id", "acct-ws")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake %s", resp.Status)
	}
	wantHeaders(t, resp.Header, map[string]string{
		"x-codex-primary-used-percent":           "80",
		"x-codex-bengalfox-primary-used-percent": "0",
		"x-codex-bengalfox-limit-name":           sonicModel,
		"x-codex-active-limit":                   MainFamily,
		"x-codex-credits-balance":                "0.50",
		"x-codex-plan-type":                      "plus",
	})
	frame := func(model string) string {
		return `{"type":"response.create","model":"` + model + `","store":false,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}]}`
	}
	payloads := func(fs []stamped) [][]byte {
		var out [][]byte
		for _, f := range fs {
			out = append(out, f.data)
		}
		return out
	}
	// 80 -> 90 -> 100, the third on credits, then the limit.
	for i, want := range []float64{80, 90, 100} {
		got := ws.turn(frame("gpt-5-codex"))
		if last := frameType(got[len(got)-1].data); last != "response.completed" {
			t.Fatalf("turn %d: %s", i+1, frameTypes(got))
		}
		evs := leadingRateLimits(t, payloads(got))
		if len(evs) != 2 || evs[0].RateLimits.Primary.UsedPercent != want || evs[1].MeteredLimitName != sonicFamily {
			t.Fatalf("turn %d: rate_limits %+v", i+1, evs)
		}
		if frameType(got[len(evs)].data) != "response.created" {
			t.Errorf("turn %d: after the rate_limits: %s", i+1, frameTypes(got))
		}
	}
	st := s.Metered("acct-ws")
	if st.OnCredits != 1 || st.Credits.Balance != 0 || st.Served != 3 || used(t, st, MainFamily, true) != 5+20 {
		t.Fatalf("meter %+v", st)
	}
	got := ws.turn(frame("gpt-5-codex"))
	if len(got) != 1 {
		t.Fatalf("limited turn: %s", frameTypes(got))
	}
	e := parseErrorFrame(t, got[0].data)
	now := time.Now().Unix()
	if e.Status != 429 || e.Error.Type != "usage_limit_reached" || math.Abs(float64(e.Error.ResetsAt-(now+3600))) > 5 ||
		e.Headers["x-codex-active-limit"] != MainFamily || e.Headers["x-codex-primary-used-percent"] != "100" ||
		e.Headers["x-codex-credits-has-credits"] != "false" {
		t.Fatalf("limit frame %s (now %d)", got[0].data, now)
	}
	// The socket stays open, and the sonic family still serves.
	got = ws.turn(frame(sonicModel))
	if frameType(got[len(got)-1].data) != "response.completed" {
		t.Fatalf("sonic after the limit: %s", frameTypes(got))
	}
	if st := s.Metered("acct-ws"); used(t, st, sonicFamily, false) != 10 || st.Refused != 1 {
		t.Errorf("meter %+v", st)
	}
	// HTTP and the socket share the account's meter.
	if status, _, body := post(t, c, s.ChatGPTBase()+"/codex/responses", "tok", codexBody("gpt-5-codex"), "chatgpt-account-id", "acct-ws"); status != 429 {
		t.Errorf("HTTP after the socket: %d %s", status, body)
	}
	// A workspace reached type refuses frames the same way.
	m.Workspace, m.ReachedType = true, ReachedMemberUsage
	s.Set("tok", Behavior{Meter: m})
	e = parseErrorFrame(t, ws.turn(frame("gpt-5-codex"))[0].data)
	if e.Status != 429 || e.Error.Type != "usage_limit_reached" || e.Error.ResetsAt != 0 || e.Headers["x-codex-rate-limit-reached-type"] != ReachedMemberUsage {
		t.Errorf("workspace frame %+v", e)
	}
}
