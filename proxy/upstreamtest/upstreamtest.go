// Package upstreamtest is a fake OpenAI / ChatGPT-Codex upstream for
// rotor's tests, benchmarks and `make demo`; never part of the rotor binary.
// Its sibling accounts/oauth/oauthtest is the fake sign-in server.
//
// It speaks the real wire format: Responses API server-sent events replayed
// from recorded fixtures under testdata/sse/, Chat Completions chunks and
// objects from testdata/chat/, and the error bodies the real servers send,
// from testdata/errors/. How it answers is chosen per bearer token (see
// Behavior), so one fake can stand behind several accounts at once: one
// account rate-limited, one stalling, one healthy.
//
// It is built on the standard library's net/http on purpose: the proxy uses
// fasthttp, and testing it against an independent HTTP implementation catches
// framing bugs that a fasthttp-on-both-ends test would hide.
//
// It also serves the Responses API over WebSocket (socket.go), as the
// ChatGPT backend and api.openai.com do: GET {base}/codex/responses or GET
// {base}/responses with Upgrade: websocket opens a socket (RFC 6455, no
// extension ever negotiated, so frames are uncompressed), every
// {"type":"response.create",...} text frame on it is one request, answered
// with one text frame per event of the same fixtures (each frame is an
// event's data payload), and a failed request is one error frame
// ({"type":"error","status":N,"error":{...},"headers":{...}}) after which the
// socket stays open. The WebSocket side is hand-written on net/http's
// Hijacker, for the same reason: rotor's WebSocket code uses
// github.com/fasthttp/websocket, and this fake must not share its framing.
// Sockets reports how many are open.
//
// # The backend's own rules
//
// The ChatGPT backend binds some content to the account that produced it
// and treats some input as lookups (docs/codex.md). rotor moves conversations
// between accounts, so the fake enforces the same rules, and no rotor test
// can pass against a kinder upstream than the real one. An account here is
// the request's chatgpt-account-id header when present, else its bearer
// token; on a socket, the handshake's.
//
//   - Minting. A Responses request (POST .../responses under either prefix,
//     or a response.create frame) whose include holds
//     "reasoning.encrypted_content" gets an "encrypted_content" blob on every
//     reasoning item of response.output_item.done and of the final
//     response's output, the same blob for the same item in both. The
//     compact routes always mint their compaction item's (its cmp_ id is
//     kept). A blob is bound to the account that minted it (Mint gives the
//     format); Owner tells a test whose a blob is.
//   - Verifying. In every Responses and compact request, an input item of
//     type reasoning that carries encrypted_content, and every item of type
//     compaction, compaction_summary or context_compaction, must carry a
//     blob minted for the caller. The first that is not (another account's,
//     or not this server's at all) is refused as Behavior.BlobRefusal says:
//     400 invalid_encrypted_content (errors/invalid_encrypted_content_400.json),
//     the same with "code":null (errors/invalid_encrypted_content_null_400.json),
//     or a 200 stream of response.created then response.failed
//     (sse/invalid_encrypted_content.sse). The message names the blob
//     shortened as the backend does ("The encrypted content gAAA...DQ== could
//     not be verified. Reason: ..."). A compaction item without
//     encrypted_content is 400 missing_required_parameter.
//   - Lookups. With store false (always under /backend-api/codex; on /v1
//     when the body says "store":false) an item id is a lookup in a store
//     that holds nothing: a reasoning item with an id but no
//     encrypted_content, and any item_reference, gets 404 "Item with id '…'
//     not found. Items are not persisted when `store` is set to false. ..."
//     (errors/item_not_found_404.json).
//   - previous_response_id over HTTP on /backend-api/codex/responses gets
//     400 previous_response_not_found naming it; on a socket only the
//     responses that socket produced (its newest 64) are known.
//   - "store":true on /backend-api/codex/responses (HTTP or socket) gets 400
//     {"detail":"Store must be set to false"}.
//   - Responses Lite. A request whose reasoning.context is "all_turns", or
//     whose first input item has type additional_tools, must carry the Lite
//     marker, X-OpenAI-Internal-Codex-Responses-Lite: true (on a socket,
//     either on the handshake or in the frame as client_metadata
//     "ws_request_header_x_openai_internal_codex_responses_lite":"true"),
//     else it gets 400 invalid_request_error naming the parameter.
//   - The context window. A Responses request whose input is more tokens
//     than Behavior.ContextWindow (a token per 4 bytes) is refused. On
//     /v1 it is 400 invalid_request_error, code context_length_exceeded
//     (errors/context_length_exceeded_400.json), before any stream, as
//     api.openai.com answers. The ChatGPT backend instead fails the
//     stream: response.created, then response.failed with that code and
//     "Your input exceeds the context window of this model. ..."
//     (sse/failed_context_length.sse); on a socket, the same frames. It is
//     the request's fault, and every account answers it the same way.
//   - Sockets. The 101 answer carries x-codex-turn-state (minted like a blob
//     for the handshake's account, one value per socket), x-models-etag,
//     openai-model and x-reasoning-included: true. A response.create on a
//     socket older than Behavior.SocketLifetime (60 minutes by default), and
//     every later one on it, gets the backend's error frame: status 400,
//     code websocket_connection_limit_reached, "Responses websocket
//     connection limit reached (60 minutes). Create a new websocket
//     connection to continue."; the socket stays open.
//
// Order: a socket's age is checked first, then a Behavior's error Status
// (which answers before any other rule), then the codex route's
// "stream":true, store, previous_response_id, the Lite marker, the
// input items one by one (the first failing item decides), and last the
// context window. Over HTTP a
// refusal is the status and body above; on a socket it is an error frame
// carrying the body's error object (the detail string as its message).
//
// # The meter
//
// The backend meters an account's Responses requests in limit families,
// spends credits past a full window, and budgets workspaces instead of
// windows (docs/selection.md). Behavior.Meter opts an account in; its live meter
// is kept per account (named as by the rules above) and read with
// Metered. A Set with another *Meter starts it again from that Meter; a
// Set with the same one keeps it. Every Responses request (POST
// .../responses under either prefix, or a response.create frame) of a
// metered account goes through it after Behavior.Status (and LimitAfter)
// and before the backend's other rules:
//
//   - The family. The one whose LimitName is the request's "model", else
//     the main family, id "codex". A Meter without Families (and not
//     Workspace) has one: codex, with an unused 300-minute primary and
//     10080-minute secondary window.
//   - A window of that family at 100% and not reset: with credits
//     (Credits.Unlimited, or a Balance above 0) the request is served on
//     credits and Cost (default 0.50) is spent (never below 0, never when
//     unlimited); without, it is the usage limit: 429
//     errors/usage_limit_429.json, its resets_at that window's reset (the
//     one resetting last), plan_type the Meter's; on a socket, the error
//     frame carrying it. Other families keep serving.
//   - Otherwise the request is served and Step (default 10; twice that
//     for "service_tier":"priority", Fast) is added to each window of its
//     family, up to 100.
//   - A window whose reset time passed starts again at 0, resetting
//     Minutes later.
//   - ReachedType (workspace_owner_credits_depleted,
//     workspace_member_credits_depleted,
//     workspace_owner_usage_limit_reached,
//     workspace_member_usage_limit_reached) refuses every request: 429
//     errors/workspace_usage_limit_429.json, usage_limit_reached with
//     rate_limit_reached_type and no resets_at, and the header
//     x-codex-rate-limit-reached-type. Only a Set that clears it lifts it.
//   - Only a request that passes the other rules, and is not a
//     "generate":false warm-up, is charged.
//
// Every answer to a metered Responses request (served, limited or refused
// by a rule), and a socket's 101, carries the meter as it stood before
// the request was charged, over Behavior.Headers: for each family id, the
// prefix x-<id with "_" as "-">- (x-codex-, x-codex-bengalfox-) with
// primary-used-percent, primary-window-minutes, primary-reset-at (unix
// seconds), primary-reset-after-seconds and the same for secondary (a
// window the family lacks is left out), and limit-name for a family other
// than codex; x-codex-active-limit, the family metering the request
// (codex on a 101); x-codex-credits-has-credits and
// x-codex-credits-unlimited ("true"/"false"), x-codex-credits-balance
// ("12.50", only when the account holds Credits); x-codex-plan-type (Plan,
// default "plus", "business" for a Workspace). A served request's
// answer starts with one codex.rate_limits event per family
// ({"type":"codex.rate_limits","plan_type":..,"rate_limits":{"allowed":..,
// "limit_reached":..,"primary":{"used_percent":..,"window_minutes":..,
// "reset_after_seconds":..,"reset_at":..},"secondary":{..}},"credits":
// {"has_credits":..,"unlimited":..,"balance":"12.50" or null}}, with
// "metered_limit_name":id for a family other than codex): before the
// fixture's events in an HTTP stream, as frames of their own on a socket.
// A family's limit_reached says a window is full; allowed, that it still
// serves (not full, or on credits).
//
// GET {base}/wham/usage answers a metered account from its live meter:
// {"plan_type":..,"rate_limit":{"allowed":..,"limit_reached":..,
// "primary_window":{"used_percent":int,"limit_window_seconds":..,
// "reset_after_seconds":..,"reset_at":..},"secondary_window":{..}},
// "additional_rate_limits":[{"limit_name":..,"metered_feature":id,
// "rate_limit":{..}}],"credits":{..},"rate_limit_reset_credits":
// {"available_count":ResetCredits}}, with "rate_limit_reached_type":
// {"type":"rate_limit_reached"} while the main family is limited without
// credits, or {"type":ReachedType}. A Workspace account has no windows:
// "rate_limit":null, no window headers, one codex.rate_limits event with
// null windows, and "spend_control":{"reached":..} in wham/usage.
//
// Every wait inside the fake (event delays, stalls, hung or delayed headers)
// selects on the request's context and on Close, so a client that goes away
// always ends the upstream request and no goroutine outlives the server. A
// wait cut short drops the connection, so a client still connected (on
// Close) sees a broken upstream, never an answer that looks complete.
package upstreamtest

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"maps"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// maxRecorded bounds Requests(): the fake keeps the last this many
	// requests, so long benchmarks do not grow without limit.
	maxRecorded = 1000

	// defaultStream is the success stream served when Behavior.Stream (or,
	// under testdata/chat/, Behavior.ChatStream) is empty.
	defaultStream = "hello.sse"

	// toolCallStream is the first answer under Behavior.ToolRoundTrip, in
	// both testdata/sse/ and testdata/chat/.
	toolCallStream = "tool_call.sse"

	// compactionStream answers a remote compaction (v2): its one
	// compaction item's blob, compactionPlaceholder, is minted for the
	// caller as it is sent.
	compactionStream      = "compaction_v2.sse"
	compactionPlaceholder = "{{COMPACTION_BLOB}}"

	// defaultResetIn fills the reset placeholders when Behavior.ResetIn is 0;
	// 60 s matches the proxy's own default rate-limit cooldown (docs/selection.md).
	defaultResetIn = 60 * time.Second

	// closeWait bounds how long Close waits for in-flight handlers to return.
	closeWait = 5 * time.Second

	// Placeholders that fixtures may contain; they are replaced at serve time
	// so reset times are always in the future relative to the request.
	placeholderResetsAt = "{{RESETS_AT}}" // unix seconds: now + ResetIn
	placeholderResetsIn = "{{RESETS_IN}}" // seconds: ResetIn, rounded up

	chatgptPrefix = "/backend-api"
	openaiPrefix  = "/v1"
)

// Behavior says how the fake answers requests that carry a given bearer token.
//
// The zero value is the default success behaviour: hello.sse as a stream (or
// as one JSON Response when the API-style route is called without
// "stream":true), chat/hello.sse (or chat/hello.json) for Chat Completions,
// no delays, no faults.
//
// HangHeaders, HeaderDelay and error statuses apply to every route. The
// stream faults (EventDelay, StallAfter, ResetAfter) apply to every stream,
// Responses and Chat Completions alike, and also shape the non-streaming
// answers of POST /v1/responses and POST /v1/chat/completions: the JSON comes
// after the time the stream would have taken, StallAfter hangs and
// ResetAfter resets before any header. Compaction and models answers ignore
// them.
//
// On a WebSocket (see the package doc) HangHeaders and HeaderDelay apply to
// the handshake; Status 401 (or an ErrorFixture named token_invalidated...)
// refuses the handshake with that HTTP answer. Everything else is read again
// for every response.create frame, so a test may change it while the socket
// is open: another error Status becomes one error frame (with ErrorFixture's
// "error" object and Headers) and the socket stays open; a success streams
// Stream (ToolRoundTrip included, LimitAfter counted) one event per frame,
// with EventDelay before each frame after the first, StallAfter going silent
// until the client goes or Close, ResetAfter resetting the TCP connection.
// Headers are also sent on the 101 answer of the handshake.
type Behavior struct {
	// Status selects success or failure. 0, 200 or any value below 400 means
	// success (always answered with 200). 400 and above is an error answer
	// with this status and the body of ErrorFixture.
	Status int
	// ErrorFixture is a file name under testdata/errors/ served as the body
	// when Status >= 400. When empty, a default is picked by status: 400
	// bad_request_400.json, 401 unauthorized_401.json, 402
	// deactivated_workspace_402.json, 403 cloudflare_403.html, 404
	// usage_limit_404.json, 429 usage_limit_429.json, anything else
	// server_error_500.json. Others include usage_not_included_404.json and
	// usage_not_included_429.json (the plan lacks Codex, not a usage limit),
	// and the bodies of the backend's rules (see the package doc).
	ErrorFixture string
	// Stream is the success fixture under testdata/sse/ (default "hello.sse"),
	// served by the Responses routes.
	Stream string
	// ChatStream is the success fixture under testdata/chat/ served by POST
	// /v1/chat/completions (default "hello.sse"). Like api.openai.com, the
	// fake sends the usage chunk only when the request asks for it with
	// stream_options.include_usage: then it serves the same name with
	// "_usage" before ".sse" (hello_usage.sse). Without "stream":true it
	// answers the same name with ".json" instead of ".sse" (hello.json), one
	// chat.completion object.
	ChatStream string
	// Headers are extra response headers (e.g. retry-after,
	// x-codex-primary-used-percent), set on success and error answers alike.
	// Values may contain {{RESETS_AT}} and {{RESETS_IN}}.
	Headers map[string]string
	// ResetIn fills {{RESETS_AT}} (now+ResetIn, unix seconds) and
	// {{RESETS_IN}} (seconds) in bodies, events and Headers (default 60 s).
	ResetIn time.Duration
	// EventDelay is slept before each SSE event after the first, so the
	// client can observe that events arrive one by one.
	EventDelay time.Duration
	// StallAfter > 0: after this many events the fake stops sending but keeps
	// the connection open until the client goes away (or Close). When it is
	// at least the number of events, the stall comes after the last event,
	// instead of ending the response.
	StallAfter int
	// ResetAfter > 0: after this many events the fake aborts the connection
	// with a TCP reset (no terminating chunk), like a dropped upstream. When
	// it is at least the number of events, the reset replaces the clean end.
	// If both are set, whichever comes first wins (the reset on a tie).
	ResetAfter int
	// CloseAfter > 0: after this many events the fake closes the
	// connection in good order (a FIN, a TLS close_notify first), with no
	// terminating chunk (on a socket, with no close frame): a server
	// restarting or a middlebox's idle timeout. The stream is cut as
	// surely as by a reset, but a reader that takes the connection's end
	// for the body's would not notice.
	CloseAfter int
	// HangHeaders: never send a status line or headers; wait until the client
	// goes away (or Close). Models an upstream that accepts and goes silent.
	HangHeaders bool
	// HeaderDelay waits this long before the status line and headers, then
	// answers as the rest of the Behavior says: a slow-to-answer upstream
	// (load and response-timeout tests). Like every wait of the fake it ends
	// early when the client goes away or on Close, and then nothing is sent.
	HeaderDelay time.Duration
	// ToolRoundTrip makes the model call a tool, then answer, on both APIs:
	// a request whose last input is a tool result (Chat Completions: the
	// last message has role "tool"; Responses: the last input item has type
	// "function_call_output") gets Stream or ChatStream as usual, any other
	// request gets the get_weather call of the tool_call fixtures instead
	// (sse/tool_call.sse or ToolStream, chat/tool_call.sse and its
	// variants). Clients that
	// run the whole round trip in one call (the AI SDK with tools, agents)
	// need no test in between to switch the answer.
	ToolRoundTrip bool
	// LimitAfter > 0: the first LimitAfter Responses requests (POST
	// .../responses, and response.create frames on a WebSocket) with this
	// token are answered as the rest of the Behavior says, every later one
	// as a usage limit (429, usage_limit_429.json; on a socket, an error
	// frame): an account that reaches its limit in the middle of a session.
	LimitAfter int
	// ResetCredits is the account's banked rate-limit reset credits, as GET
	// {base}/wham/usage reports them. That route answers the account's
	// windows from the x-codex-* quota Headers its answers carry (a
	// window the Headers leave out is unused), costs nothing, and like
	// every route answers an error Status instead.
	ResetCredits int
	// PromptCache makes the answer's usage that of a prompt cache kept per
	// account: input tokens for the request's turns (its input items, or
	// its Chat Completions messages; a token per 4 bytes), cached tokens
	// for the longest run of leading turns this account was sent before.
	// It reports on Responses streams and answers, and on Chat Completions
	// streams that ask for usage. Each account keeps at most 4096 runs.
	PromptCache bool
	// NoWebSocket: the endpoint does not serve sockets. A WebSocket
	// handshake is refused with the 404 an unknown path under that prefix
	// gets (before Status is looked at); plain HTTP is unchanged.
	NoWebSocket bool
	// ToolStream is the first answer under ToolRoundTrip on the Responses
	// routes, a fixture under testdata/sse/ (default "tool_call.sse").
	// "reasoning_tool_call.sse" reasons before it calls the tool, so a
	// round trip that asks for reasoning.encrypted_content carries
	// account-bound reasoning into its second request. Chat Completions
	// keep chat/tool_call.sse.
	ToolStream string
	// BlobRefusal is the form in which encrypted content the caller's
	// account cannot read is refused (see "The backend's own rules" in the
	// package doc): BlobRefusalCode (the default, also ""), BlobRefusalNull
	// or BlobRefusalStream. The real backend has used each, so rotor must
	// recognise them all. Any other value answers 500 naming it.
	BlobRefusal string
	// SocketLifetime is how long a WebSocket serves requests (0 means 60
	// minutes, the real backend's limit). A response.create on an older
	// socket, and every later one on it, gets the error frame the backend
	// sends then (code websocket_connection_limit_reached); the socket stays
	// open. It is read at each frame like the rest of the Behavior, so a
	// test may shorten it while a socket is open.
	SocketLifetime time.Duration
	// ContextWindow is the model's context window in tokens (0 means
	// 272,000, the fake's catalog's), counted a token per 4 bytes of the
	// request's input. A Responses request over it is refused as the real
	// upstreams refuse it (see "The backend's own rules").
	ContextWindow int
	// Meter, when set, meters the account's Responses requests as the
	// backend does: limit families, credits, workspaces (see "The meter"
	// in the package doc). It is the meter's state at the start; the live
	// state is kept per account, and read with Metered. Its headers win
	// over Headers for the names it sets.
	Meter *Meter
	// Download > 0: a GET of a path under /backend-api/ the fake has no
	// route for answers 200 with the first Download bytes of Generated,
	// with its Content-Length, as they are made (a task's log, a file: a
	// body larger than any buffer), instead of the 404.
	Download int64
}

func (b Behavior) contextWindow() int { return cmp.Or(b.ContextWindow, defaultContextWindow) }

// Recorded is a copy of one request the fake received.
//
// A WebSocket handshake is recorded like any request (Method "GET"). Each
// response.create frame on the socket is then recorded as a request of its
// own, with Method "WS", the Path, RawQuery, Header and Token of the
// handshake, and the frame's text as Body; other frames are not recorded.
type Recorded struct {
	Method   string
	Path     string
	RawQuery string
	// RawURI is the request target as it came on the wire, escapes and
	// all (net/http's RequestURI): Path is decoded, so two targets the
	// backend reads differently (a%2Fb and a/b) record the same Path.
	RawURI string
	Header http.Header
	Body   []byte
	// Token is the bearer token of the Authorization header, "" when absent.
	Token string
	// TLSResumed reports that the request came on a TLS connection that
	// resumed an earlier session instead of a full handshake.
	TLSResumed bool
}

// Server is the fake upstream. Create it with New, configure it with Set and
// SetDefault (at any time, also while serving), then Start it. All methods
// are safe for concurrent use.
type Server struct {
	dir string

	mu        sync.Mutex
	behaviors map[string]Behavior
	def       Behavior
	ring      []Recorded // last maxRecorded requests, oldest at ring[head] once full
	head      int
	counts    map[string]int
	turns     map[string]int         // Responses requests by token, for LimitAfter
	cache     promptCache            // Behavior.PromptCache's runs, by account
	meters    map[string]*liveMeter  // Behavior.Meter's live state, by account (identity)
	meterSrcs map[string]meterSource // the *Meter each token was Set with
	defMeter  meterSource            // SetDefault's
	srv       *http.Server
	ln        net.Listener
	scheme    string         // "http", or "https" once StartTLS served
	roots     *x509.CertPool // what trusts StartTLS's certificate
	certPEM   []byte         // that certificate, in PEM
	idle      time.Duration  // SetIdleTimeout's
	serveDone chan struct{}
	closed    bool

	fixtures fixtureCache

	// secret keys the blobs this server mints (Mint, Owner): random per
	// Server, so a blob of another fake, or of another test, never
	// verifies.
	secret [32]byte

	open    atomic.Int64 // in-flight HTTP requests (handlers running)
	sockets atomic.Int64 // open WebSockets (hijacked: no handler running)
	// done is closed by Close so every wait in a handler ends at once, even
	// before net/http notices the closed connection.
	done chan struct{}
}

// New returns a server that reads its fixtures from testdataDir (the repo's
// testdata directory: tests pass "../../testdata"). Fixtures are loaded on
// first use and cached; a missing fixture is reported to the client as a 500
// whose body names the file, so a typo fails the test loudly.
func New(testdataDir string) *Server {
	s := &Server{
		dir:       testdataDir,
		behaviors: make(map[string]Behavior),
		counts:    make(map[string]int),
		turns:     make(map[string]int),
		meterSrcs: make(map[string]meterSource),
		fixtures:  fixtureCache{dir: testdataDir},
		done:      make(chan struct{}),
	}
	_, _ = rand.Read(s.secret[:])
	return s
}

// Start listens on addr (e.g. "127.0.0.1:0"; "" means that) and serves in the
// background until Close. It fails if the address cannot be bound, or if the
// server was already started or closed.
func (s *Server) Start(addr string) error {
	return s.start(addr, nil)
}

// StartTLS is Start over TLS, as the real backends are served: with a
// certificate for 127.0.0.1 and localhost made for this server, which
// only RootCAs trusts. URL is then "https://127.0.0.1:PORT".
func (s *Server) StartTLS(addr string) error {
	cert, roots, err := SelfSigned()
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.roots = roots
	s.certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})
	s.mu.Unlock()
	return s.start(addr, &tls.Config{Certificates: []tls.Certificate{cert}})
}

// SetIdleTimeout makes the server close a keep-alive connection that has
// been idle for d, as every real server does after a while of its own
// choosing; it must be called before Start. Zero (the default) keeps idle
// connections until Close.
func (s *Server) SetIdleTimeout(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idle = d
}

// CertPEM is StartTLS's certificate in PEM (nil before it): what a process
// of another program must be told to trust (SSL_CERT_FILE, for Go's).
func (s *Server) CertPEM() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.certPEM
}

// RootCAs is the pool that trusts StartTLS's certificate (nil before it).
func (s *Server) RootCAs() *x509.CertPool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.roots
}

// SelfSigned makes a certificate for 127.0.0.1, ::1, 0.0.0.0 and
// localhost, valid for a day, and the pool that trusts it: for an
// upstream served over TLS in another process (rotor-bench's) as
// StartTLS serves this one.
func SelfSigned() (tls.Certificate, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "upstreamtest"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		// 0.0.0.0 too: tests reach the fake by that name to bypass a proxy.
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4zero, net.IPv6loopback},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, roots, nil
}

func (s *Server) start(addr string, tlsConfig *tls.Config) error {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("upstreamtest: server is closed")
	}
	if s.srv != nil {
		return errors.New("upstreamtest: server already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.scheme = "http"
	if tlsConfig != nil {
		ln, s.scheme = tls.NewListener(ln, tlsConfig), "https"
	}
	s.ln = ln
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(s.handle),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       s.idle,
	}
	s.serveDone = make(chan struct{})
	srv, done := s.srv, s.serveDone
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // returns http.ErrServerClosed on Close
	}()
	return nil
}

// URL is the server's base URL, "http://127.0.0.1:PORT" ("https://" after
// StartTLS), or "" before Start.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.scheme + "://" + s.ln.Addr().String()
}

// ChatGPTBase is URL()+"/backend-api", the value for ROTOR_CHATGPT_BASE_URL.
func (s *Server) ChatGPTBase() string { return s.URL() + chatgptPrefix }

// OpenAIBase is URL()+"/v1", the value for ROTOR_OPENAI_BASE_URL.
func (s *Server) OpenAIBase() string { return s.URL() + openaiPrefix }

// Set makes requests whose Authorization is "Bearer <token>" answered with b.
// It applies to requests that arrive after the call. Tokens never Set get the
// default behaviour (see SetDefault).
func (s *Server) Set(token string, b Behavior) {
	b.Headers = maps.Clone(b.Headers)
	s.mu.Lock()
	s.meterSrcs[token] = adoptMeter(s.meterSrcs[token], &b)
	s.behaviors[token] = b
	s.mu.Unlock()
}

// SetDefault sets the behaviour for tokens that were never Set (initially the
// zero Behavior: success with hello.sse).
func (s *Server) SetDefault(b Behavior) {
	b.Headers = maps.Clone(b.Headers)
	s.mu.Lock()
	s.defMeter = adoptMeter(s.defMeter, &b)
	s.def = b
	s.mu.Unlock()
}

// Requests returns copies of the recorded requests, oldest first: every
// request that reached the server, including unauthenticated and unrouted
// ones, bounded to the last 1000. Callers may modify the result freely.
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Recorded, 0, len(s.ring))
	n := len(s.ring)
	for i := range n {
		r := s.ring[(s.head+i)%n]
		r.Header = r.Header.Clone()
		r.Body = bytes.Clone(r.Body)
		out = append(out, r)
	}
	return out
}

// Count is how many requests have arrived with that bearer token ("" counts
// requests without one). It is not bounded like Requests. A WebSocket counts
// its handshake and each response.create frame.
func (s *Server) Count(token string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[token]
}

// Open is the number of requests currently being handled. Tests use it to
// check that a client that went away also ended the upstream request: it
// drops back as soon as the handler notices the disconnect. An open
// WebSocket is not an HTTP request in flight once its handshake is answered;
// see Sockets.
func (s *Server) Open() int { return int(s.open.Load()) }

// Sockets is the number of WebSockets open now. Tests use it to check that
// a client closed its upstream socket: it drops once the client's close
// frame is echoed or its connection is gone.
func (s *Server) Sockets() int { return int(s.sockets.Load()) }

// Close stops the listener, ends every in-flight request (stalled, delayed
// and hung ones included, by dropping their connections) and every open
// WebSocket (by closing its connection, without a close frame), and waits,
// up to 5 s, for their handlers and sockets to end. It is safe to call more than once and
// before Start.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	srv, serveDone := s.srv, s.serveDone
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Close()
	<-serveDone
	deadline := time.Now().Add(closeWait)
	// open before sockets: a handshake counts its socket before its handler
	// returns.
	for (s.open.Load() > 0 || s.sockets.Load() > 0) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	return err
}

// turn counts a Responses request with token and returns how many there
// have been; any other request returns 0.
func (s *Server) turn(token string, r *http.Request) int {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/responses") {
		return 0
	}
	return s.addTurn(token)
}

// addTurn counts a Responses request with token and returns how many there
// have been.
func (s *Server) addTurn(token string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.turns[token]++
	return s.turns[token]
}

// behavior returns the behaviour for token.
func (s *Server) behavior(token string) Behavior {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.behaviors[token]; ok {
		return b
	}
	return s.def
}

// record stores a copy of the request in the bounded ring and counts it.
func (s *Server) record(rec Recorded) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts[rec.Token]++
	if len(s.ring) < maxRecorded {
		s.ring = append(s.ring, rec)
		return
	}
	s.ring[s.head] = rec
	s.head = (s.head + 1) % maxRecorded
}

// requestBody is the part of a Responses or Chat Completions request the
// fake looks at.
type requestBody struct {
	Model         string `json:"model"`
	Stream        *bool  `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages []struct {
		Role string `json:"role"`
	} `json:"messages"`
	Input json.RawMessage `json:"input"`
	// ServiceTier is "priority" (Codex's Fast), "flex", or "" (the meter).
	ServiceTier string `json:"service_tier"`
	// raw is the whole body (PromptCache reads its turns).
	raw []byte

	// Read by the backend's rules (rules.go).
	Include            []string `json:"include"`
	Store              *bool    `json:"store"`
	PreviousResponseID string   `json:"previous_response_id"`
	Reasoning          *struct {
		Context string `json:"context"`
	} `json:"reasoning"`
	ClientMetadata map[string]json.RawMessage `json:"client_metadata"`
}

// afterToolResult reports whether the request's last input is a tool
// result, in either API.
func (r *requestBody) afterToolResult() bool {
	if n := len(r.Messages); n > 0 {
		return r.Messages[n-1].Role == "tool"
	}
	var items []struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(r.Input, &items) != nil || len(items) == 0 {
		return false
	}
	return items[len(items)-1].Type == "function_call_output"
}

// compactionTrigger reports whether the request's last input item is a
// compaction_trigger: Codex asks for a remote compaction (v2) in an
// ordinary Responses request, and takes exactly one compaction item back.
func (r *requestBody) compactionTrigger() bool {
	if !bytes.Contains(r.Input, []byte("compaction_trigger")) {
		return false
	}
	var items []struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(r.Input, &items) != nil || len(items) == 0 {
		return false
	}
	return items[len(items)-1].Type == "compaction_trigger"
}

// streaming reports whether the request asked for a stream ("stream":true).
func (r *requestBody) streaming() bool { return r.Stream != nil && *r.Stream }

// parseRequest reads the part of body the fake looks at. A body that is
// not JSON reads as no model, no stream.
func parseRequest(body []byte) requestBody {
	var req requestBody
	if len(body) > 0 {
		_ = json.Unmarshal(body, &req)
	}
	req.raw = body
	return req
}

// answers names the success fixtures b serves for req: the Responses one
// under testdata/sse/ and the Chat Completions one under testdata/chat/.
func (b Behavior) answers(req *requestBody) (stream, chat string) {
	if req.compactionTrigger() {
		// Codex's remote compaction (v2): one compaction item, whatever
		// else the Behavior says of answers.
		return compactionStream, toolCallStream
	}
	if b.ToolRoundTrip && !req.afterToolResult() {
		return cmp.Or(b.ToolStream, toolCallStream), toolCallStream
	}
	return cmp.Or(b.Stream, defaultStream), cmp.Or(b.ChatStream, defaultStream)
}

// handle is the single entry point: record, authenticate, apply the token's
// behaviour, then route.
func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	s.open.Add(1)
	defer s.open.Add(-1)

	body, token := s.receive(r)
	w.Header().Set("x-request-id", newRequestID())
	if token == "" {
		writeJSON(w, http.StatusUnauthorized, []byte(missingKeyBody))
		return
	}

	b := s.behavior(token)
	if b.LimitAfter > 0 && s.turn(token, r) > b.LimitAfter {
		b = limitReached(b)
	}
	if b.HangHeaders {
		s.hold(r.Context(), w, 0)
		return
	}
	if b.HeaderDelay > 0 && !s.hold(r.Context(), w, b.HeaderDelay) {
		return
	}
	fill := newFiller(time.Now(), cmp.Or(b.ResetIn, defaultResetIn))
	for k, v := range b.Headers {
		w.Header().Set(k, fill.string(v))
	}
	if isSocketRequest(r) {
		if b.Meter != nil {
			for k, v := range s.meterHeaders(b.Meter, identity(r.Header, token), time.Now()) {
				w.Header().Set(k, v)
			}
		}
		s.serveSocket(w, r, token, b, fill)
		return
	}
	if b.Status >= 400 {
		s.serveError(w, b, fill)
		return
	}
	req := parseRequest(body)
	var m *metering
	if b.Meter != nil && isResponsesPost(r) {
		m = s.meter(b.Meter, identity(r.Header, token), &req, time.Now())
		for k, v := range m.headers {
			w.Header().Set(k, v)
		}
		if m.refused {
			s.serveFixtureError(w, http.StatusTooManyRequests, m.fixture, m.fill, m.repl...)
			return
		}
	}
	s.route(w, r, b, req, fill, m)
}

// limitReached is the Behavior after LimitAfter: a usage limit.
func limitReached(b Behavior) Behavior {
	return Behavior{Status: http.StatusTooManyRequests, ErrorFixture: "usage_limit_429.json", ResetIn: b.ResetIn}
}

// receive reads r's body and records the request, whatever comes of it;
// it returns the body and the bearer token ("" when there is none).
func (s *Server) receive(r *http.Request) (body []byte, token string) {
	// Reading the whole body also lets net/http start its background read,
	// which is what cancels r.Context() when the client disconnects.
	body, _ = io.ReadAll(r.Body)
	token = bearer(r.Header.Get("Authorization"))
	s.record(Recorded{
		Method:     r.Method,
		Path:       r.URL.Path,
		RawQuery:   r.URL.RawQuery,
		RawURI:     r.RequestURI,
		Header:     r.Header.Clone(),
		Body:       body,
		Token:      token,
		TLSResumed: r.TLS != nil && r.TLS.DidResume,
	})
	return body, token
}

// route answers a request whose behaviour is success, by method and path,
// as the real upstreams would; an unknown path gets the 404 of the
// upstream it falls under.
//
// m is the request's metering when its account has a Meter (nil
// otherwise): a Responses request that passes the rules is charged, and
// its stream led by m's codex.rate_limits events.
func (s *Server) route(w http.ResponseWriter, r *http.Request, b Behavior, req requestBody, fill filler, m *metering) {
	streamName, chatName := b.answers(&req)
	path := r.URL.Path
	owner := identity(r.Header, bearer(r.Header.Get("Authorization")))
	lite := isTrue(r.Header.Get(liteHeader))
	switch {
	case r.Method == http.MethodPost && path == chatgptPrefix+"/codex/responses":
		// The Codex backend only streams; anything else is refused the way it
		// refuses it.
		if !req.streaming() {
			s.serveFixtureError(w, http.StatusBadRequest, "stream_required_400.json", fill)
			return
		}
		// Nothing is stored there, so over HTTP no previous response is
		// ever known: only a socket remembers its own.
		sc := scope{owner: owner, codex: true, lite: lite, known: func(string) bool { return false }, window: b.contextWindow()}
		if rf := s.check(&req, sc); rf != nil {
			s.refuse(w, r, b, rf, req.Model, true, fill)
			return
		}
		m.charge()
		s.serveStream(w, r, b, "sse/"+streamName, req.Model, fill, chain(s.minting(owner, &req), s.caching(b, owner, &req)), m.sse())
	case r.Method == http.MethodPost && path == openaiPrefix+"/responses":
		if rf := s.check(&req, scope{owner: owner, lite: lite, window: b.contextWindow()}); rf != nil {
			s.refuse(w, r, b, rf, req.Model, req.streaming(), fill)
			return
		}
		m.charge()
		edit := chain(s.minting(owner, &req), s.caching(b, owner, &req))
		if req.streaming() {
			s.serveStream(w, r, b, "sse/"+streamName, req.Model, fill, edit, m.sse())
		} else {
			s.serveAssembled(w, r, b, streamName, req.Model, fill, edit)
		}
	case r.Method == http.MethodPost && path == openaiPrefix+"/chat/completions":
		s.serveChat(w, r, b, &req, chatName, fill, s.caching(b, owner, &req))
	case r.Method == http.MethodPost && (path == chatgptPrefix+"/codex/responses/compact" || path == openaiPrefix+"/responses/compact"):
		sc := scope{owner: owner, codex: strings.HasPrefix(path, chatgptPrefix+"/"), compact: true, lite: lite}
		if rf := s.check(&req, sc); rf != nil {
			s.refuse(w, r, b, rf, req.Model, false, fill)
			return
		}
		writeJSON(w, http.StatusOK, compactBody(time.Now(), s.Mint(owner)))
	case r.Method == http.MethodGet && path == chatgptPrefix+"/wham/usage":
		if b.Meter != nil {
			writeJSON(w, http.StatusOK, s.meterUsageBody(b, owner, time.Now()))
			return
		}
		writeJSON(w, http.StatusOK, usageBody(b, fill))
	case r.Method == http.MethodGet && path == chatgptPrefix+"/codex/models":
		w.Header().Set("ETag", codexModelsETag)
		writeJSON(w, http.StatusOK, []byte(codexModelsBody))
	case r.Method == http.MethodGet && path == openaiPrefix+"/models":
		writeJSON(w, http.StatusOK, []byte(openaiModelsBody))
	case r.Method == http.MethodGet && b.Download > 0 && strings.HasPrefix(path, chatgptPrefix+"/"):
		s.serveDownload(w, r, b.Download)
	default:
		notFound(w, r.Method, path)
	}
}

// serveDownload answers Behavior.Download: n bytes of Generated, written
// a piece at a time; a client that goes away, or Close, ends it.
func (s *Server) serveDownload(w http.ResponseWriter, r *http.Request, n int64) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusOK)
	src, buf := Generated(n), make([]byte, 32<<10)
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		default:
		}
		k, err := src.Read(buf)
		if _, werr := w.Write(buf[:k]); werr != nil || err != nil {
			return
		}
	}
}

// Generated is n bytes of lines that each say where they are: 16 bytes,
// the line's number in 15 hex digits and a newline. A byte lost, doubled
// or moved shows in a comparison; the same n always makes the same
// bytes.
func Generated(n int64) io.Reader { return &generated{n: n} }

type generated struct{ off, n int64 }

func (g *generated) Read(p []byte) (int, error) {
	if g.off >= g.n {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), g.n-g.off)]
	for i := range p {
		pos := g.off + int64(i)
		line, col := pos/16, pos%16
		if col == 15 {
			p[i] = '\n'
		} else {
			p[i] = "0123456789abcdef"[line>>(4*(14-col))&0xf]
		}
	}
	g.off += int64(len(p))
	return len(p), nil
}

// notFound is the 404 of the upstream path falls under.
func notFound(w http.ResponseWriter, method, path string) {
	if strings.HasPrefix(path, chatgptPrefix+"/") {
		writeJSON(w, http.StatusNotFound, []byte(`{"detail":"Not Found"}`))
		return
	}
	writeJSON(w, http.StatusNotFound, invalidURLBody(method, path))
}

// serveChat answers api.openai.com's Chat Completions from the fixture
// name under testdata/chat/: its recorded chunks, with the usage chunk
// only when the client asked for it, or one object when it did not ask
// for a stream.
func (s *Server) serveChat(w http.ResponseWriter, r *http.Request, b Behavior, req *requestBody, name string, fill filler, edit eventEdit) {
	base := strings.TrimSuffix(name, ".sse")
	switch {
	case req.streaming() && req.StreamOptions.IncludeUsage:
		s.serveStream(w, r, b, "chat/"+base+"_usage.sse", req.Model, fill, edit, nil)
	case req.streaming():
		s.serveStream(w, r, b, "chat/"+base+".sse", req.Model, fill, nil, nil)
	default:
		s.serveChatCompletion(w, r, b, "chat/"+base, req.Model, fill)
	}
}

// serveError answers with b.Status and its error fixture.
func (s *Server) serveError(w http.ResponseWriter, b Behavior, fill filler) {
	name := b.ErrorFixture
	if name == "" {
		name = defaultErrorFixture(b.Status)
	}
	s.serveFixtureError(w, b.Status, name, fill)
}

// serveFixtureError writes testdata/errors/name with status, with the old,
// new pairs of repl replaced in it (the id or blob a refusal names). HTML
// fixtures are Cloudflare challenge pages and carry the header that marks
// them, unless Behavior.Headers already set it.
func (s *Server) serveFixtureError(w http.ResponseWriter, status int, name string, fill filler, repl ...string) {
	raw, err := s.fixtures.raw("errors/" + name)
	if err != nil {
		fixtureMissing(w, err)
		return
	}
	h := w.Header()
	if strings.HasSuffix(name, ".html") {
		h.Set("Content-Type", "text/html; charset=UTF-8")
		if h.Get("cf-mitigated") == "" {
			h.Set("cf-mitigated", "challenge")
		}
		if h.Get("Server") == "" {
			h.Set("Server", "cloudflare")
		}
	} else {
		h.Set("Content-Type", "application/json")
	}
	body := replaceAll(fill.bytes(raw), repl)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// wait blocks for d (d <= 0: until the end), the request's end, or Close. It
// reports whether the full duration elapsed.
func (s *Server) wait(ctx context.Context, d time.Duration) bool {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-timeout:
		return true
	case <-ctx.Done():
		return false
	case <-s.done:
		return false
	}
}

// hold is wait for a handler: when the wait is cut short (the client went
// away, or Close) it drops the connection. Returning normally instead would
// let net/http finish the response, and a client still connected would see
// an empty 200, or a stream that ends cleanly, rather than an upstream that
// broke off.
func (s *Server) hold(ctx context.Context, w http.ResponseWriter, d time.Duration) bool {
	if s.wait(ctx, d) {
		return true
	}
	abortConn(http.NewResponseController(w))
	return false
}

// defaultErrorFixture picks the error body for a Status without ErrorFixture.
func defaultErrorFixture(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "bad_request_400.json"
	case http.StatusUnauthorized:
		return "unauthorized_401.json"
	case http.StatusPaymentRequired:
		return "deactivated_workspace_402.json"
	case http.StatusForbidden:
		return "cloudflare_403.html"
	case http.StatusNotFound:
		return "usage_limit_404.json"
	case http.StatusTooManyRequests:
		return "usage_limit_429.json"
	default:
		return "server_error_500.json"
	}
}

// bearer extracts the token of an "Authorization: Bearer <token>" value.
func bearer(v string) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// newRequestID returns an upstream-style request id ("req_" + 32 hex).
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

// writeJSON writes a complete JSON answer.
func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// fixtureMissing reports a fixture that could not be read. It is a 500 with
// a body naming the problem, never a panic, so the failing test says why.
func fixtureMissing(w http.ResponseWriter, err error) {
	writeJSON(w, http.StatusInternalServerError, []byte(`{"error":`+string(fixtureMissingBody(err))+`}`))
}

// fixtureMissingBody is the error object naming a fixture that could not
// be read.
func fixtureMissingBody(err error) []byte {
	obj, _ := json.Marshal(map[string]any{
		"message": "upstreamtest: " + err.Error(),
		"type":    "server_error",
		"param":   nil,
		"code":    "fakeupstream_fixture_missing",
	})
	return obj
}

// filler replaces the time placeholders for one request.
type filler struct {
	resetsAt string
	resetsIn string
}

func newFiller(now time.Time, resetIn time.Duration) filler {
	secs := int64((resetIn + time.Second - 1) / time.Second) // round up: never claim an earlier reset
	return filler{
		resetsAt: strconv.FormatInt(now.Add(resetIn).Unix(), 10),
		resetsIn: strconv.FormatInt(secs, 10),
	}
}

func (f filler) bytes(b []byte) []byte {
	if !bytes.Contains(b, []byte("{{")) {
		return b
	}
	b = bytes.ReplaceAll(b, []byte(placeholderResetsAt), []byte(f.resetsAt))
	return bytes.ReplaceAll(b, []byte(placeholderResetsIn), []byte(f.resetsIn))
}

func (f filler) string(v string) string {
	v = strings.ReplaceAll(v, placeholderResetsAt, f.resetsAt)
	return strings.ReplaceAll(v, placeholderResetsIn, f.resetsIn)
}
