package rotation

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rotorproxy/rotor/accounts/homefs"
)

// UsageFile is the usage log's file name in ROTOR_HOME.
const UsageFile = "usage.jsonl"

// Tokens are the token counts of one response.
type Tokens struct {
	Input     int64 `json:"input"`
	Cached    int64 `json:"cached"`
	Output    int64 `json:"output"`
	Reasoning int64 `json:"reasoning"`
	Total     int64 `json:"total"`
}

// Usage is one line of usage.jsonl: a finished request.
type Usage struct {
	Time      time.Time `json:"time"`
	RequestID string    `json:"request_id"`
	AccountID string    `json:"account_id"`
	Model     string    `json:"model,omitempty"`
	Status    int       `json:"status"`
	Code      string    `json:"code,omitempty"`
	Tokens    *Tokens   `json:"tokens,omitempty"`
	TTFBMS    int64     `json:"ttfb_ms,omitempty"`
	DurMS     int64     `json:"duration_ms"`
}

// UsageLog appends usage records to usage.jsonl. Each record is one write
// of one line to a file opened with O_APPEND, so concurrent writers in
// several processes never interleave within a line, and a kill -9 loses at
// most the record being written.
type UsageLog struct {
	mu sync.Mutex
	f  *os.File
}

// OpenUsageLog opens dir/usage.jsonl for appending (0600).
func OpenUsageLog(dir string) (*UsageLog, error) {
	f, err := os.OpenFile(filepath.Join(dir, UsageFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, homefs.FileMode)
	if err != nil {
		return nil, err
	}
	return &UsageLog{f: f}, nil
}

// Append writes rec; failures are dropped (usage is best-effort telemetry
// and must never fail a request).
func (u *UsageLog) Append(rec Usage) {
	line, err := json.Marshal(rec)
	if err != nil {
		return
	}
	line = append(line, '\n')
	u.mu.Lock()
	u.f.Write(line)
	u.mu.Unlock()
}

// Close closes the file.
func (u *UsageLog) Close() error { return u.f.Close() }
