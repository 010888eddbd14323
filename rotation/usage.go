package rotation

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/home"
)

// Usage log rotation defaults. 8 MiB is tens of thousands of requests, so
// with the one old file kept a week of ordinary use stays readable while the
// disk cost stays bounded at about twice that.
const (
	DefaultUsageMaxBytes      = 8 << 20
	DefaultUsageCheckEvery    = 64
	DefaultUsageCheckInterval = time.Second
	// DefaultUsageFlushAfter is how long a record may wait in memory
	// before it is written: short enough that `rotor report` and the
	// dashboard never notice, long enough that a busy proxy writes many
	// records per write.
	DefaultUsageFlushAfter = 100 * time.Millisecond
)

// usageBatchMax is how many bytes of records wait in memory at most: past
// it, the append that crosses it writes them at once.
const usageBatchMax = 64 << 10

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

// AppendJSON appends u's line of usage.jsonl to b: the bytes
// json.Marshal(u) makes, without its reflection and its allocations, since
// every request writes one. A string that needs escaping (quotes,
// backslashes, control characters, <, > and &) or is not plain ASCII goes
// through json.Marshal, so escaping stays exactly encoding/json's.
func (u *Usage) AppendJSON(b []byte) []byte {
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
func (u *Usage) ErrorCode() string {
	if u.Code != "" {
		return u.Code
	}
	if u.Status >= 400 {
		return "http_" + strconv.Itoa(u.Status)
	}
	return ""
}

// UsageOptions tune a UsageLog; zero values take the defaults.
type UsageOptions struct {
	// MaxBytes is the size past which usage.jsonl is renamed to
	// usage.jsonl.1 (replacing the previous one) and started afresh.
	MaxBytes int64
	// CheckEvery and CheckInterval say how often an open log looks at the
	// path again (one stat): after that many records written, or that
	// much time, whichever comes first. That is how a log notices another
	// process rotated the file under its O_APPEND descriptor.
	CheckEvery    int
	CheckInterval time.Duration
	// Clock times CheckInterval (default clock.System).
	Clock clock.Clock
	// FlushAfter bounds how long an appended record waits in memory
	// before it is written (default DefaultUsageFlushAfter). It is a real
	// wait, so it runs on the system's timers, not on Clock.
	FlushAfter time.Duration
}

// UsageLog appends usage records to usage.jsonl. Append only queues a
// record in memory and returns: a request must not wait for a disk. The
// queue is written within FlushAfter, or as soon as it holds
// usageBatchMax bytes, as whole lines in one write to a file opened with
// O_APPEND, so concurrent writers in several processes never interleave
// within a line, and a busy proxy pays one write for many records. Flush
// writes the queue now; Close writes it and closes the file. A kill -9
// loses the records of the last FlushAfter at most, and a write cut short
// leaves a line without its newline, which the next writer ends before it
// writes.
//
// The file is bounded: once it passes MaxBytes, the writer that notices
// renames it to usage.jsonl.1 under a cross-process lock and opens a new
// one. The other writers still hold the old file open; each looks at the
// path every few appends (or every second) and reopens when the path names
// another file, so at most a few records land in usage.jsonl.1 late, where
// readers still find them. Nothing here ever fails a request: every error
// drops the record or postpones the rotation.
type UsageLog struct {
	path, old, lock string
	opt             UsageOptions

	mu      sync.Mutex
	f       *os.File
	fi      os.FileInfo // of f, to tell whether the path still names it
	size    int64       // of the file at the path, as last seen plus our writes
	since   int         // records written since the last look at the path
	checked time.Time   // when we last looked
	closed  bool
	queue   []byte      // whole lines not yet written
	flusher *time.Timer // armed while queue is not empty
	armed   bool
}

// OpenUsageLog opens dir/usage.jsonl for appending (0600) with the default
// options.
func OpenUsageLog(dir string) (*UsageLog, error) {
	return OpenUsageLogWith(dir, UsageOptions{})
}

// OpenUsageLogWith opens dir/usage.jsonl for appending (0600) with opt.
func OpenUsageLogWith(dir string, opt UsageOptions) (*UsageLog, error) {
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = DefaultUsageMaxBytes
	}
	if opt.Clock == nil {
		opt.Clock = clock.System{}
	}
	if opt.CheckEvery <= 0 {
		opt.CheckEvery = DefaultUsageCheckEvery
	}
	if opt.CheckInterval <= 0 {
		opt.CheckInterval = DefaultUsageCheckInterval
	}
	if opt.FlushAfter <= 0 {
		opt.FlushAfter = DefaultUsageFlushAfter
	}
	u := &UsageLog{
		path: filepath.Join(dir, home.UsageFile),
		old:  filepath.Join(dir, home.UsageOldFile),
		lock: filepath.Join(dir, home.UsageLock),
		opt:  opt,
	}
	if err := u.reopen(); err != nil {
		return nil, err
	}
	u.checked = opt.Clock.Now()
	u.flusher = time.AfterFunc(opt.FlushAfter, u.Flush)
	u.flusher.Stop() // Append arms it
	return u, nil
}

// Path is the path of usage.jsonl.
func (u *UsageLog) Path() string { return u.path }

// reopen (re)opens the path and forgets the previous descriptor. Callers
// hold u.mu (or own u exclusively).
func (u *UsageLog) reopen() error {
	// Read too: Append looks at the last byte before it writes.
	f, err := os.OpenFile(u.path, os.O_RDWR|os.O_APPEND|os.O_CREATE, home.FileMode)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	if u.f != nil {
		u.f.Close()
	}
	u.f, u.fi, u.size = f, fi, fi.Size()
	return nil
}

// look stats the path: when it names another file than ours (rotated by
// another process, or removed) it reopens; otherwise it refreshes the size,
// which other writers grow too. Callers hold u.mu.
func (u *UsageLog) look(now time.Time) {
	u.since, u.checked = 0, now
	fi, err := os.Stat(u.path)
	if err == nil && u.f != nil && os.SameFile(fi, u.fi) {
		u.size = fi.Size()
		return
	}
	// On failure keep writing where we were, or drop records until the
	// next look when there is nowhere.
	_ = u.reopen()
}

// Append queues rec to be written within FlushAfter; failures are
// dropped (usage is best-effort telemetry and must never fail a request).
func (u *UsageLog) Append(rec Usage) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return
	}
	u.queue = append(rec.AppendJSON(u.queue), '\n')
	switch {
	case len(u.queue) >= usageBatchMax:
		u.flushLocked()
	case !u.armed:
		u.armed = true
		u.flusher.Reset(u.opt.FlushAfter)
	}
}

// Flush writes every queued record now.
func (u *UsageLog) Flush() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.flushLocked()
}

// flushLocked writes the queue: in one write, unless the file reaches
// MaxBytes on the way, where it rotates between two lines. Callers hold
// u.mu.
func (u *UsageLog) flushLocked() {
	if u.armed {
		u.armed = false
		u.flusher.Stop()
	}
	now := u.opt.Clock.Now()
	rest := u.queue
	for len(rest) > 0 && !u.closed {
		if u.f == nil || u.since >= u.opt.CheckEvery || now.Sub(u.checked) >= u.opt.CheckInterval {
			u.look(now)
		}
		if u.f == nil {
			break // nowhere to write: drop the records until the next look
		}
		batch := rest
		if room := u.opt.MaxBytes - u.size; int64(len(batch)) > room {
			// Up to the last line that fits, and at least one line.
			end := bytes.LastIndexByte(batch[:max(room, 0)], '\n') + 1
			if end == 0 {
				end = bytes.IndexByte(batch, '\n') + 1
			}
			batch = batch[:end]
		}
		if torn(u.f) {
			// A writer killed mid-write (kill -9, a full disk) left a
			// line without its newline: end it, so this batch's first
			// record is not glued to it.
			u.f.Write([]byte{'\n'})
		}
		n, _ := u.f.Write(batch)
		u.size += int64(n)
		u.since += bytes.Count(batch, []byte{'\n'})
		rest = rest[len(batch):]
		if u.size >= u.opt.MaxBytes {
			u.rotate(now)
		}
	}
	if cap(u.queue) > 4*usageBatchMax {
		u.queue = nil // a burst's buffer is not kept for ever
	}
	u.queue = u.queue[:0]
}

// torn reports whether f's last byte is not a newline. Writes are whole
// lines under O_APPEND, so only a writer that died mid-write leaves one.
func torn(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return false
	}
	var b [1]byte
	_, err = f.ReadAt(b[:], fi.Size()-1)
	return err == nil && b[0] != '\n'
}

// rotate renames a full usage.jsonl to usage.jsonl.1 and reopens. The lock
// is only tried, never waited for: a writer that finds it taken lets the
// process holding it rotate, and looks at the path on its next append.
// Callers hold u.mu.
func (u *UsageLog) rotate(now time.Time) {
	l, err := home.LockFile(u.lock, false, 0)
	if err != nil {
		u.since = u.opt.CheckEvery
		return
	}
	defer l.Unlock()
	fi, err := os.Stat(u.path)
	switch {
	case err != nil || !os.SameFile(fi, u.fi):
		// Another writer rotated first; follow it to the new file.
	case fi.Size() < u.opt.MaxBytes:
		u.size = fi.Size() // our count ran ahead (the file was truncated)
		return
	default:
		if os.Rename(u.path, u.old) != nil {
			u.since = u.opt.CheckEvery
			return
		}
	}
	u.reopen()
	u.since, u.checked = 0, now
}

// Close writes the queued records and closes the file; later appends are
// dropped.
func (u *UsageLog) Close() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.flushLocked()
	u.closed = true
	if u.f == nil {
		return nil
	}
	err := u.f.Close()
	u.f = nil
	return err
}

// ReadUsage calls fn with every well-formed record in dir's usage log, the
// rotated-out file first, then the current one. Lines that are not records
// (a write cut short by kill -9, a foreign line) are skipped and counted.
// A missing log is empty.
func ReadUsage(dir string, fn func(Usage)) (skipped int, err error) {
	// Open the current file first: if a rotation happens between the two
	// opens, both descriptors name the same file, which is read once.
	cur, err := os.Open(filepath.Join(dir, home.UsageFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	if cur != nil {
		defer cur.Close()
	}
	old, err := os.Open(filepath.Join(dir, home.UsageOldFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	if old != nil {
		defer old.Close()
		if cur == nil || !sameOpenFile(old, cur) {
			n, err := readUsageLines(old, fn)
			skipped += n
			if err != nil {
				return skipped, err
			}
		}
	}
	if cur != nil {
		n, err := readUsageLines(cur, fn)
		skipped += n
		if err != nil {
			return skipped, err
		}
	}
	return skipped, nil
}

func sameOpenFile(a, b *os.File) bool {
	ai, err1 := a.Stat()
	bi, err2 := b.Stat()
	return err1 == nil && err2 == nil && os.SameFile(ai, bi)
}

func readUsageLines(r io.Reader, fn func(Usage)) (skipped int, err error) {
	// A line longer than the buffer is not a record rotor wrote (they are
	// well under 1 KiB) and is skipped.
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// An overlong line: skip to its end.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			skipped++
			if err == io.EOF {
				return skipped, nil
			}
			if err != nil {
				return skipped, err
			}
			continue
		}
		if len(line) > 0 {
			if line[len(line)-1] != '\n' {
				// The last line has no newline: a write in progress or cut
				// short. Either way not a whole record yet.
				skipped++
			} else if len(line) > 1 {
				var u Usage
				if json.Unmarshal(line, &u) != nil || u.Time.IsZero() {
					skipped++
				} else {
					fn(u)
				}
			}
		}
		if err == io.EOF {
			return skipped, nil
		}
		if err != nil {
			return skipped, err
		}
	}
}

// UsageWindow is a span of time, ending now, that a usage summary covers.
type UsageWindow struct {
	Name string
	Span time.Duration
}

// ReportWindows are the windows `rotor report` summarizes (SPEC §3).
var ReportWindows = []UsageWindow{
	{Name: "1h", Span: time.Hour},
	{Name: "24h", Span: 24 * time.Hour},
	{Name: "7d", Span: 7 * 24 * time.Hour},
}

// UsageCounts is what a set of usage records adds up to.
type UsageCounts struct {
	Requests int64
	// Errors counts the records with an error code (see Usage.ErrorCode),
	// and ErrorsByCode splits them by that code.
	Errors       int64
	ErrorsByCode map[string]int64
	ByStatus     map[int]int64
	Tokens       Tokens
}

func (c *UsageCounts) add(u *Usage) {
	c.Requests++
	if c.ByStatus == nil {
		c.ByStatus = make(map[int]int64)
	}
	c.ByStatus[u.Status]++
	if code := u.ErrorCode(); code != "" {
		c.Errors++
		if c.ErrorsByCode == nil {
			c.ErrorsByCode = make(map[string]int64)
		}
		c.ErrorsByCode[code]++
	}
	if u.Tokens != nil {
		c.Tokens.Add(*u.Tokens)
	}
}

// UsageSummary adds up the records of one window, in total, per account id
// and per model ("" for records without one).
type UsageSummary struct {
	Window    UsageWindow
	Since     time.Time
	Total     UsageCounts
	ByAccount map[string]*UsageCounts
	ByModel   map[string]*UsageCounts
}

func (s *UsageSummary) add(u *Usage) {
	s.Total.add(u)
	for _, kv := range []struct {
		m   map[string]*UsageCounts
		key string
	}{{s.ByAccount, u.AccountID}, {s.ByModel, u.Model}} {
		c := kv.m[kv.key]
		if c == nil {
			c = &UsageCounts{}
			kv.m[kv.key] = c
		}
		c.add(u)
	}
}

// UsageReport is the usage log summarized over several windows.
type UsageReport struct {
	Windows []UsageSummary
	// Oldest is the time of the oldest record still on disk (zero when the
	// log is empty): windows reaching further back than it are incomplete,
	// because rotation dropped what came before.
	Oldest time.Time
	// Records is how many records were read, Skipped how many lines were
	// not records.
	Records int64
	Skipped int64
}

// SummarizeUsage reads dir's usage log once and adds up the records of each
// window ending at now. Records from the future (a clock that moved back)
// count in every window.
func SummarizeUsage(dir string, now time.Time, windows []UsageWindow) (UsageReport, error) {
	rep := UsageReport{Windows: make([]UsageSummary, len(windows))}
	for i, w := range windows {
		rep.Windows[i] = UsageSummary{Window: w, Since: now.Add(-w.Span),
			ByAccount: map[string]*UsageCounts{}, ByModel: map[string]*UsageCounts{}}
	}
	skipped, err := ReadUsage(dir, func(u Usage) {
		rep.Records++
		if rep.Oldest.IsZero() || u.Time.Before(rep.Oldest) {
			rep.Oldest = u.Time
		}
		for i := range rep.Windows {
			if !u.Time.Before(rep.Windows[i].Since) {
				rep.Windows[i].add(&u)
			}
		}
	})
	rep.Skipped = int64(skipped)
	return rep, err
}

// UsageTail follows a home's usage log: each Read delivers only the
// records appended since the last one, so a reader that keeps running
// sums (the dashboard) costs as little as the writes it follows, however
// long the log. It is not safe for concurrent use.
type UsageTail struct {
	dir string
	f   *os.File
	off int64 // bytes of f consumed: whole lines only
}

// NewUsageTail follows dir's usage log from its beginning.
func NewUsageTail(dir string) *UsageTail { return &UsageTail{dir: dir} }

// Read calls fn with every whole record appended since the last Read,
// across one rotation of the log. When it must start over (the first
// Read, or more than one rotation since), it first calls reset: fn then
// starts again from the oldest record the log holds, the rotated-out file
// included, and the caller drops what it summed before. A line still
// being written is left for the next Read.
func (t *UsageTail) Read(reset func(), fn func(Usage)) error {
	cur, err := os.Open(filepath.Join(t.dir, home.UsageFile))
	if errors.Is(err, os.ErrNotExist) {
		if t.f != nil {
			reset()
		}
		return t.Close()
	}
	if err != nil {
		return err
	}
	old, _ := os.Open(filepath.Join(t.dir, home.UsageOldFile))
	if old != nil {
		defer old.Close()
	}
	switch {
	case t.f != nil && sameOpenFile(t.f, cur):
		cur.Close()
	case t.f != nil && old != nil && sameOpenFile(t.f, old):
		// Rotated once since the last Read: finish the file followed so
		// far, then follow the new one from its start. Nothing is read
		// twice, so the caller keeps its sums. (A writer that had not
		// noticed the rotation may still add a line to the old file
		// later; that line is not seen, as the UsageLog doc allows.)
		n, err := readWholeLines(io.NewSectionReader(t.f, t.off, math.MaxInt64-t.off), fn)
		t.off += n
		if err != nil {
			cur.Close()
			return err
		}
		t.f.Close()
		t.f, t.off = cur, 0
	default:
		// First Read, or the file followed is gone: start over.
		t.Close()
		reset()
		if old != nil && !sameOpenFile(old, cur) {
			readUsageLines(old, fn)
		}
		t.f, t.off = cur, 0
	}
	n, err := readWholeLines(io.NewSectionReader(t.f, t.off, math.MaxInt64-t.off), fn)
	t.off += n
	return err
}

// Close releases the log file.
func (t *UsageTail) Close() error {
	if t.f == nil {
		return nil
	}
	err := t.f.Close()
	t.f, t.off = nil, 0
	return err
}

// readWholeLines is readUsageLines for a file still being appended to: it
// stops before a last line that has no newline yet and returns how many
// bytes it consumed.
func readWholeLines(r io.Reader, fn func(Usage)) (consumed int64, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	long := false // inside a line longer than the buffer: skipped
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			consumed += int64(len(line))
			long = true
			continue
		case err == io.EOF:
			if long {
				consumed += int64(len(line)) // the rest of a skipped line
			}
			return consumed, nil
		case err != nil:
			return consumed, err
		}
		consumed += int64(len(line))
		if long {
			long = false
			continue
		}
		var u Usage
		if len(line) > 1 && json.Unmarshal(line, &u) == nil && !u.Time.IsZero() {
			fn(u)
		}
	}
}
