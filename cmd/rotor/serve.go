package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/home"
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
}

func (o *proxyOptions) register(fs *flag.FlagSet, serve bool) {
	if serve {
		fs.StringVar(&o.host, "host", "127.0.0.1", "listen on the loopback address `H` (127.0.0.0/8, ::1 or localhost)")
		o.port = home.DefaultPort
		fs.Var((*portValue)(&o.port), "port", "listen on port `P` (0 picks a free one)")
	}
	fs.StringVar(&o.account, "account", "", "use only account `SEL` (index, id, label or email) in this process")
	fs.IntVar(&o.maxBody, "max-body", proxy.DefaultMaxBody, "largest request body accepted, in bytes")
	fs.IntVar(&o.maxAttempts, "max-attempts", proxy.DefaultMaxAttempts, "most accounts tried for one request")
	fs.DurationVar(&o.stallTimeout, "stall-timeout", proxy.DefaultStallTimeout, "cut a stream after this long without a byte")
	fs.DurationVar(&o.respTimeout, "response-timeout", proxy.DefaultResponseTimeout, "wait this long for an upstream answer to start")
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
	cancel  context.CancelFunc
	watched sync.WaitGroup
	served  chan error
	usage   *usage.Log
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
	st, sec, err := a.storeAndSecrets()
	if err != nil {
		return nil, err
	}
	key := a.getenv("ROTOR_CLIENT_KEY")
	if key == "" {
		var b [32]byte
		rand.Read(b[:])
		key = hex.EncodeToString(b[:])
	} else if len(key) < 32 {
		return nil, rerr.Validation("ROTOR_CLIENT_KEY", "ROTOR_CLIENT_KEY must be at least 32 characters")
	}
	a.warnExposedSecrets(st.Dir())
	clock := a.clockOrSystem()
	var seed [8]byte
	rand.Read(seed[:])
	pool, err := st.Load()
	if err != nil {
		return nil, err
	}
	sel, stateErr := rotation.Open(st.Dir(), pool, clock, binary.LittleEndian.Uint64(seed[:]))
	usageLog, err := usage.OpenWith(st.Dir(), usage.Options{Clock: clock})
	if err != nil {
		return nil, err
	}
	if stateErr != nil {
		log.Warn().Err(stateErr).Msg("cannot read shared state; starting fresh")
	}
	if o.account != "" {
		i, err := pool.Resolve(o.account)
		if err != nil {
			usageLog.Close()
			return nil, err
		}
		sel.SetProcessPin(pool.At(i).ID)
	}
	deps := proxy.Deps{Selector: sel, Secrets: sec, Flagger: st, Usage: usageLog, Clock: clock, Log: log}
	deps.Refresher = newRefresher(a, st.Dir(), sec, func(id, reason string) error {
		_, err := st.Flag(id, reason, false)
		return err
	})
	deps.Pages = dashboard.New(dashboard.Config{ClientKey: key, Pool: sel, Store: st, Clock: clock, Log: log,
		Usage: dashboard.NewUsage(usage.NewTail(st.Dir()), 2*time.Second)})
	srv, err := proxy.New(proxy.Config{
		ClientKey:       key,
		MaxBody:         o.maxBody,
		MaxAttempts:     o.maxAttempts,
		StallTimeout:    o.stallTimeout,
		ResponseTimeout: o.respTimeout,
		ChatGPTBase:     strings.TrimRight(a.getenv("ROTOR_CHATGPT_BASE_URL"), "/"),
		OpenAIBase:      strings.TrimRight(a.getenv("ROTOR_OPENAI_BASE_URL"), "/"),
	}, deps)
	if err != nil {
		usageLog.Close()
		return nil, err
	}
	ln, err := proxy.Listen(o.host, o.port)
	if err != nil {
		usageLog.Close()
		return nil, listenErr(err, st.Dir(), o.host, o.port)
	}
	if !slices.ContainsFunc(pool.Accounts, func(a accounts.Account) bool { return a.Enabled }) {
		log.Warn().Msg(`no enabled account: requests get 503 until you add one ("rotor login", "rotor import codex" or "rotor add-key")`)
	}
	r := &running{
		url:    "http://" + ln.Addr().(*net.TCPAddr).String() + "/v1",
		key:    key,
		home:   st.Dir(),
		srv:    srv,
		served: make(chan error, 1),
		usage:  usageLog,
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.watched.Add(1)
	go func() {
		defer r.watched.Done()
		rotation.Watch(ctx, st, sel, rotation.WatchInterval, func(err error) {
			log.Warn().Err(err).Msg("cannot sync with ROTOR_HOME")
		})
	}()
	go func() { r.served <- srv.Serve(ln) }()
	return r, nil
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
	if err := home.WriteInfo(r.home, home.Info{URL: r.url, PID: pid, ClientKey: r.key, StartedAt: a.now().UTC()}); err != nil {
		r.stop()
		return err
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
		return dir, in, rerr.NotFound("No running proxy found in " + dir + ". Start one with \"rotor serve\".")
	}
	return dir, in, nil
}
