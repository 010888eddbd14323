package upstreamtest

// The meter of Behavior.Meter: what the ChatGPT backend meters (docs/selection.md), limit families, credits and workspaces, kept live per account. The
// package doc ("The meter") says what each rule answers; this file holds
// the types, the live state and the answers' headers, events and bodies.

import (
	"cmp"
	"encoding/json"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	// MainFamily is the id of the account's main limit family, the one
	// metering every model that has no family of its own.
	MainFamily = "codex"

	// ReachedWindow is rate_limit_reached_type.type of an account whose
	// main family has a used-up window and no credits.
	ReachedWindow = "rate_limit_reached"

	// The workspace reached types (Meter.ReachedType): usage limits only
	// the workspace's owner lifts.
	ReachedOwnerCredits  = "workspace_owner_credits_depleted"
	ReachedMemberCredits = "workspace_member_credits_depleted"
	ReachedOwnerUsage    = "workspace_owner_usage_limit_reached"
	ReachedMemberUsage   = "workspace_member_usage_limit_reached"

	defaultStep          = 10
	defaultCost          = 0.50
	defaultPlan          = "plus"
	defaultWorkspacePlan = "business"
	defaultPrimary       = 300   // minutes: the 5-hour window
	defaultSecondary     = 10080 // minutes: the weekly window

	// priorityTier is service_tier's value for Codex's Fast, which spends
	// twice the step.
	priorityTier = "priority"

	// The usage limits' bodies under testdata/errors/, and the plain-text
	// placeholders in them replaced at serve time.
	windowLimitFixture    = "usage_limit_429.json"
	workspaceLimitFixture = "workspace_usage_limit_429.json"
	planPlaceholder       = `"plan_type":"plus"`
	wsPlanPlaceholder     = `"plan_type":"business"`
	reachedPlaceholder    = `"type":"` + ReachedOwnerCredits + `"`

	reachedTypeHeader = "x-codex-rate-limit-reached-type"
	activeLimitHeader = "x-codex-active-limit"
)

// Meter is an account's meter as the backend keeps it (see "The meter" in
// the package doc): the state it starts in. The live state is the
// Server's, per account; Set with another *Meter starts it again, Set
// with the same one keeps it and takes the Meter's other settings
// (Workspace, ReachedType, Step, Cost, Plan, a family new to it).
type Meter struct {
	// Families are the limit families. The one with ID MainFamily is the
	// main one (x-codex-primary-* ...; wham/usage's rate_limit), the
	// others each meter the model named by their LimitName. None at all
	// (and not Workspace) is a main family with an unused 5-hour and
	// weekly window.
	Families []Family
	// Credits the account holds; nil: none.
	Credits *Credits
	// Workspace: a Business, Enterprise or Edu account, with no windows:
	// wham/usage's rate_limit is null, answers carry no window headers,
	// and Families are not used.
	Workspace bool
	// ReachedType, when set, refuses every Responses request as a usage
	// limit only the workspace owner lifts (ReachedOwnerCredits and the
	// other three); clear it, by Set with the same *Meter, to lift it.
	ReachedType string
	// Step is the percent of each window of its family one request uses
	// (default 10; twice that with "service_tier":"priority").
	Step float64
	// Cost is the credits one request served past a full window spends
	// (default 0.50).
	Cost float64
	// Plan is plan_type (default "plus"; "business" for a Workspace).
	Plan string
}

// Family is one limit family: its id (MainFamily, or e.g.
// "codex_bengalfox", whose headers are x-codex-bengalfox-*), the model it
// meters (LimitName, e.g. "gpt-5.2-codex-sonic"; "" for the main one) and
// its windows, nil for a window it does not have.
type Family struct {
	ID, LimitName      string
	Primary, Secondary *MeterWindow
}

// MeterWindow is one window: percent used, its length (0: 300 minutes
// for a primary, 10080 for a secondary) and the time left until it resets
// (0: Minutes). In MeterState, ResetIn is the time left then.
type MeterWindow struct {
	UsedPercent float64
	Minutes     int
	ResetIn     time.Duration
}

// Credits is what an account holds past its windows' included quota:
// unlimited credits, or a balance (in credits, e.g. 12.5). It has credits
// when it is Unlimited or its Balance is above 0.
type Credits struct {
	Unlimited bool
	Balance   float64
}

// MeterState is an account's live meter, as Metered reads it.
type MeterState struct {
	Plan string
	// Families in the Meter's order, each window as it stands now.
	Families []Family
	// Credits: the balance left (nil: the account holds none).
	Credits *Credits
	// Served counts the Responses requests the meter let through and that
	// were answered (not refused by another rule); OnCredits those of them
	// served on credits past a full window; Refused the usage limits it
	// answered.
	Served, OnCredits, Refused int
	// Tiers counts Served by the request's service_tier ("" when none).
	Tiers map[string]int
}

// Family returns the family with id, and whether there is one.
func (m MeterState) Family(id string) (Family, bool) {
	for _, f := range m.Families {
		if f.ID == id {
			return f, true
		}
	}
	return Family{}, false
}

// meterSource ties a Set's *Meter to the Server's copy of it, so a Set
// with the same pointer keeps the live meter.
type meterSource struct {
	orig, copy *Meter
}

// adoptMeter replaces b.Meter by the Server's copy (prev's when b sets the
// same *Meter as before: its settings are updated in place, under s.mu,
// and the live meter kept). Called with s.mu held.
func adoptMeter(prev meterSource, b *Behavior) meterSource {
	if b.Meter == nil {
		return meterSource{}
	}
	c := cloneMeter(b.Meter)
	if prev.orig == b.Meter && prev.copy != nil {
		*prev.copy = *c
		b.Meter = prev.copy
		return prev
	}
	src := meterSource{orig: b.Meter, copy: c}
	b.Meter = c
	return src
}

func cloneMeter(m *Meter) *Meter {
	c := *m
	c.Families = slices.Clone(m.Families)
	for i, f := range c.Families {
		if f.Primary != nil {
			w := *f.Primary
			c.Families[i].Primary = &w
		}
		if f.Secondary != nil {
			w := *f.Secondary
			c.Families[i].Secondary = &w
		}
	}
	if m.Credits != nil {
		cr := *m.Credits
		c.Credits = &cr
	}
	return &c
}

// families are the Meter's families, or the default main one.
func (m *Meter) families() []Family {
	switch {
	case m.Workspace:
		return nil
	case len(m.Families) == 0:
		return []Family{{ID: MainFamily, Primary: &MeterWindow{}, Secondary: &MeterWindow{}}}
	}
	return m.Families
}

func (m *Meter) plan() string {
	if m.Workspace {
		return cmp.Or(m.Plan, defaultWorkspacePlan)
	}
	return cmp.Or(m.Plan, defaultPlan)
}

func (m *Meter) step() float64 { return cmp.Or(m.Step, defaultStep) }
func (m *Meter) cost() float64 { return cmp.Or(m.Cost, defaultCost) }

// familyFor is the family metering model: the one whose LimitName is the
// model, else the main one.
func (m *Meter) familyFor(model string) string {
	for _, f := range m.families() {
		if f.LimitName != "" && f.LimitName == model {
			return f.ID
		}
	}
	return MainFamily
}

// liveMeter is one account's meter now.
type liveMeter struct {
	conf    *Meter // the Server's copy it was started from
	windows map[string]*[2]*liveWindow
	credits *Credits
	served  int
	onCred  int
	refused int
	tiers   map[string]int
}

type liveWindow struct {
	used    float64
	minutes int
	resetAt time.Time
}

func newLiveWindow(w *MeterWindow, def int, now time.Time) *liveWindow {
	if w == nil {
		return nil
	}
	lw := &liveWindow{used: math.Min(math.Max(w.UsedPercent, 0), 100), minutes: cmp.Or(w.Minutes, def)}
	lw.resetAt = now.Add(cmp.Or(w.ResetIn, time.Duration(lw.minutes)*time.Minute))
	return lw
}

// roll starts a window whose reset time passed again at 0.
func (w *liveWindow) roll(now time.Time) {
	if w != nil && !now.Before(w.resetAt) {
		w.used = 0
		w.resetAt = now.Add(time.Duration(w.minutes) * time.Minute)
	}
}

func (w *liveWindow) full() bool { return w != nil && w.used >= 100 }

// resetIn is the time left until w resets, rounded up to a second.
func (w *liveWindow) resetIn(now time.Time) time.Duration {
	return max(w.resetAt.Sub(now), 0).Round(time.Second)
}

func (w *liveWindow) resetAfter(now time.Time) int64 {
	return int64(math.Ceil(max(w.resetAt.Sub(now), 0).Seconds()))
}

// live returns account's live meter for conf, started (again) when it is
// new or conf is another Meter's, its windows rolled to now. Called with
// s.mu held.
func (s *Server) live(account string, conf *Meter, now time.Time) *liveMeter {
	if s.meters == nil {
		s.meters = make(map[string]*liveMeter)
	}
	lm := s.meters[account]
	if lm == nil || lm.conf != conf {
		lm = &liveMeter{conf: conf, windows: map[string]*[2]*liveWindow{}, tiers: map[string]int{}}
		if conf.Credits != nil {
			c := *conf.Credits
			c.Balance = max(c.Balance, 0)
			lm.credits = &c
		}
		s.meters[account] = lm
	}
	for _, f := range conf.families() {
		ws := lm.windows[f.ID]
		if ws == nil {
			ws = &[2]*liveWindow{newLiveWindow(f.Primary, defaultPrimary, now), newLiveWindow(f.Secondary, defaultSecondary, now)}
			lm.windows[f.ID] = ws
		}
		ws[0].roll(now)
		ws[1].roll(now)
	}
	return lm
}

func (lm *liveMeter) hasCredits() bool {
	return lm.credits != nil && (lm.credits.Unlimited || lm.credits.Balance > 0)
}

// fullWindow is family's used-up window (the one resetting last), or nil.
func (lm *liveMeter) fullWindow(family string) *liveWindow {
	var out *liveWindow
	if ws := lm.windows[family]; ws != nil {
		for _, w := range ws {
			if w.full() && (out == nil || w.resetAt.After(out.resetAt)) {
				out = w
			}
		}
	}
	return out
}

// metering is one Responses request's passage through its account's
// meter: what its answer carries, and whether it is refused.
type metering struct {
	s       *Server
	lm      *liveMeter
	family  string
	tier    string
	headers map[string]string
	// events are the codex.rate_limits payloads, one per family.
	events [][]byte
	// refused: the usage limit answered instead (status 429, fixture
	// under testdata/errors/, filled with fill and repl).
	refused   bool
	fixture   string
	fill      filler
	repl      []string
	onCredits bool
}

// meter passes a Responses request of account, whose Behavior's Meter is
// conf, through the meter: nothing is charged yet (see charge), a refusal
// is counted at once.
func (s *Server) meter(conf *Meter, account string, req *requestBody, now time.Time) *metering {
	s.mu.Lock()
	defer s.mu.Unlock()
	lm := s.live(account, conf, now)
	m := &metering{s: s, lm: lm, family: conf.familyFor(req.Model), tier: req.ServiceTier}
	m.headers, m.events = lm.report(m.family, now)
	switch {
	case conf.ReachedType != "":
		m.refused, m.fixture = true, workspaceLimitFixture
		m.repl = []string{reachedPlaceholder, `"type":"` + jsonText(conf.ReachedType) + `"`,
			wsPlanPlaceholder, `"plan_type":"` + jsonText(conf.plan()) + `"`}
		m.headers[reachedTypeHeader] = conf.ReachedType
	default:
		if w := lm.fullWindow(m.family); w != nil {
			if lm.hasCredits() {
				m.onCredits = true
				break
			}
			m.refused, m.fixture = true, windowLimitFixture
			m.fill = newFiller(now, w.resetAt.Sub(now))
			m.repl = []string{planPlaceholder, `"plan_type":"` + jsonText(conf.plan()) + `"`}
		}
	}
	if m.refused {
		lm.refused++
	}
	return m
}

// charge spends what the served request costs: credits when it was let
// through past a full window, else its step on each window of its
// family. Nil-safe: a request of an account without a Meter costs nothing.
func (m *metering) charge() {
	if m == nil || m.refused {
		return
	}
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	lm := m.lm
	lm.served++
	lm.tiers[m.tier]++
	if m.onCredits {
		lm.onCred++
		if c := lm.credits; c != nil && !c.Unlimited {
			c.Balance = max(c.Balance-lm.conf.cost(), 0)
		}
		return
	}
	step := lm.conf.step()
	if m.tier == priorityTier {
		step *= 2
	}
	if ws := lm.windows[m.family]; ws != nil {
		for _, w := range ws {
			if w != nil {
				w.used = math.Min(w.used+step, 100)
			}
		}
	}
}

// merged is headers under m's (which win); headers itself without m.
func (m *metering) merged(headers map[string]string) map[string]string {
	if m == nil {
		return headers
	}
	out := make(map[string]string, len(headers)+len(m.headers))
	for k, v := range headers {
		out[strings.ToLower(k)] = v
	}
	maps.Copy(out, m.headers)
	return out
}

// sse is m's codex.rate_limits events as server-sent events.
func (m *metering) sse() []byte {
	if m == nil {
		return nil
	}
	var out []byte
	for _, ev := range m.events {
		out = append(out, "event: codex.rate_limits\ndata: "...)
		out = append(out, ev...)
		out = append(out, "\n\n"...)
	}
	return out
}

// familyPrefix is the header prefix of family id: "x-codex-" for codex,
// "x-codex-bengalfox-" for codex_bengalfox.
func familyPrefix(id string) string { return "x-" + strings.ReplaceAll(id, "_", "-") + "-" }

// report is what an answer says of lm when family meters the request: its
// headers (lower-case names) and its codex.rate_limits events. Called with
// s.mu held.
func (lm *liveMeter) report(family string, now time.Time) (map[string]string, [][]byte) {
	conf := lm.conf
	h := map[string]string{
		activeLimitHeader:             family,
		"x-codex-plan-type":           conf.plan(),
		"x-codex-credits-has-credits": strconv.FormatBool(lm.hasCredits()),
		"x-codex-credits-unlimited":   strconv.FormatBool(lm.credits != nil && lm.credits.Unlimited),
	}
	if lm.credits != nil {
		h["x-codex-credits-balance"] = balanceText(lm.credits.Balance)
	}
	type window struct {
		UsedPercent       float64 `json:"used_percent"`
		WindowMinutes     int     `json:"window_minutes"`
		ResetAfterSeconds int64   `json:"reset_after_seconds"`
		ResetAt           int64   `json:"reset_at"`
	}
	type limits struct {
		Allowed      bool    `json:"allowed"`
		LimitReached bool    `json:"limit_reached"`
		Primary      *window `json:"primary"`
		Secondary    *window `json:"secondary"`
	}
	type rateLimitsEvent struct {
		Type             string         `json:"type"`
		PlanType         string         `json:"plan_type"`
		RateLimits       limits         `json:"rate_limits"`
		Credits          map[string]any `json:"credits"`
		MeteredLimitName string         `json:"metered_limit_name,omitempty"`
	}
	credits := lm.creditsJSON()
	var events [][]byte
	if conf.Workspace {
		ev, _ := json.Marshal(rateLimitsEvent{Type: "codex.rate_limits", PlanType: conf.plan(),
			RateLimits: limits{Allowed: conf.ReachedType == "", LimitReached: conf.ReachedType != ""}, Credits: credits})
		return h, [][]byte{ev}
	}
	for _, f := range conf.families() {
		ws := lm.windows[f.ID]
		p := familyPrefix(f.ID)
		ev := rateLimitsEvent{Type: "codex.rate_limits", PlanType: conf.plan(), Credits: credits}
		if f.ID != MainFamily {
			h[p+"limit-name"] = f.LimitName
			ev.MeteredLimitName = f.ID
		}
		for i, name := range []string{"primary", "secondary"} {
			w := ws[i]
			if w == nil {
				continue
			}
			h[p+name+"-used-percent"] = strconv.FormatFloat(w.used, 'f', -1, 64)
			h[p+name+"-window-minutes"] = strconv.Itoa(w.minutes)
			h[p+name+"-reset-at"] = strconv.FormatInt(w.resetAt.Unix(), 10)
			h[p+name+"-reset-after-seconds"] = strconv.FormatInt(w.resetAfter(now), 10)
			jw := &window{w.used, w.minutes, w.resetAfter(now), w.resetAt.Unix()}
			if i == 0 {
				ev.RateLimits.Primary = jw
			} else {
				ev.RateLimits.Secondary = jw
			}
		}
		reached := lm.fullWindow(f.ID) != nil
		ev.RateLimits.LimitReached = reached
		ev.RateLimits.Allowed = !reached || lm.hasCredits()
		b, _ := json.Marshal(ev)
		events = append(events, b)
	}
	return h, events
}

// balanceText is a balance as the backend writes it: a decimal string.
func balanceText(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// creditsJSON is the credits object of events and wham/usage.
func (lm *liveMeter) creditsJSON() map[string]any {
	out := map[string]any{"has_credits": lm.hasCredits(), "unlimited": false, "balance": nil}
	if c := lm.credits; c != nil {
		out["unlimited"] = c.Unlimited
		out["balance"] = balanceText(c.Balance)
	}
	return out
}

// meterHeaders are the headers of account's meter as it stands, for an
// answer that meters nothing (a socket's 101): the active limit is the
// main family.
func (s *Server) meterHeaders(conf *Meter, account string, now time.Time) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, _ := s.live(account, conf, now).report(MainFamily, now)
	if conf.ReachedType != "" {
		h[reachedTypeHeader] = conf.ReachedType
	}
	return h
}

// meterUsageBody is GET /backend-api/wham/usage for account, whose
// Behavior is b, from its live meter.
func (s *Server) meterUsageBody(b Behavior, account string, now time.Time) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	conf := b.Meter
	lm := s.live(account, conf, now)
	window := func(w *liveWindow) any {
		if w == nil {
			return nil
		}
		return map[string]any{"used_percent": int(w.used), "limit_window_seconds": w.minutes * 60,
			"reset_after_seconds": w.resetAfter(now), "reset_at": w.resetAt.Unix()}
	}
	rateLimit := func(id string) map[string]any {
		ws := lm.windows[id]
		reached := lm.fullWindow(id) != nil
		return map[string]any{"allowed": !reached || lm.hasCredits(), "limit_reached": reached,
			"primary_window": window(ws[0]), "secondary_window": window(ws[1])}
	}
	body := map[string]any{
		"plan_type":                conf.plan(),
		"rate_limit":               nil,
		"additional_rate_limits":   []any{},
		"credits":                  lm.creditsJSON(),
		"rate_limit_reset_credits": map[string]any{"available_count": b.ResetCredits},
	}
	var extra []any
	for _, f := range conf.families() {
		if f.ID == MainFamily {
			rl := rateLimit(f.ID)
			body["rate_limit"] = rl
			if rl["limit_reached"] == true && !lm.hasCredits() {
				body["rate_limit_reached_type"] = map[string]any{"type": ReachedWindow}
			}
			continue
		}
		extra = append(extra, map[string]any{"limit_name": f.LimitName, "metered_feature": f.ID, "rate_limit": rateLimit(f.ID)})
	}
	if extra != nil {
		body["additional_rate_limits"] = extra
	}
	if conf.Workspace {
		body["spend_control"] = map[string]any{"reached": conf.ReachedType != ""}
	}
	if conf.ReachedType != "" {
		body["rate_limit_reached_type"] = map[string]any{"type": conf.ReachedType}
	}
	out, _ := json.Marshal(body)
	return out
}

// Metered is the live meter of account: its chatgpt-account-id, or its
// bearer token when its requests carry none (as the backend's rules name
// an account). An account that sent no Responses request yet reads as the
// Meter of the Behavior Set for account as a token; otherwise, or without
// a Meter, the zero MeterState.
func (s *Server) Metered(account string) MeterState {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	lm := s.meters[account]
	if lm == nil {
		b, ok := s.behaviors[account]
		if !ok || b.Meter == nil {
			return MeterState{}
		}
		lm = s.live(account, b.Meter, now)
	}
	conf := lm.conf
	st := MeterState{Plan: conf.plan(), Served: lm.served, OnCredits: lm.onCred, Refused: lm.refused, Tiers: maps.Clone(lm.tiers)}
	if lm.credits != nil {
		c := *lm.credits
		st.Credits = &c
	}
	for _, f := range conf.families() {
		out := Family{ID: f.ID, LimitName: f.LimitName}
		if ws := lm.windows[f.ID]; ws != nil {
			out.Primary, out.Secondary = ws[0].state(now), ws[1].state(now)
		}
		st.Families = append(st.Families, out)
	}
	return st
}

func (w *liveWindow) state(now time.Time) *MeterWindow {
	if w == nil {
		return nil
	}
	return &MeterWindow{UsedPercent: w.used, Minutes: w.minutes, ResetIn: w.resetIn(now)}
}

// isResponsesPost reports whether r is a Responses request over HTTP, the
// requests the meter meters.
func isResponsesPost(r *http.Request) bool {
	return r.Method == http.MethodPost &&
		(r.URL.Path == chatgptPrefix+"/codex/responses" || r.URL.Path == openaiPrefix+"/responses")
}
