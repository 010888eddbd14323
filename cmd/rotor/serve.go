package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/aliases"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/accounts/netproxy"
	"github.com/rotorproxy/rotor/accounts/prices"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy"
	"github.com/rotorproxy/rotor/proxy/dashboard"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// proxyOptions are the flags serve and exec share.
type proxyOptions struct {
	host         string
	port         int
	account      string
	maxBody      int
	maxAttempts  int
	stallTimeout time.Duration
	respTimeout  time.Duration
	logFormat    string
	logLevel     string
	stableKey    bool // serve on the home's stable client key, and follow its rotations
	credits      string
}

func (o *proxyOptions) register(fs *flag.FlagSet, serve bool) {
	if serve {
		fs.StringVar(&o.host, "host", "127.0.0.1", "listen on the loopback address `H` (127.0.0.0/8, ::1 or localhost)")
		o.port = home.DefaultPort
		fs.Var((*portValue)(&o.port), "port", "listen on port `P` (0 picks a free one)")
		fs.BoolVar(&o.stableKey, "stable-key", false, "use the home's stable client key (\"rotor key\" prints it) instead of a fresh one, and follow \"rotor key rotate\"")
	}
	fs.StringVar(&o.account, "account", "", "use only account `SEL` (index, id, label or email) in this process")
	fs.IntVar(&o.maxBody, "max-body", proxy.DefaultMaxBody, "largest request body accepted, in bytes")
	fs.IntVar(&o.maxAttempts, "max-attempts", proxy.DefaultMaxAttempts, "most accounts tried for one request")
	fs.DurationVar(&o.stallTimeout, "stall-timeout", proxy.DefaultStallTimeout, "cut a stream after this long without a byte")
	fs.DurationVar(&o.respTimeout, "response-timeout", proxy.DefaultResponseTimeout, "wait this long for an upstream answer to start")
	fs.StringVar(&o.credits, "credits", "", "spend accounts' credits under `POLICY`: last-resort (only when no account has included quota left), never, or spend (credits count as quota) (default last-resort, or ROTOR_CREDITS)")
	fs.StringVar(&o.logFormat, "log-format", "auto", "auto, json or console")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
}

// portValue is --port: a TCP port number, 0 for any free one.
type portValue int

func (p *portValue) String() string { return strconv.Itoa(int(*p)) }

func (p *portValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 65535 {
		return errors.New("want a port number from 1 to 65535, or 0 for any free port")
	}
	*p = portValue(n)
	return nil
}

// listenErr explains a failed listen. A busy port names the rotor serve on
// this home that holds it, when one does, and the way out (--port 0).
func listenErr(err error, dir, host string, port int) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	msg := fmt.Sprintf("Port %d on %s is already in use by another program.", port, host)
	if in, ok := home.Holder(dir, port); ok {
		msg = fmt.Sprintf("Port %d on %s is already in use by rotor serve (pid %d, up since %s, %s); use it (eval \"$(rotor env)\") or stop it.",
			port, host, in.PID, in.StartedAt.Local().Format("2006-01-02 15:04"), in.URL)
	}
	return rerr.Validation("port", msg+" To run another proxy, pick a free port with --port 0.")
}

// running is a proxy serving in this process.
type running struct {
	url     string
	key     string
	home    string
	srv     *proxy.Server
	pages   *dashboard.Dashboard
	sec     secrets.Store
	clock   clock.Clock
	cancel  context.CancelFunc
	watched sync.WaitGroup
	served  chan error
	usage   *usage.Log
	log     zerolog.Logger
	once    sync.Once
	err     error
}

// startProxy wires the store, secrets, runtime state and selector to a
// proxy listening on loopback, and starts serving.
func (a *app) startProxy(o proxyOptions, logOut io.Writer) (*running, error) {
	if err := proxy.CheckHost(o.host); err != nil {
		return nil, err
	}
	log, err := newLogger(logOut, o.logFormat, o.logLevel)
	if err != nil {
		return nil, err
	}
	log.Debug().Int("gogc", tuneCollector(a.getenv)).Msg("collector goal")
	credits, err := a.creditsPolicy(o.credits)
	if err != nil {
		return nil, err
	}
	st, sec, err := a.storeAndSecrets()
	if err != nil {
		return nil, err
	}
	key, err := a.clientKey(sec, o.stableKey)
	if err != nil {
		return nil, err
	}
	a.warnExposedSecrets(st.Dir())
	h, err := a.openServeHome(st, sec, o.account, log)
	if err != nil {
		return nil, err
	}
	h.sel.SetCredits(credits)
	if credits != rotation.CreditsLastResort {
		log.Info().Str("credits", string(credits)).Msg("credits policy")
	}
	srv, pages, err := a.newServer(o, key, h, log)
	if err != nil {
		h.usage.Close()
		return nil, err
	}
	ln, err := proxy.Listen(o.host, o.port)
	if err != nil {
		h.usage.Close()
		return nil, listenErr(err, st.Dir(), o.host, o.port)
	}
	for _, err := range netproxy.EnvProblems(a.getenv) {
		log.Warn().Err(err).Msg("outbound proxy ignored")
	}
	if !slices.ContainsFunc(h.pool.Accounts, func(a accounts.Account) bool { return a.Enabled }) {
		log.Warn().Msg(`no enabled account: requests get 503 until you add one ("rotor login", "rotor import codex" or "rotor add-key")`)
	}
	r := h.serve(srv, ln, key, log)
	r.pages = pages
	return r, nil
}

// creditsPolicy is the credits policy (docs/selection.md): --credits, else
// ROTOR_CREDITS, else last-resort.
func (a *app) creditsPolicy(flagValue string) (rotation.CreditsPolicy, error) {
	name, v := "--credits", flagValue
	if v == "" {
		name, v = "ROTOR_CREDITS", a.getenv("ROTOR_CREDITS")
	}
	p, err := rotation.ParseCreditsPolicy(v)
	if err != nil {
		return "", rerr.Validation(name, name+": "+err.Error())
	}
	return p, nil
}

// clientKey is the key clients must present: the home's stable key in
// sec when stable (--stable-key), else ROTOR_CLIENT_KEY, else a random one
// for this serve alone. Both ways of naming a lasting key at once is
// refused: which one a client should keep would be a guess.
func (a *app) clientKey(sec secrets.Store, stable bool) (string, error) {
	key := a.getenv("ROTOR_CLIENT_KEY")
	switch {
	case stable && key != "":
		return "", rerr.Validation("ROTOR_CLIENT_KEY", "--stable-key and ROTOR_CLIENT_KEY both set the client key: unset ROTOR_CLIENT_KEY, or drop --stable-key")
	case stable:
		return sec.ClientKey()
	case key == "":
		return secrets.NewClientKey(), nil
	case len(key) < proxy.MinClientKeyLen:
		return "", rerr.Validation("ROTOR_CLIENT_KEY", fmt.Sprintf("ROTOR_CLIENT_KEY must be at least %d characters", proxy.MinClientKeyLen))
	}
	return key, nil
}

// serveHome is what a serve opens of its ROTOR_HOME: the store and the
// secrets, the pool, a selector over it on the shared runtime state, and
// the usage log, all telling time by one clock.
type serveHome struct {
	st      *accounts.Store
	sec     secrets.Store
	pool    *accounts.Pool
	sel     *rotation.Selector
	usage   *usage.Log
	clock   clock.Clock
	aliases *aliases.Live
	// prices price the usage in /metrics and on the dashboard (docs/cost.md),
	// read once at the start.
	prices *prices.Table
}

// openServeHome loads st's pool, opens the selector over the shared
// runtime state (with a random seed, so parallel proxies spread, docs/selection.md)
// and the usage log, and pins the process to account when it is set
// (--account). A state.json that cannot be read is only warned about: the
// proxy starts from fresh state.
func (a *app) openServeHome(st *accounts.Store, sec secrets.Store, account string, log zerolog.Logger) (*serveHome, error) {
	h := &serveHome{st: st, sec: sec, clock: a.clockOrSystem()}
	var seed [8]byte
	rand.Read(seed[:])
	var err error
	if h.pool, err = st.Load(); err != nil {
		return nil, err
	}
	sel, stateErr := rotation.Open(st.Dir(), h.pool, h.clock, binary.LittleEndian.Uint64(seed[:]))
	sel.SetEndpointOf(a.adapters().Endpoint)
	h.sel = sel
	if h.usage, err = usage.OpenWith(st.Dir(), usage.Options{Clock: h.clock}); err != nil {
		return nil, err
	}
	if stateErr != nil {
		log.Warn().Err(stateErr).Msg("cannot read shared state; starting fresh")
	}
	if h.aliases, err = openAliases(st.Dir()); err != nil {
		h.usage.Close()
		return nil, err
	}
	h.prices = openPrices(st.Dir(), log)
	if account != "" {
		i, err := h.pool.Resolve(account)
		if err != nil {
			h.usage.Close()
			return nil, err
		}
		h.sel.SetProcessPin(h.pool.At(i).ID)
	}
	return h, nil
}

// openAliases follows the model aliases of the home dir. A damaged
// aliases.json does not stop the serve: the watcher's first look, at
// once, reports it, and the serve runs without aliases until it is
// mended.
func openAliases(dir string) (*aliases.Live, error) {
	st, err := aliases.Open(dir)
	if err != nil {
		return nil, err
	}
	live, _ := aliases.Follow(st)
	return live, nil
}

// openPrices is the price table of the home dir. A damaged prices.json
// does not stop the serve: it is logged (rotor doctor names it too), and
// the shipped prices stand in until a serve starts with it mended.
func openPrices(dir string, log zerolog.Logger) *prices.Table {
	tab, err := prices.Load(dir)
	if err != nil {
		log.Warn().Err(err).Msg("cannot read prices.json; pricing usage with the shipped prices")
		return prices.Shipped()
	}
	return tab
}

// newServer builds the proxy over h, configured by o and guarded by key,
// with its token refresh (which flags an account whose refresh token is
// dead) and its dashboard, which it returns too: a serve on the stable
// key hands both a rotated key.
func (a *app) newServer(o proxyOptions, key string, h *serveHome, log zerolog.Logger) (*proxy.Server, *dashboard.Dashboard, error) {
	deps := proxy.Deps{Selector: h.sel, Secrets: h.sec, Flagger: h.st, Usage: h.usage, Clock: h.clock, Log: log}
	refresher := newRefresher(a, h.st.Dir(), h.sec, func(id, reason string) error {
		_, err := h.st.Flag(id, reason, false)
		return err
	})
	deps.Refresher, deps.Adopter = refresher, refresher
	pages := dashboard.New(dashboard.Config{ClientKey: key, Pool: h.sel, Store: h.st, Clock: h.clock, Log: log,
		Usage: dashboard.NewUsage(usage.NewTail(h.st.Dir()), 2*time.Second, h.prices)})
	deps.Pages = pages
	deps.Aliases = h.aliases
	deps.Prices = h.prices
	var err error
	if deps.IdentityKey, err = home.IdentityKey(h.st.Dir()); err != nil {
		// Not fatal: each account is then shown an id of this process.
		log.Warn().Err(err).Msg("cannot read or make the identity key; accounts are shown ids of this serve alone")
	}
	srv, err := proxy.New(proxy.Config{
		ClientKey:       key,
		MaxBody:         o.maxBody,
		MaxAttempts:     o.maxAttempts,
		StallTimeout:    o.stallTimeout,
		ResponseTimeout: o.respTimeout,
		ChatGPTBase:     strings.TrimRight(a.getenv("ROTOR_CHATGPT_BASE_URL"), "/"),
		OpenAIBase:      strings.TrimRight(a.getenv("ROTOR_OPENAI_BASE_URL"), "/"),
		EnvProxy:        a.envProxy(),
	}, deps)
	return srv, pages, err
}

// serve starts srv on ln, and a watcher that brings other rotor
// processes' news into h's selector, and returns them as one running
// proxy, which stop ends.
func (h *serveHome) serve(srv *proxy.Server, ln net.Listener, key string, log zerolog.Logger) *running {
	r := &running{
		url:    "http://" + ln.Addr().(*net.TCPAddr).String() + "/v1",
		key:    key,
		home:   h.st.Dir(),
		srv:    srv,
		sec:    h.sec,
		clock:  h.clock,
		served: make(chan error, 1),
		usage:  h.usage,
		log:    log,
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.watched.Add(1)
	go func() {
		defer r.watched.Done()
		rotation.Watch(ctx, h.st, h.sel, rotation.WatchInterval, func(err error) {
			if err == nil {
				log.Info().Msg("in sync with ROTOR_HOME again")
				return
			}
			log.Warn().Err(err).Msg("cannot sync with ROTOR_HOME")
		}, h.aliases.Refresh)
	}()
	r.watched.Go(func() {
		// What each account has used, read from its backend (docs/selection.md);
		// the serves on the home take turns and share what they read.
		srv.ReadUsage(ctx, filepath.Join(h.st.Dir(), home.UsageReadLock), func() { h.sel.Runtime().Sync(nil) })
	})
	go func() { r.served <- srv.Serve(ln) }()
	return r
}

// followKey keeps r on the home's stable key until r stops, rewriting
// the serve's record in from each new key.
func (r *running) followKey(in home.Info) {
	f := &keyFollower{sec: r.sec, srv: r.srv, pages: r.pages, log: r.log, record: func(key string) error {
		in.ClientKey = key
		return home.WriteInfo(r.home, in)
	}}
	ctx, cancel := context.WithCancel(context.Background())
	stopWatch := r.cancel
	r.cancel = func() { cancel(); stopWatch() }
	r.watched.Go(func() { f.run(ctx, r.clock, r.key) })
}

// stop drains in-flight requests (at most proxy.DrainTimeout), then
// persists the runtime state. Calling it again returns the first result.
func (r *running) stop() error {
	r.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), proxy.DrainTimeout)
		defer cancel()
		r.err = r.srv.Shutdown(ctx)
		if serr := <-r.served; r.err == nil {
			r.err = serr
		}
		r.cancel()
		r.watched.Wait()
		r.usage.Close()
	})
	return r.err
}

func newLogger(w io.Writer, format, level string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Logger{}, rerr.Validation("log-level", "Invalid --log-level: "+level+" (debug, info, warn, error)")
	}
	switch format {
	case "auto":
		if f, ok := w.(*os.File); ok && isTerminal(f) {
			w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
		}
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: true}
	case "json":
	default:
		return zerolog.Logger{}, rerr.Validation("log-format", "Invalid --log-format: "+format+" (auto, json, console)")
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// serveGCPercent is the collector's goal for a process that proxies
// (serve, exec), half the runtime's default. Each client connection holds a 72 KiB read buffer (for the
// 64 KiB of headers docs/service.md's limits accept), of which a page or
// two is ever touched: it costs no memory, but the pacer counts it as live
// heap, so with the default goal a serve with a thousand streams let
// garbage (a TLS handshake's, above all) pile up, resident, to the size of
// all those buffers again before it collected. At 50, 1000 streams over
// TLS peak at the floor's RSS instead of 1.2-1.4 times it, for no CPU the
// bench can see; the price is a later first byte when a thousand streams
// start at once over plain HTTP (docs/PERFORMANCE.md, "The collector's
// goal").
const serveGCPercent = 50

// tuneCollector sets serveGCPercent unless GOGC says otherwise (a user's
// own setting wins), and returns the goal the runtime then has.
func tuneCollector(getenv func(string) string) int {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(serveGCPercent)
	}
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(int64(s[0].Value.Uint64())) // GOGC=off reads as -1
}

func cmdServe(a *app, args []string) error {
	fs := a.flags()
	var o proxyOptions
	o.register(fs, true)
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return rerr.Validation("args", "Unexpected argument: "+pos[0]+". Usage: rotor serve [--host H] [--port P] [--account SEL]")
	}
	// Signals are caught before anything is started, so a stop that comes
	// at once still drains and removes the record. A closed stdout or
	// stderr (rotor serve | head) must not stop serve: with SIGPIPE
	// ignored, a write there fails and is dropped instead. SIGHUP too is a
	// graceful stop: closing the terminal must not cut streams or leave a
	// stale record behind.
	signal.Ignore(syscall.SIGPIPE)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	r, err := a.startProxy(o, a.stderr)
	if err != nil {
		return err
	}
	pid := os.Getpid()
	info := home.Info{URL: r.url, PID: pid, ClientKey: r.key, StartedAt: a.now().UTC()}
	if err := home.WriteInfo(r.home, info); err != nil {
		r.stop()
		return err
	}
	if o.stableKey {
		r.followKey(info)
	}
	fmt.Fprintf(a.stdout, "rotor proxy listening on %s\n", r.url)
	fmt.Fprintf(a.stdout, "client key: in %s (run: eval \"$(rotor env)\")\n", filepath.Join(r.home, home.RecordName(pid)))
	fmt.Fprintf(a.stdout, "dashboard: %s/ (run: rotor dashboard --open)\n", strings.TrimSuffix(r.url, "/v1"))
	select {
	case <-sigs:
	case err := <-r.served:
		r.served <- err // stop reads it
	}
	fmt.Fprintln(a.stderr, "rotor: shutting down, letting in-flight requests finish (up to 30s)")
	err = r.stop()
	home.RemoveInfo(r.home, pid)
	return err
}

func cmdEnv(a *app, args []string) error {
	if _, err := a.parse(a.flags(), args); err != nil {
		return err
	}
	_, in, err := a.liveServe()
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "export OPENAI_BASE_URL=%s\nexport OPENAI_API_KEY=%s\n", in.URL, in.ClientKey)
	return nil
}

// liveServe is the record of a running serve on this home, the default
// port's first: with several serves on one home each keeps its own.
func (a *app) liveServe() (dir string, in home.Info, err error) {
	if dir, err = a.home(); err != nil {
		return "", in, err
	}
	if in, err = home.LiveInfo(dir); err != nil {
		var damaged *home.DamagedRecordsError
		if errors.As(err, &damaged) {
			return dir, in, rerr.NotFound("No running proxy found in " + dir + ": " + damaged.Error() +
				". Run \"rotor fix\" to remove what cannot be read, then start one with \"rotor serve\" if none runs.")
		}
		return dir, in, rerr.NotFound("No running proxy found in " + dir + ". Start one with \"rotor serve\".")
	}
	return dir, in, nil
}
