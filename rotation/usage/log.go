package usage

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rotorproxy/rotor/accounts/clock"
	"github.com/rotorproxy/rotor/accounts/home"
)

// Log rotation defaults. 8 MiB is tens of thousands of requests, so
// with the one old file kept a week of ordinary use stays readable while the
// disk cost stays bounded at about twice that.
const (
	DefaultMaxBytes      = 8 << 20
	DefaultCheckEvery    = 64
	DefaultCheckInterval = time.Second
	// DefaultFlushAfter is how long a record may wait in memory
	// before it is written: short enough that `rotor report` and the
	// dashboard never notice, long enough that a busy proxy writes many
	// records per write.
	DefaultFlushAfter = 100 * time.Millisecond
)

// batchMax is how many bytes of records wait in memory at most: past
// it, the append that crosses it writes them at once.
const batchMax = 64 << 10

// Options tune a Log; zero values take the defaults.
type Options struct {
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
	// before it is written (default DefaultFlushAfter). It is a real
	// wait, so it runs on the system's timers, not on Clock.
	FlushAfter time.Duration
}

// Log appends usage records to usage.jsonl. Append only queues a
// record in memory and returns: a request must not wait for a disk. The
// queue is written within FlushAfter, or as soon as it holds
// batchMax bytes, as whole lines in one write to a file opened with
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
type Log struct {
	path, old, lock string
	opt             Options

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

// Open opens dir/usage.jsonl for appending (0600) with the default
// options.
func Open(dir string) (*Log, error) {
	return OpenWith(dir, Options{})
}

// OpenWith opens dir/usage.jsonl for appending (0600) with opt.
func OpenWith(dir string, opt Options) (*Log, error) {
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = DefaultMaxBytes
	}
	if opt.Clock == nil {
		opt.Clock = clock.System{}
	}
	if opt.CheckEvery <= 0 {
		opt.CheckEvery = DefaultCheckEvery
	}
	if opt.CheckInterval <= 0 {
		opt.CheckInterval = DefaultCheckInterval
	}
	if opt.FlushAfter <= 0 {
		opt.FlushAfter = DefaultFlushAfter
	}
	u := &Log{
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
func (u *Log) Path() string { return u.path }

// reopen (re)opens the path and forgets the previous descriptor. Callers
// hold u.mu (or own u exclusively).
func (u *Log) reopen() error {
	// Read too: a flush looks at the last byte before it writes
	// (endsMidLine).
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

// reopenIfReplaced stats the path: when it names another file than ours
// (rotated by another process, or removed) it reopens; otherwise it
// refreshes the size, which other writers grow too. Callers hold u.mu.
func (u *Log) reopenIfReplaced(now time.Time) {
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
func (u *Log) Append(rec Record) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return
	}
	u.queue = append(rec.AppendJSON(u.queue), '\n')
	switch {
	case len(u.queue) >= batchMax:
		u.flushLocked()
	case !u.armed:
		u.armed = true
		u.flusher.Reset(u.opt.FlushAfter)
	}
}

// Flush writes every queued record now.
func (u *Log) Flush() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.flushLocked()
}

// flushLocked writes the queue: in one write, unless the file reaches
// MaxBytes on the way, where it rotates between two lines. Callers hold
// u.mu.
func (u *Log) flushLocked() {
	if u.armed {
		u.armed = false
		u.flusher.Stop()
	}
	now := u.opt.Clock.Now()
	rest := u.queue
	for len(rest) > 0 && !u.closed {
		if u.f == nil || u.since >= u.opt.CheckEvery || now.Sub(u.checked) >= u.opt.CheckInterval {
			u.reopenIfReplaced(now)
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
		if endsMidLine(u.f) {
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
	if cap(u.queue) > 4*batchMax {
		u.queue = nil // a burst's buffer is not kept for ever
	}
	u.queue = u.queue[:0]
}

// endsMidLine reports whether f's last byte is not a newline. Writes are
// whole lines under O_APPEND, so only a writer that died mid-write leaves
// one.
func endsMidLine(f *os.File) bool {
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
func (u *Log) rotate(now time.Time) {
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
func (u *Log) Close() error {
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
