// Package proxy is rotor's loopback, OpenAI-compatible proxy (docs/selection.md): it
// checks who is calling, picks an account, forwards Responses calls to that
// account's upstream, streams the answer back as it arrives, fails over
// before the first byte when an account cannot serve, and turns every
// failure into a stable error payload.
package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/aliases"
	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/netproxy"
	"github.com/rotorproxy/rotor/accounts/prices"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/backend"
	"github.com/rotorproxy/rotor/proxy/metrics"
	"github.com/rotorproxy/rotor/proxy/upstream"
	"github.com/rotorproxy/rotor/proxy/websocket"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// Defaults of docs/selection.md.
const (
	DefaultMaxBody        = 64 << 20
	DefaultMaxAttempts    = 4
	DefaultStallTimeout   = 45 * time.Second
	DefaultConnectTimeout = 10 * time.Second
	// DefaultResponseTimeout bounds the wait for an upstream's first
	// response byte. It is long because a non-streamed answer with high
	// reasoning effort only starts once it is complete.
	DefaultResponseTimeout = 10 * time.Minute
	// DefaultMaxUpstreamConns is how many connections rotor keeps open to
	// one upstream host: every stream holds one for its whole length, and
	// docs/selection.md asks for 2,000 concurrent streams on one serve.
	DefaultMaxUpstreamConns = 8192
	// DefaultConnWait bounds how long a request waits for a free upstream
	// connection once DefaultMaxUpstreamConns are busy, before it is told
	// rotor is overloaded.
	DefaultConnWait = 10 * time.Second
	// MaxHeaderBytes is the largest request header block served (docs/selection.md);
	// a larger one gets 431.
	MaxHeaderBytes = 64 << 10
	DrainTimeout   = 30 * time.Second
	// DefaultChatGPTBase and DefaultOpenAIBase are the upstream bases when
	// ROTOR_CHATGPT_BASE_URL / ROTOR_OPENAI_BASE_URL are not set (docs/files.md).
	DefaultChatGPTBase = "https://chatgpt.com/backend-api"
	DefaultOpenAIBase  = "https://api.openai.com/v1"
)

// Config holds the proxy's settings. Zero values take the defaults.
type Config struct {
	// ClientKey is the key clients must present (Bearer or x-api-key),
	// until SetClientKey replaces it.
	ClientKey   string
	MaxBody     int
	MaxAttempts int
	// StallTimeout cuts a started answer after this long without a byte.
	StallTimeout time.Duration
	// ResponseTimeout bounds the wait for the first byte of an upstream's
	// answer; it is not the stall timeout.
	ResponseTimeout time.Duration
	// ConnectTimeout bounds dialing an upstream.
	ConnectTimeout time.Duration
	// MaxUpstreamConns caps the connections to one upstream host; a
	// request that finds none free, or finds the most connects upstream
	// runs at once already in flight, waits up to ConnWait.
	MaxUpstreamConns int
	ConnWait         time.Duration
	// ChatGPTBase and OpenAIBase are the upstream bases of the two account
	// kinds (ROTOR_CHATGPT_BASE_URL, ROTOR_OPENAI_BASE_URL).
	ChatGPTBase string
	OpenAIBase  string
	// EnvProxy is the environment's proxy rule (netproxy.FromEnv), read
	// once at start; nil connects straight unless an account has its own
	// proxy (docs/service.md).
	EnvProxy netproxy.Func
	// RootCAs are the authorities an upstream's TLS certificate is checked
	// against; nil: the system's. Tests trust a fake upstream with it.
	RootCAs *x509.CertPool
}

func (c *Config) defaults() {
	if c.MaxBody <= 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.ResponseTimeout <= 0 {
		c.ResponseTimeout = DefaultResponseTimeout
	}
	if c.MaxUpstreamConns <= 0 {
		c.MaxUpstreamConns = DefaultMaxUpstreamConns
	}
	if c.ConnWait <= 0 {
		c.ConnWait = DefaultConnWait
	}
	if c.ChatGPTBase == "" {
		c.ChatGPTBase = DefaultChatGPTBase
	}
	if c.OpenAIBase == "" {
		c.OpenAIBase = DefaultOpenAIBase
	}
}

// upstreamOptions are the options of the upstream clients c asks for.
func upstreamOptions(c *Config) upstream.Options {
	return upstream.Options{
		ConnectTimeout:  c.ConnectTimeout,
		ResponseTimeout: c.ResponseTimeout,
		StallTimeout:    c.StallTimeout,
		MaxConns:        c.MaxUpstreamConns,
		ConnWait:        c.ConnWait,
		RootCAs:         c.RootCAs,
	}
}

// SecretSource gives the proxy an account's current secret.
type SecretSource interface {
	Get(id string) (secrets.Secret, error)
}

// Refresher renews a ChatGPT account's tokens after a 401 or before expiry;
// stale is the secret that failed or is expiring. It returns the new
// secret, or a typed AUTH_REFRESH_FAILED error.
type Refresher interface {
	Refresh(ctx context.Context, a accounts.Account, stale secrets.Secret) (secrets.Secret, error)
}

// Flagger records what the proxy learns about an account that must outlive
// the process and reach the other rotor processes through accounts.json:
// a flag, and whether the account stays enabled.
type Flagger interface {
	Flag(id, reason string, disable bool) (*accounts.Pool, error)
}

// UsageSink receives one record per finished request.
type UsageSink interface {
	Append(rec usage.Record)
}

// Deps are the proxy's collaborators.
type Deps struct {
	Selector  *rotation.Selector
	Secrets   SecretSource
	Refresher Refresher // may be nil: a 401 then only cools the account down
	Flagger   Flagger   // may be nil in tests
	Usage     UsageSink // may be nil
	Clock     clock.Clock
	Log       zerolog.Logger
	// Pages serves the dashboard (docs/dashboard.md); nil serves none.
	Pages Pages
	// Aliases are the model aliases in force (docs/aliases.md); nil: none.
	Aliases *aliases.Live
	// Adopter takes over tokens Codex refreshed itself in a linked
	// auth.json, so Codex signed in is let in with them (docs/codex.md); nil:
	// only the tokens rotor holds are.
	Adopter Adopter
	// IdentityKey is the home's secret each account's installation id is
	// derived from (home.IdentityKey); nil: a key of this process.
	IdentityKey []byte
	// Prices price every finished request's usage in /metrics (docs/cost.md);
	// nil: the prices shipped in the binary.
	Prices *prices.Table
}

// Pages answers the dashboard's paths: the only ones that do not take the
// client key. They still pass the Host and Origin checks first.
type Pages interface {
	// Owns reports whether path is one of its paths.
	Owns(path []byte) bool
	// ServePage answers a request for one of its paths.
	ServePage(ctx *fasthttp.RequestCtx)
	// Session reports whether ctx carries a live dashboard session: the
	// page's own paths take it, and so does /metrics in place of the key.
	Session(ctx *fasthttp.RequestCtx) bool
}

// Server is a running proxy.
type Server struct {
	cfg  Config
	deps Deps
	// keyDigest is the SHA-256 of the client key. It is swapped whole
	// (SetClientKey), so a request checks against one key or the other,
	// never a mix, with one atomic load on the hot path.
	keyDigest   atomic.Pointer[[sha256.Size]byte]
	exits       *upstream.Exits
	srv         *fasthttp.Server
	secrets     *secretCache
	endpoints   *upstream.Endpoints
	adapters    *Adapters
	sockets     websocket.Set
	quiet       quietConns
	noSockets   websocket.NoSockets // endpoints that refused a WebSocket upgrade
	mints       backend.Mints       // who minted each account-bound blob relayed (docs/codex.md)
	identities  backend.Identities  // the installation id each account is shown (docs/codex.md)
	compactions backend.Compactions // the requests behind the compactions relayed (docs/codex.md)
	tokens      backend.Tokens      // the pool's access tokens Codex signed in may send (docs/codex.md)
	metrics     *metrics.Metrics
	costs       *metrics.Costs // the dollars in /metrics (docs/cost.md)
}

// New returns a proxy with cfg and deps. It does not listen yet.
func New(cfg Config, deps Deps) (*Server, error) {
	cfg.defaults()
	if err := checkClientKey(cfg.ClientKey); err != nil {
		return nil, err
	}
	if deps.Clock == nil {
		deps.Clock = clock.System{}
	}
	s := &Server{
		cfg:       cfg,
		deps:      deps,
		secrets:   newSecretCache(deps.Secrets, deps.Clock),
		endpoints: upstream.NewEndpoints(deps.Selector.Runtime(), cfg.EnvProxy),
		adapters:  NewAdapters(cfg.ChatGPTBase, cfg.OpenAIBase),
	}
	s.identities = backend.NewIdentities(deps.IdentityKey)
	s.metrics = metrics.New(deps.Selector, s.sockets.Count, failoverOutcomes())
	s.costs = metrics.NewCosts(deps.Prices, deps.Selector, s.metrics.Registry(),
		func(k accounts.Kind) string { return s.adapters.For(k).meter() })
	s.setKey(cfg.ClientKey)
	s.exits = upstream.NewExits(upstreamOptions(&s.cfg))
	s.srv = &fasthttp.Server{
		Handler:            s.handle,
		ErrorHandler:       s.handleParseError,
		Name:               "rotor",
		MaxRequestBodySize: cfg.MaxBody,
		// The handler runs once the headers are in, so the guard refuses a
		// stranger before a byte of the body is read; the handler reads
		// the body itself, bounded by MaxBody.
		StreamRequestBody: true,
		// The whole header block must fit the read buffer: headers up to
		// MaxHeaderBytes are served, larger ones get 431.
		ReadBufferSize: MaxHeaderBytes + 8<<10,
		// ReadTimeout bounds reading a request; there is deliberately no
		// WriteTimeout, which would cap a whole stream rather than a gap.
		ReadTimeout:                   2 * time.Minute,
		IdleTimeout:                   2 * time.Minute,
		NoDefaultServerHeader:         true,
		NoDefaultContentType:          true,
		DisablePreParseMultipartForm:  true,
		DisableHeaderNamesNormalizing: false,
		CloseOnShutdown:               true,
		Logger:                        fasthttpLogger{deps.Log},
	}
	return s, nil
}

// failoverOutcomes are the outcome labels of rotor_failovers_total by
// verdict: a row's name when it moves the request on, "" when not.
func failoverOutcomes() []string {
	names := make([]string, verdictCount)
	for v, row := range failover {
		if row.rotate {
			names[v] = row.name
		}
	}
	return names
}

// MinClientKeyLen is the shortest client key a Server takes (docs/files.md).
const MinClientKeyLen = 32

func checkClientKey(key string) error {
	if len(key) < MinClientKeyLen {
		return rerr.Validation("client_key", fmt.Sprintf("the client key must be at least %d characters", MinClientKeyLen))
	}
	return nil
}

// SetClientKey makes key the only one the Server accepts from now on: a
// request whose key is checked after SetClientKey returns is held to the
// new key, and the old one gets 401. It is how a serve on the stable key
// follows "rotor key rotate" without a restart. Requests already admitted
// (a stream, an open WebSocket) are not cut.
func (s *Server) SetClientKey(key string) error {
	if err := checkClientKey(key); err != nil {
		return err
	}
	s.setKey(key)
	return nil
}

func (s *Server) setKey(key string) {
	d := sha256.Sum256([]byte(key))
	s.keyDigest.Store(&d)
}

// Serve answers requests on ln until Shutdown. It returns nil after a clean
// shutdown.
func (s *Server) Serve(ln net.Listener) error {
	err := s.srv.Serve(retryListener{Listener: ln, log: s.deps.Log, quiet: &s.quiet})
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections and waits for in-flight requests,
// streams and WebSocket answers included, to finish, at most until ctx
// ends. Open WebSockets are closed with 1001 (going away).
func (s *Server) Shutdown(ctx context.Context) error {
	stop := s.quiet.closeUntil()
	err := s.srv.ShutdownWithContext(ctx)
	stop()
	// fasthttp has handed sockets over: each closes with 1001 once the
	// response it is answering has ended.
	err = errors.Join(err, s.sockets.Shutdown(ctx))
	s.exits.CloseIdle()
	return err
}

// Listen opens the loopback listener for host:port, refusing any host that
// is not a loopback literal or localhost (docs/commands.md serve).
func Listen(host string, port int) (net.Listener, error) {
	if err := CheckHost(host); err != nil {
		return nil, err
	}
	if strings.EqualFold(host, "localhost") {
		host = "127.0.0.1"
	}
	return net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(port)))
}

// CheckHost refuses a host to listen on that is not loopback, with the one
// message serve shows for it, before anything else starts.
func CheckHost(host string) error {
	if !LoopbackHost(host) {
		return rerr.Validation("host", fmt.Sprintf("Refusing --host %s: rotor serves loopback only (127.0.0.0/8, ::1 or localhost).", host))
	}
	return nil
}

// LoopbackHost reports whether host is a loopback literal or localhost.
func LoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	// netip, not net.ParseIP: the same answer for every host (a zone
	// is none), without allocating the address; every request asks.
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Zone() == "" && ip.IsLoopback()
}

// retryListener keeps accepting through errors that pass, such as running
// out of file descriptors: fasthttp treats every accept error but a
// timeout as fatal, which would let any local process stop serve by
// opening connections. It backs off like net/http, up to a second, and
// logs each error at warn.
type retryListener struct {
	net.Listener
	log   zerolog.Logger
	quiet *quietConns
}

func (l retryListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			return l.quiet.add(c), nil
		}
		if errors.Is(err, net.ErrClosed) {
			return c, err
		}
		delay = min(max(2*delay, 5*time.Millisecond), time.Second)
		l.log.Warn().Err(err).Dur("retry_in", delay).Msg("cannot accept a connection; retrying")
		time.Sleep(delay)
	}
}

type fasthttpLogger struct{ l zerolog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	f.l.Debug().Msgf(format, args...)
}
