// Package dashboard is the web page `rotor serve` shows at / (docs/dashboard.md): the
// pool live, its usage as charts, and buttons to pin, unpin, enable and
// disable accounts. It reads the pool through the same selector the proxy
// picks with and changes it through the same store the CLI writes, so the
// page, `rotor rotation status` and `--json` never disagree.
//
// Every path but /login needs a session cookie; the proxy's Host and
// Origin checks run before any of them.
package dashboard

import (
	"bufio"
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/prices"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/usage"
	"github.com/rotorproxy/rotor/rotation/view"
)

//go:embed static
var static embed.FS

// Pool is the live pool: *rotation.Selector.
type Pool interface {
	Status() []rotation.AccountStatus
	view.Selector
}

// Store changes the pool on disk: *accounts.Store. The serve's watcher
// brings the change into the selector, as it does for `rotor switch`.
type Store interface {
	Update(fn func(*accounts.Pool) error) (*accounts.Pool, error)
}

// Config wires a Dashboard.
type Config struct {
	ClientKey string // the serve's client key, which signs logins and cookies (see SetClientKey)
	Pool      Pool
	Store     Store
	Usage     *Usage
	Clock     clock.Clock
	Log       zerolog.Logger
	// Tick is how often an open page's stream looks for news (default 1s).
	Tick time.Duration
}

// Dashboard answers the dashboard's paths.
type Dashboard struct {
	cfg Config
	// key is the client key logins and cookies are signed with now; it
	// starts as cfg.ClientKey.
	key   atomic.Pointer[string]
	spent spent
	// streams bounds the open live streams: each costs a goroutine and a
	// look at the pool per tick.
	streams chan struct{}
}

// maxStreams is how many pages may be open at once.
const maxStreams = 16

// New returns a dashboard for cfg.
func New(cfg Config) *Dashboard {
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	d := &Dashboard{cfg: cfg, streams: make(chan struct{}, maxStreams)}
	d.SetClientKey(cfg.ClientKey)
	return d
}

// SetClientKey makes key the one logins and cookies are signed with and
// checked against, as the serve's own key check follows a rotated key.
// Login links and cookies signed with the old key stop working at once:
// whoever held the old key could have made them, so a rotation signs
// every dashboard session out, and "rotor dashboard" makes a new link.
func (d *Dashboard) SetClientKey(key string) { d.key.Store(&key) }

// clientKey is the key logins and cookies are signed with now.
func (d *Dashboard) clientKey() string { return *d.key.Load() }

// Owns reports whether path is the dashboard's: /, /login and /dashboard/….
func (d *Dashboard) Owns(path []byte) bool {
	return len(path) == 1 && path[0] == '/' || string(path) == "/login" || bytes.HasPrefix(path, []byte("/dashboard/"))
}

// assets are the dashboard's static files, by path.
var assets = map[string]string{
	"/dashboard/app.js":  "static/app.js",
	"/dashboard/app.css": "static/app.css",
}

// ServePage answers a request for one of the dashboard's paths.
func (d *Dashboard) ServePage(ctx *fasthttp.RequestCtx) {
	h := &ctx.Response.Header
	// The page loads nothing from elsewhere, runs no inline script, cannot
	// be framed, and sends no Referer (the login link holds a token).
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	path, method := string(ctx.Path()), string(ctx.Method())
	if path == "/login" && method == fasthttp.MethodGet {
		d.login(ctx)
		return
	}
	if !d.Session(ctx) {
		d.unauthorized(ctx, "No dashboard session. Run \"rotor dashboard\" for a login link (add --open to open it).")
		return
	}
	switch {
	case method == fasthttp.MethodGet && path == "/":
		d.page(ctx)
	case method == fasthttp.MethodGet && assets[path] != "":
		d.asset(ctx, assets[path])
	case method == fasthttp.MethodGet && path == "/dashboard/state":
		ctx.SetContentType("application/json")
		ctx.SetBody(d.snapshot())
	case method == fasthttp.MethodGet && path == "/dashboard/events":
		d.events(ctx)
	case method == fasthttp.MethodPost && actions[strings.TrimPrefix(path, "/dashboard/")] != nil:
		d.act(ctx, strings.TrimPrefix(path, "/dashboard/"))
	default:
		d.fail(ctx, rerr.ProxyNotFound, fmt.Sprintf("the dashboard has no %s %s", method, path))
	}
}

// page is index.html with the current snapshot inside, as JSON data in a
// non-script block (json.Marshal escapes <, > and &, so it cannot end the
// block), so the first paint shows the pool without waiting for the
// stream.
func (d *Dashboard) page(ctx *fasthttp.RequestCtx) {
	b, err := static.ReadFile("static/index.html")
	if err != nil {
		d.fail(ctx, rerr.ProxyError, "missing dashboard page")
		return
	}
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.SetBody(bytes.Replace(b, []byte("{{SNAPSHOT}}"), d.snapshot(), 1))
}

func (d *Dashboard) asset(ctx *fasthttp.RequestCtx, name string) {
	b, err := static.ReadFile(name)
	if err != nil {
		d.fail(ctx, rerr.ProxyError, "missing dashboard asset "+name)
		return
	}
	types := map[string]string{".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
	ctx.SetContentType(types[name[strings.LastIndexByte(name, '.'):]])
	ctx.SetBody(b)
}

// cookieName carries the port: browsers share cookies between the ports
// of one host, and two serves must not log each other out.
func cookieName(ctx *fasthttp.RequestCtx) string {
	host := string(ctx.Host())
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		return "rotor_dashboard_" + host[i+1:]
	}
	return "rotor_dashboard"
}

// login trades a one-time token for a session cookie and goes to /.
func (d *Dashboard) login(ctx *fasthttp.RequestCtx) {
	now := d.cfg.Clock.Now()
	nonce, exp, ok := check(d.clientKey(), purposeLogin, string(ctx.QueryArgs().Peek("token")), now)
	if !ok || !d.spent.take(nonce, exp, now) {
		d.unauthorized(ctx, "This login link is used up, expired, or from another rotor serve. Run \"rotor dashboard\" for a new one.")
		return
	}
	var c fasthttp.Cookie
	c.SetKey(cookieName(ctx))
	c.SetValue(mint(d.clientKey(), purposeSession, now.Add(SessionTTL)))
	c.SetPath("/")
	c.SetHTTPOnly(true)
	c.SetSameSite(fasthttp.CookieSameSiteStrictMode)
	c.SetMaxAge(int(SessionTTL / time.Second))
	ctx.Response.Header.SetCookie(&c)
	ctx.Response.Header.Set("Location", "/")
	ctx.SetStatusCode(fasthttp.StatusSeeOther)
	d.cfg.Log.Info().Msg("dashboard login")
}

// Session reports whether ctx carries a live session cookie of this
// serve: every dashboard path but /login needs one, and the proxy lets
// /metrics take it in place of the client key.
func (d *Dashboard) Session(ctx *fasthttp.RequestCtx) bool {
	_, _, ok := check(d.clientKey(), purposeSession, string(ctx.Request.Header.Cookie(cookieName(ctx))), d.cfg.Clock.Now())
	return ok
}

// unauthorized is docs/dashboard.md's 401: a short page that says what to run, and
// nothing about the pool.
func (d *Dashboard) unauthorized(ctx *fasthttp.RequestCtx, msg string) {
	ctx.SetStatusCode(fasthttp.StatusUnauthorized)
	ctx.SetContentType("text/html; charset=utf-8")
	fmt.Fprintf(ctx, "<!doctype html><html lang=en><meta charset=utf-8><meta name=viewport content=\"width=device-width\"><title>rotor</title><h1>rotor dashboard</h1><p>%s</p></html>\n", msg)
}

func (d *Dashboard) fail(ctx *fasthttp.RequestCtx, code, msg string) {
	r := rerr.Build(rerr.Spec{Code: code, Message: msg})
	ctx.SetStatusCode(r.Status)
	ctx.SetContentType("application/json")
	ctx.SetBody(r.Body)
}

// maxActionBody bounds what an action reads: {"index":N} is a few bytes.
const maxActionBody = 1 << 10

// actions are the buttons, each the same pool edit as its CLI command.
var actions = map[string]func(p *accounts.Pool, i int){
	"pin":     func(p *accounts.Pool, i int) { p.Pin(i) },
	"unpin":   func(p *accounts.Pool, i int) { p.Unpin() },
	"enable":  func(p *accounts.Pool, i int) { p.At(i).Enabled = true },
	"disable": func(p *accounts.Pool, i int) { p.At(i).Enabled = false },
}

// act runs a button. A state-changing request also needs an Origin equal
// to this serve's own: the cookie is SameSite=Strict, and this refuses
// what a browser sends without one.
func (d *Dashboard) act(ctx *fasthttp.RequestCtx, name string) {
	if origin := string(ctx.Request.Header.Peek("Origin")); origin != "http://"+string(ctx.Host()) {
		d.fail(ctx, rerr.ProxyForbiddenHost, "a dashboard action needs an Origin header naming this serve")
		return
	}
	var req struct {
		Index int `json:"index"`
	}
	if n := ctx.Request.Header.ContentLength(); n > maxActionBody || n < 0 && name != "unpin" {
		d.fail(ctx, rerr.ProxyPayloadTooLarge, "a dashboard action's body is a few bytes of JSON")
		return
	}
	if name != "unpin" {
		if err := json.Unmarshal(ctx.PostBody(), &req); err != nil {
			d.fail(ctx, rerr.ProxyBadRequest, `want {"index":N}`)
			return
		}
	}
	_, err := d.cfg.Store.Update(func(p *accounts.Pool) error {
		if name != "unpin" && p.At(req.Index) == nil {
			return rerr.Validation("index", fmt.Sprintf("there is no account %d", req.Index))
		}
		actions[name](p, req.Index)
		return nil
	})
	if err != nil {
		d.fail(ctx, rerr.ProxyBadRequest, err.Error())
		return
	}
	d.cfg.Log.Info().Str("action", name).Int("index", req.Index).Msg("dashboard action")
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"ok":true}`)
}

// events streams a snapshot whenever it changes, looking once per tick,
// and a comment every 15 s so proxies and browsers keep the stream open.
func (d *Dashboard) events(ctx *fasthttp.RequestCtx) {
	select {
	case d.streams <- struct{}{}:
	default:
		d.fail(ctx, rerr.ProxyOverloaded, "too many dashboard pages are open")
		return
	}
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	done := ctx.Done() // closed when serve shuts down
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer func() { <-d.streams }()
		// fasthttp runs this on a goroutine of its own, with no recover: a
		// bug met in a snapshot would end the serve and every stream in it.
		// It ends this page's stream instead, and the page reconnects.
		defer func() {
			if v := recover(); v != nil {
				d.cfg.Log.Error().Str("panic", fmt.Sprint(v)).Bytes("stack", debug.Stack()).Msg("dashboard stream panic")
			}
		}()
		tick, stop := d.cfg.Clock.NewTicker(d.cfg.Tick)
		defer stop()
		var last []byte
		quiet := 0
		for {
			snap := d.snapshot()
			if !bytes.Equal(stripNow(snap), stripNow(last)) {
				fmt.Fprintf(w, "data: %s\n\n", snap)
				last, quiet = snap, 0
			} else if quiet++; time.Duration(quiet)*d.cfg.Tick >= keepAlive {
				w.WriteString(": keep-alive\n\n")
				quiet = 0
			}
			if w.Flush() != nil {
				return // the page is gone
			}
			select {
			case <-done:
				return
			case <-tick:
			}
		}
	})
}

// keepAlive is how long a stream may stay silent before a comment line
// keeps proxies and browsers from closing it.
const keepAlive = 15 * time.Second

// stripNow drops the leading "now" member, which changes every tick.
func stripNow(snap []byte) []byte {
	if i := bytes.IndexByte(snap, ','); i >= 0 {
		return snap[i:]
	}
	return snap
}

// card is one account on the page: its status view and what the buttons
// need.
type card struct {
	view.Account
	Kind    string `json:"kind"`
	Enabled bool   `json:"enabled"`
	Pinned  bool   `json:"pinned"`
}

// snapshot is what the page shows, as JSON. "now" comes first (stripNow).
func (d *Dashboard) snapshot() []byte {
	rows := d.cfg.Pool.Status()
	v := view.StatusOf(d.cfg.Pool, rows)
	cards := make([]card, len(rows))
	index := make(map[string]int, len(rows))
	kinds := make(map[string]accounts.Kind, len(rows))
	for i, r := range rows {
		cards[i] = card{Account: v.Accounts[i], Kind: string(r.Account.Kind), Enabled: r.Account.Enabled, Pinned: r.Pinned}
		index[r.Account.ID] = r.Index
		kinds[r.Account.ID] = r.Account.Kind
	}
	now := d.cfg.Clock.Now()
	out := struct {
		Now                string    `json:"now"`
		PinnedAccountIndex *int      `json:"pinned_account_index"`
		PinSource          *string   `json:"pin_source"`
		Next               view.Pick `json:"next"`
		Accounts           []card    `json:"accounts"`
		Usage              UsageView `json:"usage"`
	}{now.UTC().Format(time.RFC3339Nano), v.PinnedAccountIndex, v.PinSource, v.Next, cards, d.cfg.Usage.View(now, index, kinds)}
	b, err := json.Marshal(out)
	if err != nil {
		d.cfg.Log.Error().Err(err).Msg("dashboard snapshot")
	}
	return b
}

// Usage keeps the running sums the charts, the money card and the recent
// requests need: requests, tokens and their price per account per hour
// for the last 7 days, and the last 50 records. It follows the usage log (usage.Tail), reading
// only what was appended, at most once per interval: however long the log
// and however busy the proxy, the dashboard holds a few kilobytes per
// account and reads each record once.
type Usage struct {
	tail     Tail
	interval time.Duration
	prices   *prices.Table

	mu     sync.Mutex
	lookAt time.Time
	hours  map[string]map[int64]*bucket // account id -> hour (Unix seconds) -> sums
	// minutes are the last hour's sums by minute, for the 1 h cache hit
	// rate, which hourly buckets would only approximate.
	minutes map[string]map[int64]*bucket
	recent  [recentRequests]usage.Record
	n       int // records ever put in recent
}

// Tail is the usage log read incrementally: *usage.Tail.
type Tail interface {
	Read(reset func(), fn func(usage.Record)) error
}

type bucket struct {
	requests int
	tokens   usage.Tokens
	// creditsRequests and creditsTokens are those served on credits
	// (docs/selection.md); fast the requests that asked for the priority tier.
	creditsRequests int
	creditsTokens   int64
	fast            int
	// money is the bucket's usage at the table's prices, all of it as of
	// unknown kind (Sum.Unknown): the view tells cost from value by the
	// account's kind (kindMoney).
	money prices.Sum
}

// NewUsage follows tail, reading it at most once per interval, and prices
// its records with table (nil: the shipped prices).
func NewUsage(tail Tail, interval time.Duration, table *prices.Table) *Usage {
	if table == nil {
		table = prices.Shipped()
	}
	return &Usage{tail: tail, interval: interval, prices: table, hours: map[string]map[int64]*bucket{}, minutes: map[string]map[int64]*bucket{}}
}

// UsageView is the usage part of a snapshot.
type UsageView struct {
	// Hours are the starts of the 24 hourly buckets, Days of the 7 daily
	// ones, oldest first; each account's series follow them.
	Hours    []string       `json:"hours"`
	Days     []string       `json:"days"`
	Accounts []AccountUsage `json:"accounts"`
	Recent   []Recent       `json:"recent"`
	// Money is the pool's usage in dollars over the last 1 h, 24 h and
	// 7 d (docs/selection.md).
	Money Money `json:"money"`
}

// Money is what the pool's usage cost (API-key accounts), was worth at
// API prices (ChatGPT accounts) and saved by the prompt cache, per window
// (the cache hit rate's), and the prices behind it.
type Money struct {
	Prices prices.About `json:"prices"`
	Hour   prices.Sum   `json:"1h"`
	Day    prices.Sum   `json:"24h"`
	Week   prices.Sum   `json:"7d"`
}

// AccountUsage is one account's requests and tokens per bucket.
type AccountUsage struct {
	Index          int     `json:"index"`
	HourRequests   []int   `json:"hour_requests"`
	HourTokens     []int64 `json:"hour_tokens"`
	DayRequests    []int   `json:"day_requests"`
	DayTokens      []int64 `json:"day_tokens"`
	TotalRequests  int     `json:"total_requests_24h"`
	TotalTokens24h int64   `json:"total_tokens_24h"`
	// CacheHit is the prompt cache's hit rate (cached ÷ input tokens,
	// docs/cost.md) over the last 1 h, 24 h and 7 d; null where no input was
	// counted.
	CacheHit CacheHit `json:"cache_hit"`
	// CreditsRequests24h and CreditsTokens24h are the requests served on
	// credits over the last 24 h and their tokens, FastRequests24h those
	// that asked for Fast (docs/selection.md).
	CreditsRequests24h int   `json:"credits_requests_24h"`
	CreditsTokens24h   int64 `json:"credits_tokens_24h"`
	FastRequests24h    int   `json:"fast_requests_24h"`
}

// CacheHit is a hit rate per window, each nil when nothing was sent.
type CacheHit struct {
	Hour *float64 `json:"1h"`
	Day  *float64 `json:"24h"`
	Week *float64 `json:"7d"`
}

func hitRate(t usage.Tokens) *float64 {
	if r, ok := t.CacheHitRate(); ok {
		return &r
	}
	return nil
}

// Recent is one of the last requests.
type Recent struct {
	Time       string `json:"time"`
	Account    int    `json:"account"` // index, 0 if none or removed
	Model      string `json:"model"`
	Status     int    `json:"status"`
	Code       string `json:"code"`
	DurationMS int64  `json:"duration_ms"`
}

// recentRequests is how many the page lists (docs/dashboard.md).
const recentRequests = 50

// View buckets the usage at now; index maps account ids to indexes and
// kinds to their kinds.
func (u *Usage) View(now time.Time, index map[string]int, kinds map[string]accounts.Kind) UsageView {
	hour0 := now.Truncate(time.Hour).Add(-23 * time.Hour)
	day0 := now.Truncate(24*time.Hour).AddDate(0, 0, -6)
	v := UsageView{Hours: make([]string, 24), Days: make([]string, 7), Accounts: []AccountUsage{}, Recent: []Recent{}}
	for i := range v.Hours {
		v.Hours[i] = hour0.Add(time.Duration(i) * time.Hour).UTC().Format(time.RFC3339)
	}
	for i := range v.Days {
		v.Days[i] = day0.AddDate(0, 0, i).UTC().Format(time.RFC3339)
	}
	if u == nil {
		v.Money.Prices = prices.Shipped().About()
		return v
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.update(now)
	v.Money = u.moneyView(now, hour0, day0, kinds)
	per := make([]*AccountUsage, len(index)+1)
	for id, idx := range index {
		per[idx] = u.accountView(id, idx, now, hour0, day0)
	}
	for _, a := range per {
		if a != nil {
			v.Accounts = append(v.Accounts, *a)
		}
	}
	for i := u.n - 1; i >= 0 && i >= u.n-recentRequests; i-- {
		r := &u.recent[i%recentRequests]
		v.Recent = append(v.Recent, Recent{Time: r.Time.UTC().Format(time.RFC3339), Account: index[r.AccountID],
			Model: r.Model, Status: r.Status, Code: r.ErrorCode(), DurationMS: r.DurMS})
	}
	return v
}

// accountView sums account id's buckets into the 24 hours from hour0 and
// the 7 days from day0. Callers hold mu.
func (u *Usage) accountView(id string, idx int, now, hour0, day0 time.Time) *AccountUsage {
	a := &AccountUsage{Index: idx, HourRequests: make([]int, 24), HourTokens: make([]int64, 24),
		DayRequests: make([]int, 7), DayTokens: make([]int64, 7)}
	var day, week, hour usage.Tokens
	for h, b := range u.hours[id] {
		at := time.Unix(h, 0)
		if i := int(at.Sub(hour0) / time.Hour); i >= 0 && i < 24 {
			a.HourRequests[i] += b.requests
			a.HourTokens[i] += b.tokens.Total
			a.TotalRequests += b.requests
			a.TotalTokens24h += b.tokens.Total
			a.CreditsRequests24h += b.creditsRequests
			a.CreditsTokens24h += b.creditsTokens
			a.FastRequests24h += b.fast
			day.Add(b.tokens)
		}
		if i := int(at.Sub(day0) / (24 * time.Hour)); i >= 0 && i < 7 {
			a.DayRequests[i] += b.requests
			a.DayTokens[i] += b.tokens.Total
			week.Add(b.tokens)
		}
	}
	for m, b := range u.minutes[id] {
		if now.Sub(time.Unix(m, 0)) < time.Hour {
			hour.Add(b.tokens)
		}
	}
	a.CacheHit = CacheHit{Hour: hitRate(hour), Day: hitRate(day), Week: hitRate(week)}
	return a
}

// moneyView adds up every account's buckets in dollars over the same
// windows as the cache hit rate: the minutes of the last hour, the 24
// hours from hour0, the 7 days from day0. Callers hold mu.
func (u *Usage) moneyView(now, hour0, day0 time.Time, kinds map[string]accounts.Kind) Money {
	m := Money{Prices: u.prices.About()}
	for id, byStart := range u.hours {
		var day, week prices.Sum
		for h, b := range byStart {
			at := time.Unix(h, 0)
			if i := int(at.Sub(hour0) / time.Hour); i >= 0 && i < 24 {
				day.Merge(&b.money)
			}
			if i := int(at.Sub(day0) / (24 * time.Hour)); i >= 0 && i < 7 {
				week.Merge(&b.money)
			}
		}
		m.Day.Merge(kindMoney(&day, kinds[id]))
		m.Week.Merge(kindMoney(&week, kinds[id]))
	}
	for id, byStart := range u.minutes {
		var hour prices.Sum
		for start, b := range byStart {
			if now.Sub(time.Unix(start, 0)) < time.Hour {
				hour.Merge(&b.money)
			}
		}
		m.Hour.Merge(kindMoney(&hour, kinds[id]))
	}
	return m
}

// kindMoney is s, all of it of unknown kind, as an account of kind k
// spent it: cost for an API key, value for a ChatGPT account, unknown
// still for an account no longer in the pool.
func kindMoney(s *prices.Sum, k accounts.Kind) *prices.Sum {
	s.As(k)
	return s
}

// update reads what the log gained, at most once per interval, and drops
// the hours that fell out of the last 7 days. Callers hold mu.
func (u *Usage) update(now time.Time) {
	if !u.lookAt.IsZero() && now.Sub(u.lookAt) < u.interval {
		return
	}
	u.lookAt = now
	since := now.Add(-7*24*time.Hour - time.Hour).Unix()
	add := func(r usage.Record) {
		if r.Time.Unix() < since {
			return
		}
		var money prices.Sum
		if t := r.Tokens; t != nil {
			u.prices.Add(&money, "", r.Model, t.Input, t.Cached, t.Output)
		}
		addTo(u.hours, r.AccountID, r.Time.Truncate(time.Hour).Unix(), r, &money)
		if now.Sub(r.Time) < time.Hour {
			addTo(u.minutes, r.AccountID, r.Time.Truncate(time.Minute).Unix(), r, &money)
		}
		u.recent[u.n%recentRequests] = r
		u.n++
	}
	// A reset means the log starts over (first read, or rotated): what
	// was summed is read again, so it is dropped first.
	u.tail.Read(func() { clear(u.hours); clear(u.minutes); u.n = 0 }, add)
	dropBefore(u.hours, since)
	dropBefore(u.minutes, now.Add(-time.Hour).Unix())
}

// addTo counts r, which came to money, in the bucket of account id that
// starts at start.
func addTo(buckets map[string]map[int64]*bucket, id string, start int64, r usage.Record, money *prices.Sum) {
	byStart := buckets[id]
	if byStart == nil {
		byStart = map[int64]*bucket{}
		buckets[id] = byStart
	}
	b := byStart[start]
	if b == nil {
		b = &bucket{}
		byStart[start] = b
	}
	b.requests++
	if r.Tokens != nil {
		b.tokens.Add(*r.Tokens)
	}
	if r.Credits {
		b.creditsRequests++
		if r.Tokens != nil {
			b.creditsTokens += r.Tokens.Total
		}
	}
	if r.Tier == usage.TierFast {
		b.fast++
	}
	b.money.Merge(money)
}

// dropBefore drops the buckets that start before since, and the accounts
// left with none.
func dropBefore(buckets map[string]map[int64]*bucket, since int64) {
	for id, byStart := range buckets {
		for start := range byStart {
			if start < since {
				delete(byStart, start)
			}
		}
		if len(byStart) == 0 {
			delete(buckets, id)
		}
	}
}
