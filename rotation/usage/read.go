package usage

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/rotorproxy/rotor/accounts/home"
)

// Read calls fn with every well-formed record in dir's usage log, the
// rotated-out file first, then the current one. Lines that are not records
// (a write cut short by kill -9, a foreign line) are skipped and counted.
// A missing log is empty.
func Read(dir string, fn func(Record)) (skipped int, err error) {
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
			n, err := readLines(old, fn)
			skipped += n
			if err != nil {
				return skipped, err
			}
		}
	}
	if cur != nil {
		n, err := readLines(cur, fn)
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

func readLines(r io.Reader, fn func(Record)) (skipped int, err error) {
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
				var u Record
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

// Tail follows a home's usage log: each Read delivers only the
// records appended since the last one, so a reader that keeps running
// sums (the dashboard) costs as little as the writes it follows, however
// long the log. It is not safe for concurrent use.
type Tail struct {
	dir string
	f   *os.File
	off int64 // bytes of f consumed: whole lines only
}

// NewTail follows dir's usage log from its beginning.
func NewTail(dir string) *Tail { return &Tail{dir: dir} }

// Read calls fn with every whole record appended since the last Read,
// across one rotation of the log. When it must start over (the first
// Read, or more than one rotation since), it first calls reset: fn then
// starts again from the oldest record the log holds, the rotated-out file
// included, and the caller drops what it summed before. A line still
// being written is left for the next Read.
func (t *Tail) Read(reset func(), fn func(Record)) error {
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
		// later; that line is not seen, as the Log doc allows.)
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
			readLines(old, fn)
		}
		t.f, t.off = cur, 0
	}
	n, err := readWholeLines(io.NewSectionReader(t.f, t.off, math.MaxInt64-t.off), fn)
	t.off += n
	return err
}

// Close releases the log file.
func (t *Tail) Close() error {
	if t.f == nil {
		return nil
	}
	err := t.f.Close()
	t.f, t.off = nil, 0
	return err
}

// readWholeLines is readLines for a file still being appended to: it
// stops before a last line that has no newline yet and returns how many
// bytes it consumed.
func readWholeLines(r io.Reader, fn func(Record)) (consumed int64, err error) {
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
		var u Record
		if len(line) > 1 && json.Unmarshal(line, &u) == nil && !u.Time.IsZero() {
			fn(u)
		}
	}
}
