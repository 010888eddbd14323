package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/aliases"
	"github.com/rotorproxy/rotor/accounts/clock/clocktest"
	"github.com/rotorproxy/rotor/accounts/secrets"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/usage"
)

const testKey = "test-client-key-0123456789abcdef0123456789"

// acct describes one account of a test pool; token is its access token or
// API key, which is also how the fake upstream tells accounts apart.
type acct struct {
	kind  accounts.Kind
	token string
}

// env is a real proxy on a loopback port in front of a real fake upstream,
// with a store, secrets and runtime state in a temporary ROTOR_HOME.
type env struct {
	t     testing.TB
	up    *upstreamtest.Server
	store *accounts.Store
	sel   *rotation.Selector
	srv   *Server
	base  string // http://127.0.0.1:P
	pool  *accounts.Pool
	usage *usage.Log
	ticks *clocktest.Fake // ticks the watcher by hand; nil when the test brought its own clock
	// aliases are the model aliases the proxy follows, as serve does:
	// read at the start, then by the watcher (watch).
	aliases *aliases.Live
}

// tick makes e's watcher look at the home once, as one WatchInterval
// passing would, and returns when that look is done: the second tick is
// only taken once the watcher finished with the first.
func (e *env) tick() {
	e.t.Helper()
	if e.ticks == nil {
		e.t.Fatal("tick: this proxy's clock ticks by itself")
	}
	for range 2 {
		if !e.ticks.Tick(5 * time.Second) {
			e.t.Fatal("the watcher took no tick within 5s")
		}
	}
}

// withinWatch fails unless cond holds after the watchers of envs have
// looked at the home as often as they do in one second of rotor serve
// (docs/selection.md: processes honor each other's news within 1 s).
func withinWatch(t *testing.T, what string, cond func() bool, envs ...*env) {
	t.Helper()
	for range time.Second / rotation.WatchInterval {
		if cond() {
			return
		}
		for _, e := range envs {
			e.tick()
		}
	}
	if !cond() {
		t.Fatalf("not within 1s of watching: %s", what)
	}
}

type envOption func(*Config)

// newEnv starts a proxy in front of a fake upstream served over TLS, as
// every real backend is: a connection's end, a reset and a handshake then
// look to rotor as they will in use (newEnvWith with peerConfig.tls unset
// is the plain HTTP of a local upstream).
func newEnv(t testing.TB, accts []acct, opts ...envOption) *env {
	t.Helper()
	return newEnvWith(t, accts, peerConfig{seed: 1, tls: true}, opts...)
}

// newEnvLogged is newEnv with the proxy's log written to w, set before it
// serves (a logger swapped in later would race with the server).
func newEnvLogged(t testing.TB, accts []acct, w io.Writer, opts ...envOption) *env {
	t.Helper()
	return newEnvWith(t, accts, peerConfig{seed: 1, log: w, tls: true}, opts...)
}

func newEnvWith(t testing.TB, accts []acct, pc peerConfig, opts ...envOption) *env {
	t.Helper()
	up := upstreamtest.New("../testdata")
	up.SetIdleTimeout(pc.upstreamIdle)
	start := up.Start
	if pc.tls {
		start = up.StartTLS
	}
	if err := start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	dir := t.TempDir()
	st, err := accounts.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.Open(dir, "file", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Update(func(p *accounts.Pool) error {
		for i, a := range accts {
			var idx int
			if a.kind == accounts.KindAPIKey {
				idx = p.AddAPIKey("acct"+string(rune('1'+i)), "", time.Now())
			} else {
				idx, _ = p.UpsertChatGPT(accounts.Identity{Email: a.token + "@example.com", ChatGPTAccountID: "cg-" + a.token, PlanType: "plus"}, "", time.Now())
			}
			s := secrets.Secret{APIKey: a.token}
			if a.kind == accounts.KindChatGPT {
				s = secrets.Secret{AccessToken: a.token, RefreshToken: "r-" + a.token}
			}
			if err := sec.Set(p.At(idx).ID, s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return startProxy(t, up, dir, pc, opts...)
}

// startProxy starts a proxy on the ROTOR_HOME dir in front of up, wired as
// `rotor serve` wires it: its own store handle, secrets, runtime state,
// selector and usage log. It is shut down when the test ends.
func startProxy(t testing.TB, up *upstreamtest.Server, dir string, pc peerConfig, opts ...envOption) *env {
	t.Helper()
	var ticks *clocktest.Fake
	if pc.clock == nil {
		ticks = clocktest.Real()
		pc.clock = ticks
	}
	st, err := accounts.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.Open(dir, "file", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := st.Load()
	if err != nil {
		t.Fatal(err)
	}
	// A state.json that cannot be read is advisory, as in serve: the
	// selector starts from empty state.
	sel, _ := rotation.Open(dir, pool, pc.clock, pc.seed)
	usageLog, err := usage.OpenWith(dir, usage.Options{Clock: pc.clock})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{ClientKey: testKey, ChatGPTBase: up.ChatGPTBase(), OpenAIBase: up.OpenAIBase()}
	if !pc.systemRoots {
		cfg.RootCAs = up.RootCAs()
	}
	for _, o := range opts {
		o(&cfg)
	}
	sel.SetEndpointOf(NewAdapters(cfg.ChatGPTBase, cfg.OpenAIBase).WithEnvProxy(cfg.EnvProxy).Endpoint) // as serve wires it
	live := followAliases(t, dir)
	log := zerolog.Nop()
	if pc.log != nil {
		log = zerolog.New(pc.log)
	}
	var src SecretSource = sec
	if pc.secrets != nil {
		src = pc.secrets(sec)
	}
	var sink UsageSink = usageLog
	if pc.usage != nil {
		sink = pc.usage(usageLog)
	}
	deps := Deps{Selector: sel, Secrets: src, Flagger: st, Usage: sink, Clock: pc.clock, Log: log,
		Refresher: pc.refresher, Adopter: pc.adopter, Aliases: live}
	srv, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen("127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		usageLog.Close()
	})
	return &env{t: t, up: up, store: st, sel: sel, srv: srv, base: "http://" + ln.Addr().String(), pool: pool, usage: usageLog, ticks: ticks,
		aliases: live}
}

// followAliases is the model aliases of the home dir as serve follows
// them, read once.
func followAliases(t testing.TB, dir string) *aliases.Live {
	t.Helper()
	st, err := aliases.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	live, err := aliases.Follow(st)
	if err != nil {
		t.Fatal(err)
	}
	return live
}

// newBenchEnv is a one-account (API key "k1") env for benchmarks; edit
// changes the pool before the proxy uses it.
func newBenchEnv(b *testing.B, edit ...func(*accounts.Pool)) *env {
	// Plain HTTP, as make bench-load's default: the benchmarks time
	// rotor's own work, and post to the fake directly too.
	e := newEnvWith(b, []acct{{accounts.KindAPIKey, "k1"}}, peerConfig{seed: 1})
	if len(edit) > 0 {
		p, err := e.store.Update(func(p *accounts.Pool) error {
			for _, f := range edit {
				f(p)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		e.pool = p
		e.sel.SetPool(p)
	}
	return e
}

// id returns the account id at a 1-based index.
func (e *env) id(i int) string { return e.pool.At(i).ID }

// do sends a request with the client key and returns the response; the
// test client is net/http, independent of the proxy's fasthttp.
func (e *env) do(method, path, body string, hdr ...string) *http.Response {
	e.t.Helper()
	return e.doAs(testKey, method, path, body, hdr...)
}

// doAs sends a request with bearer as its credential (none when empty),
// as do does with the client key.
func (e *env) doAs(bearer, method, path, body string, hdr ...string) *http.Response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.base+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := testClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp
}

var testClient = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableCompression: true}}

const streamBody = `{"model":"gpt-5","stream":true,"input":"hi"}`

// readAll reads a whole (bounded, test-sized) answer.
func readAll(t *testing.T, r *http.Response) string {
	t.Helper()
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return string(b)
}

// apiError is the error object of a proxy-made answer.
type apiError struct {
	Message   string         `json:"message"`
	Type      string         `json:"type"`
	Code      string         `json:"code"`
	RequestID string         `json:"request_id"`
	Category  string         `json:"category"`
	Retryable bool           `json:"retryable"`
	Extra     map[string]any `json:"-"`
}

// decodeError parses an error answer, keeping every field of the error
// object in Extra as well.
func decodeError(t *testing.T, r *http.Response) apiError {
	t.Helper()
	body := readAll(t, r)
	var wrap struct {
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &wrap); err != nil || wrap.Error == nil {
		t.Fatalf("not an error payload (status %d): %s", r.StatusCode, body)
	}
	var e apiError
	json.Unmarshal(wrap.Error, &e)
	json.Unmarshal(wrap.Error, &e.Extra)
	return e
}

// sseEvents reads an SSE body into its event types.
func sseEvents(t *testing.T, r io.Reader) []string {
	t.Helper()
	var types []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			types = append(types, v)
		}
	}
	return types
}

// eventually polls cond for up to limit.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rawRequest writes raw bytes to the proxy and returns the status line and
// the rest, for requests net/http will not send (absolute-form targets).
func (e *env) rawRequest(raw string) string {
	e.t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(e.base, "http://"), 5*time.Second)
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		e.t.Fatal(err)
	}
	b, _ := io.ReadAll(io.LimitReader(c, 1<<20))
	return string(b)
}
