// Package proxy is rotor's loopback, OpenAI-compatible proxy (SPEC §4): it
// checks who is calling, picks an account, forwards Responses calls to that
// account's upstream, streams the answer back as it arrives, fails over
// before the first byte when an account cannot serve, and turns every
// failure into a stable error payload.
package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/rotation"
)

// Defaults of SPEC §4.
const (
	DefaultMaxBody        = 64 << 20
	DefaultMaxAttempts    = 4
	DefaultStallTimeout   = 45 * time.Second
	DefaultConnectTimeout = 10 * time.Second
	DrainTimeout          = 30 * time.Second
	// DefaultChatGPTBase and DefaultOpenAIBase are the upstream bases when
	// ROTOR_CHATGPT_BASE_URL / ROTOR_OPENAI_BASE_URL are not set (SPEC §2).
	DefaultChatGPTBase = "https://chatgpt.com/backend-api"
	DefaultOpenAIBase  = "https://api.openai.com/v1"
)

// Config holds the proxy's settings. Zero values take the defaults.
type Config struct {
	// ClientKey is the key clients must present (Bearer or x-api-key).
	ClientKey    string
	MaxBody      int
	MaxAttempts  int
	StallTimeout time.Duration
	// ConnectTimeout bounds dialing an upstream.
	ConnectTimeout time.Duration
	// ChatGPTBase and OpenAIBase are the upstream bases of the two account
	// kinds (ROTOR_CHATGPT_BASE_URL, ROTOR_OPENAI_BASE_URL).
	ChatGPTBase string
	OpenAIBase  string
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
	if c.ChatGPTBase == "" {
		c.ChatGPTBase = DefaultChatGPTBase
	}
	if c.OpenAIBase == "" {
		c.OpenAIBase = DefaultOpenAIBase
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
	Append(rec rotation.Usage)
}

// Deps are the proxy's collaborators.
type Deps struct {
	Selector  *rotation.Selector
	Secrets   SecretSource
	Refresher Refresher // may be nil: a 401 then only cools the account down
	Flagger   Flagger   // may be nil in tests
	Usage     UsageSink // may be nil
	Clock     rotation.Clock
	Log       zerolog.Logger
}

// Server is a running proxy.
type Server struct {
	cfg       Config
	deps      Deps
	keyDigest [sha256.Size]byte
	client    *fasthttp.Client
	srv       *fasthttp.Server
	secrets   *secretCache
}

// New returns a proxy with cfg and deps. It does not listen yet.
func New(cfg Config, deps Deps) (*Server, error) {
	cfg.defaults()
	if len(cfg.ClientKey) < 32 {
		return nil, rerr.Validation("client_key", "the client key must be at least 32 characters")
	}
	if deps.Clock == nil {
		deps.Clock = rotation.SystemClock{}
	}
	s := &Server{
		cfg:       cfg,
		deps:      deps,
		keyDigest: sha256.Sum256([]byte(cfg.ClientKey)),
		secrets:   newSecretCache(deps.Secrets),
	}
	s.client = newUpstreamClient(cfg.ConnectTimeout, cfg.StallTimeout)
	s.srv = &fasthttp.Server{
		Handler:            s.handle,
		ErrorHandler:       s.handleParseError,
		Name:               "rotor",
		MaxRequestBodySize: cfg.MaxBody,
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

// Serve answers requests on ln until Shutdown. It returns nil after a clean
// shutdown.
func (s *Server) Serve(ln net.Listener) error {
	err := s.srv.Serve(ln)
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections and waits for in-flight requests,
// streams included, to finish, at most until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.ShutdownWithContext(ctx)
	s.client.CloseIdleConnections()
	return err
}

// Listen opens the loopback listener for host:port, refusing any host that
// is not a loopback literal or localhost (SPEC §3 serve).
func Listen(host string, port int) (net.Listener, error) {
	if !LoopbackHost(host) {
		return nil, rerr.Validation("host", fmt.Sprintf("refusing to listen on %s: rotor serves loopback only (127.0.0.0/8, ::1 or localhost)", host))
	}
	if strings.EqualFold(host, "localhost") {
		host = "127.0.0.1"
	}
	return net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(port)))
}

// LoopbackHost reports whether host is a loopback literal or localhost.
func LoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

type fasthttpLogger struct{ l zerolog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	f.l.Debug().Msgf(format, args...)
}

// authorized compares the presented key with the client key in constant
// time, through SHA-256 digests so the length leaks nothing either.
func (s *Server) authorized(h *fasthttp.RequestHeader) bool {
	key := h.Peek("x-api-key")
	if len(key) == 0 {
		auth := h.Peek("Authorization")
		const prefix = "Bearer "
		if len(auth) > len(prefix) && bytes.EqualFold(auth[:len(prefix)], []byte(prefix)) {
			key = auth[len(prefix):]
		}
	}
	if len(key) == 0 {
		return false
	}
	d := sha256.Sum256(key)
	return subtle.ConstantTimeCompare(d[:], s.keyDigest[:]) == 1
}
