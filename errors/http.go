package rerr

import (
	"encoding/json"
	"strconv"
	"time"
)

// Stable error codes of proxy-made responses (docs/selection.md).
const (
	ProxyNotFound        = "runtime_rotation_proxy_not_found"
	ProxyUnauthorized    = "runtime_rotation_proxy_unauthorized"
	ProxyForbiddenHost   = "runtime_rotation_proxy_forbidden_host"
	ProxyPayloadTooLarge = "runtime_rotation_proxy_payload_too_large"
	ProxyBadRequest      = "runtime_rotation_proxy_bad_request"
	PoolExhausted        = "codex_runtime_rotation_pool_exhausted"
	PinnedUnavailable    = "codex_pinned_account_unavailable"
	EntitlementError     = "entitlement_error"
	TokenInvalidated     = "token_invalidated"
	UpstreamBlocked      = "upstream_blocked"
	ProxyError           = "codex_runtime_rotation_proxy_error"
	// ProxyOverloaded is rotor's own capacity running out (no free
	// upstream connection within the wait): no account is to blame.
	ProxyOverloaded = "codex_runtime_rotation_proxy_overloaded"
	// ProxyHeadersTooLarge answers request headers over the server's limit.
	ProxyHeadersTooLarge = "runtime_rotation_proxy_headers_too_large"
	// UnsupportedParameter answers a Chat Completions request that only an
	// API-key account could serve when none can (docs/clients.md).
	UnsupportedParameter = "unsupported_parameter"
)

// Error types, in OpenAI's vocabulary.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypePermission     = "permission_error"
	TypeNotFound       = "not_found_error"
	TypeRateLimit      = "rate_limit_error"
	TypeUsageLimit     = "usage_limit_reached"
	TypeServer         = "server_error"
)

// Categories tell a client what kind of failure it is and whether waiting helps.
const (
	CategoryConfiguration  = "configuration_error"
	CategoryAuthentication = "authentication_error"
	CategoryRateLimit      = "rate_limit_error"
	CategoryTimeout        = "timeout_error"
	CategoryTransient      = "transient_error"
	CategoryFatal          = "fatal_error"
)

// HTTPCode is one row of the error table: a stable code and what it means on
// the wire.
type HTTPCode struct {
	Code     string
	Status   int
	Type     string
	Category string
}

// Retryable reports whether a client may succeed by trying again later; true
// only for rate-limit, timeout and transient failures.
func (c HTTPCode) Retryable() bool { return retryableCategory(c.Category) }

func retryableCategory(cat string) bool {
	return cat == CategoryRateLimit || cat == CategoryTimeout || cat == CategoryTransient
}

// Table is every code the proxy itself can answer with. Codes that come from
// an upstream are not listed; Build derives their row from the status.
var Table = []HTTPCode{
	{ProxyNotFound, 404, TypeNotFound, CategoryConfiguration},
	{ProxyUnauthorized, 401, TypeAuthentication, CategoryAuthentication},
	{ProxyForbiddenHost, 403, TypePermission, CategoryConfiguration},
	{ProxyPayloadTooLarge, 413, TypeInvalidRequest, CategoryConfiguration},
	{ProxyBadRequest, 400, TypeInvalidRequest, CategoryFatal},
	{PoolExhausted, 503, TypeServer, CategoryTransient},
	{PinnedUnavailable, 503, TypeServer, CategoryTransient},
	{EntitlementError, 403, TypePermission, CategoryConfiguration},
	{TokenInvalidated, 401, TypeAuthentication, CategoryAuthentication},
	{UpstreamBlocked, 502, TypeServer, CategoryFatal},
	{ProxyError, 500, TypeServer, CategoryFatal},
	{ProxyOverloaded, 503, TypeServer, CategoryTransient},
	{ProxyHeadersTooLarge, 431, TypeInvalidRequest, CategoryConfiguration},
	{UnsupportedParameter, 400, TypeInvalidRequest, CategoryFatal},
}

// Lookup returns the table row of a proxy-made code.
func Lookup(code string) (HTTPCode, bool) {
	for _, c := range Table {
		if c.Code == code {
			return c, true
		}
	}
	return HTTPCode{}, false
}

// RowForStatus is the row an upstream-chosen code gets from its HTTP status.
func RowForStatus(code string, status int) HTTPCode {
	r := HTTPCode{Code: code, Status: status}
	switch {
	case status == 429:
		r.Type, r.Category = TypeRateLimit, CategoryRateLimit
	case status == 401:
		r.Type, r.Category = TypeAuthentication, CategoryAuthentication
	case status == 403:
		r.Type, r.Category = TypePermission, CategoryAuthentication
	case status == 404:
		r.Type, r.Category = TypeNotFound, CategoryConfiguration
	case status == 408 || status == 504:
		r.Type, r.Category = TypeServer, CategoryTimeout
	case status >= 500:
		r.Type, r.Category = TypeServer, CategoryTransient
	default:
		r.Type, r.Category = TypeInvalidRequest, CategoryFatal
	}
	return r
}

// Field is one extra member of the error object, kept in order.
type Field struct {
	Key   string
	Value any
}

// Spec describes one proxy-made error response. Zero fields take the table's
// values for Code.
type Spec struct {
	Code      string
	Status    int    // overrides the table (pool exhausted by rate limits is 429)
	Type      string // overrides the table
	Category  string // overrides the table
	Message   string
	RequestID string
	// RetryAfter, when positive, is sent as the retry-after-ms and
	// Retry-After headers; it is not added to the body by itself.
	RetryAfter time.Duration
	Extra      []Field
}

// Response is a built error response, ready to write.
type Response struct {
	Status     int
	Body       []byte
	RetryAfter time.Duration
}

// RetryAfterMS is the retry-after-ms header value, "" when no wait is known.
func (r Response) RetryAfterMS() string {
	if r.RetryAfter <= 0 {
		return ""
	}
	return strconv.FormatInt(r.RetryAfter.Milliseconds(), 10)
}

// RetryAfterSeconds is the Retry-After header value (whole seconds, rounded
// up so a client never comes back early), "" when no wait is known.
func (r Response) RetryAfterSeconds() string {
	if r.RetryAfter <= 0 {
		return ""
	}
	return strconv.FormatInt(int64((r.RetryAfter+time.Second-1)/time.Second), 10)
}

// Build turns s into the wire payload
// {"error":{"message","type","code","request_id","category","retryable",extras...}}.
// It is the only place an error body is made.
func Build(s Spec) Response {
	row, ok := Lookup(s.Code)
	if !ok {
		row = RowForStatus(s.Code, s.Status)
	}
	if s.Status != 0 {
		row.Status = s.Status
	}
	if s.Type != "" {
		row.Type = s.Type
	}
	if s.Category != "" {
		row.Category = s.Category
	}
	msg := s.Message
	if msg == "" {
		msg = row.Code
	}
	b := make([]byte, 0, 256)
	b = append(b, `{"error":{`...)
	b = appendField(b, "message", msg, false)
	b = appendField(b, "type", row.Type, true)
	b = appendField(b, "code", row.Code, true)
	b = appendField(b, "request_id", s.RequestID, true)
	b = appendField(b, "category", row.Category, true)
	b = appendField(b, "retryable", retryableCategory(row.Category), true)
	for _, f := range s.Extra {
		b = appendField(b, f.Key, f.Value, true)
	}
	b = append(b, "}}"...)
	return Response{Status: row.Status, Body: b, RetryAfter: s.RetryAfter}
}

func appendField(b []byte, key string, v any, comma bool) []byte {
	if comma {
		b = append(b, ',')
	}
	b = strconv.AppendQuote(b, key) // keys are ASCII identifiers: Go and JSON quoting agree
	b = append(b, ':')
	if raw, ok := v.(json.RawMessage); ok && json.Valid(raw) {
		return append(b, raw...)
	}
	enc, err := json.Marshal(v)
	if err != nil {
		return append(b, "null"...)
	}
	return append(b, enc...)
}

// Frame is r as a Responses WebSocket error frame (docs/codex.md), the shape
// Codex CLI reads: {"type":"error","status":N,"error":{…},"headers":{…}}.
// headers are the ones an HTTP answer would carry, as name and value
// pairs; retry-after-ms and retry-after are added from r.
func (r Response) Frame(headers [][2]string) []byte {
	b := make([]byte, 0, len(r.Body)+64)
	b = append(b, `{"type":"error","status":`...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, ',')
	b = append(b, r.Body[1:len(r.Body)-1]...) // "error":{…}
	if ms := r.RetryAfterMS(); ms != "" {
		headers = append(headers, [2]string{"retry-after-ms", ms}, [2]string{"retry-after", r.RetryAfterSeconds()})
	}
	if len(headers) > 0 {
		b = append(b, `,"headers":{`...)
		for i, h := range headers {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendField(b, h[0], h[1], false)
		}
		b = append(b, '}')
	}
	return append(b, '}')
}
