package rerr

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// specTable is docs/selection.md's error table: every code the proxy makes, its HTTP
// status, and the type and category it is sent with.
var specTable = []HTTPCode{
	{"runtime_rotation_proxy_not_found", 404, "not_found_error", "configuration_error"},
	{"runtime_rotation_proxy_unauthorized", 401, "authentication_error", "authentication_error"},
	{"runtime_rotation_proxy_forbidden_host", 403, "permission_error", "configuration_error"},
	{"runtime_rotation_proxy_payload_too_large", 413, "invalid_request_error", "configuration_error"},
	{"codex_runtime_rotation_pool_exhausted", 503, "server_error", "transient_error"},
	{"codex_pinned_account_unavailable", 503, "server_error", "transient_error"},
	{"entitlement_error", 403, "permission_error", "configuration_error"},
	{"token_invalidated", 401, "authentication_error", "authentication_error"},
	{"upstream_blocked", 502, "server_error", "fatal_error"},
	{"codex_runtime_rotation_proxy_error", 500, "server_error", "fatal_error"},
	{"codex_runtime_rotation_proxy_overloaded", 503, "server_error", "transient_error"},
	{"runtime_rotation_proxy_headers_too_large", 431, "invalid_request_error", "configuration_error"},
	{"unsupported_parameter", 400, "invalid_request_error", "fatal_error"},
}

var (
	types      = []string{"invalid_request_error", "authentication_error", "permission_error", "not_found_error", "rate_limit_error", "usage_limit_reached", "server_error"}
	categories = []string{"configuration_error", "authentication_error", "rate_limit_error", "timeout_error", "transient_error", "fatal_error"}
)

func TestTableMatchesSpec(t *testing.T) {
	t.Parallel()
	for _, want := range specTable {
		got, ok := Lookup(want.Code)
		if !ok {
			t.Errorf("%s is missing from Table", want.Code)
			continue
		}
		if got != want {
			t.Errorf("Table row %+v, want %+v", got, want)
		}
	}
	seen := map[string]bool{}
	for _, row := range Table {
		if seen[row.Code] {
			t.Errorf("%s appears twice in Table", row.Code)
		}
		seen[row.Code] = true
		if !slices.Contains(types, row.Type) {
			t.Errorf("%s: type %q is not in OpenAI's vocabulary", row.Code, row.Type)
		}
		if !slices.Contains(categories, row.Category) {
			t.Errorf("%s: unknown category %q", row.Code, row.Category)
		}
		if row.Status < 400 || row.Status > 599 {
			t.Errorf("%s: status %d is not an error", row.Code, row.Status)
		}
	}
	if _, ok := Lookup("no_such_code"); ok {
		t.Error("Lookup found an unknown code")
	}
}

func TestRetryableOnlyForRateLimitTimeoutTransient(t *testing.T) {
	t.Parallel()
	for _, c := range categories {
		want := c == "rate_limit_error" || c == "timeout_error" || c == "transient_error"
		if got := (HTTPCode{Category: c}).Retryable(); got != want {
			t.Errorf("category %s: Retryable = %v, want %v", c, got, want)
		}
		// Build says the same in the payload.
		r := Build(Spec{Code: ProxyError, Category: c})
		if e := decode(t, r.Body); e["retryable"] != want {
			t.Errorf("category %s: payload retryable = %v, want %v", c, e["retryable"], want)
		}
	}
}

// decode checks body is one valid JSON object {"error":{...}} and returns the
// error object.
func decode(t *testing.T, body []byte) map[string]any {
	t.Helper()
	if !json.Valid(body) {
		t.Fatalf("invalid JSON: %s", body)
	}
	var v map[string]map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if len(v) != 1 || v["error"] == nil {
		t.Fatalf("body is not {\"error\":{...}}: %s", body)
	}
	return v["error"]
}

func TestBuildEveryRow(t *testing.T) {
	t.Parallel()
	for _, row := range Table {
		r := Build(Spec{Code: row.Code, Message: "m", RequestID: "req_1"})
		if r.Status != row.Status {
			t.Errorf("%s: status %d, want %d", row.Code, r.Status, row.Status)
		}
		e := decode(t, r.Body)
		want := map[string]any{
			"message": "m", "type": row.Type, "code": row.Code, "request_id": "req_1",
			"category": row.Category, "retryable": row.Retryable(),
		}
		if len(e) != len(want) {
			t.Errorf("%s: fields %v, want exactly %v", row.Code, e, want)
		}
		for k, w := range want {
			if e[k] != w {
				t.Errorf("%s: %s = %v, want %v", row.Code, k, e[k], w)
			}
		}
		if r.RetryAfterMS() != "" || r.RetryAfterSeconds() != "" {
			t.Errorf("%s: retry-after headers without a known wait", row.Code)
		}
	}
}

func TestBuildFieldOrderAndDefaults(t *testing.T) {
	t.Parallel()
	r := Build(Spec{Code: ProxyNotFound})
	want := `{"error":{"message":"runtime_rotation_proxy_not_found","type":"not_found_error","code":"runtime_rotation_proxy_not_found","request_id":"","category":"configuration_error","retryable":false}}`
	if string(r.Body) != want {
		t.Errorf("Build = %s\nwant    %s", r.Body, want)
	}
}

func TestBuildEscapesMessage(t *testing.T) {
	t.Parallel()
	msg := "quote \" backslash \\ newline \n tab \t <html> & \u2028 é \x01"
	e := decode(t, Build(Spec{Code: ProxyError, Message: msg}).Body)
	if e["message"] != msg {
		t.Errorf("message = %q, want %q", e["message"], msg)
	}
}

func TestBuildPoolExhaustedByRateLimits(t *testing.T) {
	t.Parallel()
	resets := time.Unix(1767229200, 0)
	r := Build(Spec{
		Code: PoolExhausted, Status: 429, Type: TypeUsageLimit, Category: CategoryRateLimit,
		Message: "every account is rate-limited", RequestID: "req_9",
		RetryAfter: 1500 * time.Millisecond,
		Extra: []Field{
			{"reason", "rate-limit"},
			{"retry_after_ms", 1500},
			{"hint", `run "rotor rotation status"`},
			{"account_skip_reasons", map[string]string{"1": "rate-limited", "2": "rate-limited"}},
			{"resets_at", resets.Unix()},
			{"resets_in_seconds", 2},
			{"raw", json.RawMessage(`{"a":[1,2]}`)},
		},
	})
	if r.Status != 429 {
		t.Errorf("status %d, want the 429 override", r.Status)
	}
	e := decode(t, r.Body)
	want := map[string]any{
		"message": "every account is rate-limited", "type": "usage_limit_reached",
		"code": "codex_runtime_rotation_pool_exhausted", "request_id": "req_9",
		"category": "rate_limit_error", "retryable": true,
		"reason": "rate-limit", "retry_after_ms": json.Number("1500"), "hint": `run "rotor rotation status"`,
		"resets_at": json.Number("1767229200"), "resets_in_seconds": json.Number("2"),
	}
	for k, w := range want {
		if e[k] != w {
			t.Errorf("%s = %#v, want %#v", k, e[k], w)
		}
	}
	if sk, ok := e["account_skip_reasons"].(map[string]any); !ok || sk["1"] != "rate-limited" || sk["2"] != "rate-limited" {
		t.Errorf("account_skip_reasons = %#v", e["account_skip_reasons"])
	}
	if raw, ok := e["raw"].(map[string]any); !ok || len(raw["a"].([]any)) != 2 {
		t.Errorf("raw JSON extra = %#v", e["raw"])
	}
	if r.RetryAfterMS() != "1500" || r.RetryAfterSeconds() != "2" {
		t.Errorf("headers retry-after-ms %q, Retry-After %q; want 1500, 2", r.RetryAfterMS(), r.RetryAfterSeconds())
	}

	// Without the override, the same code is a 503 server_error.
	r = Build(Spec{Code: PoolExhausted, Extra: []Field{{"reason", "server-error"}}})
	if e := decode(t, r.Body); r.Status != 503 || e["type"] != "server_error" || e["reason"] != "server-error" {
		t.Errorf("plain pool exhausted: %d %s", r.Status, r.Body)
	}
}

func TestBuildInvalidExtraStaysValid(t *testing.T) {
	t.Parallel()
	r := Build(Spec{Code: ProxyError, Extra: []Field{
		{"bad_raw", json.RawMessage(`{not json`)},
		{"func", func() {}},
		{"nil", nil},
	}})
	e := decode(t, r.Body)
	for _, k := range []string{"bad_raw", "func", "nil"} {
		if v, ok := e[k]; !ok || v != nil {
			t.Errorf("%s = %#v, want null", k, v)
		}
	}
}

func TestRetryAfterHeaders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d       time.Duration
		ms, sec string
	}{
		{0, "", ""},
		{-time.Second, "", ""},
		{time.Millisecond, "1", "1"},
		{999 * time.Millisecond, "999", "1"},
		{time.Second, "1000", "1"},
		{1001 * time.Millisecond, "1001", "2"},
		{1500 * time.Millisecond, "1500", "2"},
		{60 * time.Second, "60000", "60"},
		{7 * 24 * time.Hour, "604800000", "604800"},
	} {
		r := Response{RetryAfter: tc.d}
		if r.RetryAfterMS() != tc.ms || r.RetryAfterSeconds() != tc.sec {
			t.Errorf("%v: retry-after-ms %q, Retry-After %q; want %q, %q", tc.d, r.RetryAfterMS(), r.RetryAfterSeconds(), tc.ms, tc.sec)
		}
	}
}

func TestRowForStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status        int
		typ, category string
		wantRetryable bool
	}{
		{400, TypeInvalidRequest, CategoryFatal, false},
		{422, TypeInvalidRequest, CategoryFatal, false},
		{401, TypeAuthentication, CategoryAuthentication, false},
		{403, TypePermission, CategoryAuthentication, false},
		{404, TypeNotFound, CategoryConfiguration, false},
		{408, TypeServer, CategoryTimeout, true},
		{429, TypeRateLimit, CategoryRateLimit, true},
		{500, TypeServer, CategoryTransient, true},
		{502, TypeServer, CategoryTransient, true},
		{503, TypeServer, CategoryTransient, true},
		{504, TypeServer, CategoryTimeout, true},
	} {
		r := RowForStatus("upstream_code", tc.status)
		if r.Code != "upstream_code" || r.Status != tc.status || r.Type != tc.typ || r.Category != tc.category || r.Retryable() != tc.wantRetryable {
			t.Errorf("RowForStatus(%d) = %+v (retryable %v), want %s/%s/%v", tc.status, r, r.Retryable(), tc.typ, tc.category, tc.wantRetryable)
		}
	}
	// An upstream code keeps its own name and status in the payload.
	r := Build(Spec{Code: "rate_limit_exceeded", Status: 429, Message: "slow down",
		Extra: []Field{{"upstream_status", 429}, {"upstream_request_id", "up_1"}}})
	e := decode(t, r.Body)
	if r.Status != 429 || e["code"] != "rate_limit_exceeded" || e["type"] != TypeRateLimit || e["retryable"] != true ||
		e["upstream_status"] != json.Number("429") || e["upstream_request_id"] != "up_1" {
		t.Errorf("upstream error: %d %s", r.Status, r.Body)
	}
}
