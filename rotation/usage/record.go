// Package usage keeps usage.jsonl, the log of finished requests every
// rotor process on one ROTOR_HOME appends to: the writer (Log), which
// queues records and writes them behind the answer, bounded by rotation to
// usage.jsonl.1; the readers (Read, and Tail for a reader that keeps
// running sums); and the summaries `rotor report` prints (Summarize).
package usage

import (
	"encoding/json"
	"strconv"
	"time"
)

// Tokens are the token counts of one response.
type Tokens struct {
	Input     int64 `json:"input"`
	Cached    int64 `json:"cached"`
	Output    int64 `json:"output"`
	Reasoning int64 `json:"reasoning"`
	Total     int64 `json:"total"`
}

// Add adds o to t.
func (t *Tokens) Add(o Tokens) {
	t.Input += o.Input
	t.Cached += o.Cached
	t.Output += o.Output
	t.Reasoning += o.Reasoning
	t.Total += o.Total
}

// CacheHitRate is the share of input tokens the prompt cache served
// (cached ÷ input); ok is false when there was no input to share.
func (t *Tokens) CacheHitRate() (rate float64, ok bool) {
	if t.Input <= 0 {
		return 0, false
	}
	return float64(t.Cached) / float64(t.Input), true
}

// What session affinity did for a request that names a conversation
// (Record.Affinity): kept it on the account bound to it, moved it to
// another because that one could not serve, or bound it for the first
// time.
const (
	AffinityKept  = "kept"
	AffinityMoved = "moved"
	AffinityNew   = "new"
)

// Record is one line of usage.jsonl: a finished request.
type Record struct {
	Time      time.Time `json:"time"`
	RequestID string    `json:"request_id"`
	AccountID string    `json:"account_id"`
	Model     string    `json:"model,omitempty"`
	Status    int       `json:"status"`
	Code      string    `json:"code,omitempty"`
	Tokens    *Tokens   `json:"tokens,omitempty"`
	TTFBMS    int64     `json:"ttfb_ms,omitempty"`
	DurMS     int64     `json:"duration_ms"`
	// Affinity is AffinityKept, AffinityMoved or AffinityNew for an
	// answered request that names a conversation; empty otherwise (no
	// conversation, a pin, or no account answered).
	Affinity string `json:"affinity,omitempty"`
	// Context is ContextCut when the request went to an account that
	// could not be given the conversation's summarized earlier context (a
	// compaction another account made, docs/codex.md); empty otherwise.
	Context string `json:"context,omitempty"`
	// Credits: the account served the request on credits, past a full
	// window's included quota (docs/selection.md).
	Credits bool `json:"credits,omitempty"`
	// Limit is the limit family that metered the request when it is not
	// the account's main one (docs/selection.md).
	Limit string `json:"limit,omitempty"`
	// Tier is the service_tier the request asked for ("priority" is
	// Codex's Fast, "flex"); empty when it asked for none.
	Tier string `json:"tier,omitempty"`
}

// ContextCut is Record.Context for a conversation whose summarized
// earlier context was left behind on another account.
const ContextCut = "cut"

// AppendJSON appends u's line of usage.jsonl to b: the bytes
// json.Marshal(u) makes, without its reflection and its allocations, since
// every request writes one. A string that needs escaping (quotes,
// backslashes, control characters, <, > and &) or is not plain ASCII goes
// through json.Marshal, so escaping stays exactly encoding/json's.
func (u *Record) AppendJSON(b []byte) []byte {
	b = append(b, `{"time":"`...)
	b = u.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","request_id":`...)
	b = appendJSONString(b, u.RequestID)
	b = append(b, `,"account_id":`...)
	b = appendJSONString(b, u.AccountID)
	if u.Model != "" {
		b = append(b, `,"model":`...)
		b = appendJSONString(b, u.Model)
	}
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(u.Status), 10)
	if u.Code != "" {
		b = append(b, `,"code":`...)
		b = appendJSONString(b, u.Code)
	}
	if t := u.Tokens; t != nil {
		for _, f := range [...]struct {
			name string
			v    int64
		}{{`,"tokens":{"input":`, t.Input}, {`,"cached":`, t.Cached}, {`,"output":`, t.Output},
			{`,"reasoning":`, t.Reasoning}, {`,"total":`, t.Total}} {
			b = strconv.AppendInt(append(b, f.name...), f.v, 10)
		}
		b = append(b, '}')
	}
	if u.TTFBMS != 0 {
		b = append(b, `,"ttfb_ms":`...)
		b = strconv.AppendInt(b, u.TTFBMS, 10)
	}
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendInt(b, u.DurMS, 10)
	if u.Affinity != "" {
		b = append(b, `,"affinity":`...)
		b = appendJSONString(b, u.Affinity)
	}
	if u.Context != "" {
		b = append(b, `,"context":`...)
		b = appendJSONString(b, u.Context)
	}
	if u.Credits {
		b = append(b, `,"credits":true`...)
	}
	if u.Limit != "" {
		b = append(b, `,"limit":`...)
		b = appendJSONString(b, u.Limit)
	}
	if u.Tier != "" {
		b = append(b, `,"tier":`...)
		b = appendJSONString(b, u.Tier)
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string, as encoding/json writes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // escapes, HTML-safe ones and invalid UTF-8 too
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// ErrorCode is the code a usage record is counted under as an error, or ""
// when the request succeeded: its own code (stream_interrupted,
// client_closed, a response.failed code...), else "http_<status>" for an
// HTTP error status.
func (u *Record) ErrorCode() string {
	if u.Code != "" {
		return u.Code
	}
	if u.Status >= 400 {
		return "http_" + strconv.Itoa(u.Status)
	}
	return ""
}
