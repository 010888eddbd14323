package home

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// DecodeJSON decodes data, the content of a file of ROTOR_HOME, into v: one
// JSON value and nothing after it. Anything after the value means the
// file is damaged, and a rewrite would silently drop it.
func DecodeJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("invalid JSON: unexpected data after the top-level object")
	}
	return nil
}

// UpdateJSON is the read-modify-write of a JSON file of ROTOR_HOME at
// path: under the lock file lock (waiting at most timeout) it reads the
// current value with load, which must fail on a damaged file so that it
// is never overwritten, runs edit on it, writes what edit returns
// (indented) with WriteFile, then runs each of then, still under the lock
// (a backup of what was written). Nothing is written when load or edit
// fails.
func UpdateJSON[T any](path, lock string, timeout time.Duration, load func() (T, error), edit func(T) (T, error), then ...func() error) (T, error) {
	var zero T
	l, err := LockFile(lock, false, timeout)
	if err != nil {
		return zero, err
	}
	defer l.Unlock()
	v, err := load()
	if err != nil {
		return zero, err
	}
	if v, err = edit(v); err != nil {
		return zero, err
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return zero, err
	}
	if err := WriteFile(path, append(data, '\n')); err != nil {
		return zero, fmt.Errorf("cannot write %s: %w", path, err)
	}
	for _, f := range then {
		if err := f(); err != nil {
			return zero, err
		}
	}
	return v, nil
}
