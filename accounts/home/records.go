package home

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// InfoFile is the record clients and `rotor env` read: the serve to use
// when several run on one home (docs/files.md).
const InfoFile = "proxy.json"

// Each serve also keeps a record of its own, proxy-<pid>.json, so that
// serves on one home never overwrite or delete each other's: proxy.json
// is only ever rewritten to name a live serve.
const (
	recordPrefix = "proxy-"
	recordSuffix = ".json"
	// serveLock orders the serves' writes of their records.
	serveLock = ".proxy.lock"
)

// DefaultPort is serve's default port; its serve is the one to use.
const DefaultPort = 8787

// Info is a serve's record. It holds the client key, so the file is 0600
// like every file in ROTOR_HOME.
type Info struct {
	URL       string    `json:"url"`
	PID       int       `json:"pid"`
	ClientKey string    `json:"client_key"`
	StartedAt time.Time `json:"started_at"`
}

// RecordName is the name of the record of the serve with pid.
func RecordName(pid int) string { return fmt.Sprintf("%s%d%s", recordPrefix, pid, recordSuffix) }

// Holder returns the live serve on dir that listens on port, if any.
func Holder(dir string, port int) (Info, bool) {
	ins, _, err := Infos(dir)
	if err != nil {
		return Info{}, false
	}
	for _, in := range ins {
		u, err := url.Parse(in.URL)
		if err == nil && u.Port() == strconv.Itoa(port) && ProcessAlive(in.PID) {
			return in, true
		}
	}
	return Info{}, false
}

// defaultPort reports whether in serves on DefaultPort.
func (in Info) defaultPort() bool {
	u, err := url.Parse(in.URL)
	return err == nil && u.Port() == fmt.Sprint(DefaultPort)
}

// WriteInfo records a starting serve: its own record, and proxy.json when
// that names no live serve, or when in is on the default port and the
// serve it names is not.
func WriteInfo(dir string, in Info) error {
	data, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		return err
	}
	l, err := LockFile(filepath.Join(dir, serveLock), false, 5*time.Second)
	if err != nil {
		return err
	}
	defer l.Unlock()
	if err := WriteFile(filepath.Join(dir, RecordName(in.PID)), append(data, '\n')); err != nil {
		return err
	}
	cur, err := ReadInfo(dir)
	if err == nil && cur.PID != in.PID && ProcessAlive(cur.PID) && (cur.defaultPort() || !in.defaultPort()) {
		return nil
	}
	return WriteFile(filepath.Join(dir, InfoFile), append(data, '\n'))
}

// ReadInfo reads proxy.json; os.ErrNotExist when there is none. The serve
// it names may have died: see LiveInfo.
func ReadInfo(dir string) (Info, error) {
	return readRecord(filepath.Join(dir, InfoFile))
}

func readRecord(path string) (Info, error) {
	var in Info
	data, err := os.ReadFile(path)
	if err != nil {
		return in, err
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return in, errors.New(path + " is not valid JSON")
	}
	return in, nil
}

// Infos returns every serve record on the home, proxy.json's serve
// included once, ordered as LiveInfo prefers them (the default port
// first, then the longest running); records that do not parse are left
// out, and bad names them.
func Infos(dir string) (ins []Info, bad []string, err error) {
	names, err := filepath.Glob(filepath.Join(dir, recordPrefix+"*"+recordSuffix))
	if err != nil {
		return nil, nil, err
	}
	names = append(names, filepath.Join(dir, InfoFile))
	for _, name := range names {
		in, err := readRecord(name)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			bad = append(bad, filepath.Base(name))
		case !slices.ContainsFunc(ins, func(o Info) bool { return o.PID == in.PID }):
			ins = append(ins, in)
		}
	}
	slices.SortStableFunc(ins, func(a, b Info) int {
		if a.defaultPort() != b.defaultPort() {
			if a.defaultPort() {
				return -1
			}
			return 1
		}
		return a.StartedAt.Compare(b.StartedAt)
	})
	return ins, bad, nil
}

// LiveInfo returns the serve a client should use: a live one, the default
// port first. When no serve runs it returns os.ErrNotExist, wrapped in a
// *DamagedRecordsError when some record could not be read (one of those
// may be the serve's).
func LiveInfo(dir string) (Info, error) {
	ins, bad, err := Infos(dir)
	if err != nil {
		return Info{}, err
	}
	for _, in := range ins {
		if ProcessAlive(in.PID) {
			return in, nil
		}
	}
	if len(bad) > 0 {
		return Info{}, &DamagedRecordsError{Names: bad}
	}
	return Info{}, os.ErrNotExist
}

// DamagedRecordsError is serve records that are not JSON: a client cannot
// tell which serve they were written by, or where it listens.
type DamagedRecordsError struct{ Names []string }

func (e *DamagedRecordsError) Error() string {
	return strings.Join(e.Names, ", ") + " cannot be read (not JSON)"
}

// Unwrap makes it os.ErrNotExist too: no serve can be found from them.
func (e *DamagedRecordsError) Unwrap() error { return os.ErrNotExist }

// RemoveInfo removes the records of the serve with pid: its own, and
// proxy.json if it names that serve, which then names the best other
// live serve, or goes. A serve stopping never removes another's record.
func RemoveInfo(dir string, pid int) error {
	l, err := LockFile(filepath.Join(dir, serveLock), false, 5*time.Second)
	if err != nil {
		return err
	}
	defer l.Unlock()
	err = os.Remove(filepath.Join(dir, RecordName(pid)))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	cur, rerr := ReadInfo(dir)
	if rerr != nil || cur.PID != pid {
		return err
	}
	ins, _, _ := Infos(dir)
	for _, in := range ins {
		if in.PID != pid && ProcessAlive(in.PID) {
			data, _ := json.MarshalIndent(in, "", "  ")
			return cmp.Or(err, WriteFile(filepath.Join(dir, InfoFile), append(data, '\n')))
		}
	}
	if rmErr := os.Remove(filepath.Join(dir, InfoFile)); !errors.Is(rmErr, os.ErrNotExist) {
		err = cmp.Or(err, rmErr)
	}
	return err
}

// IsRecord reports whether name (a file in ROTOR_HOME) is a serve record.
func IsRecord(name string) bool {
	return name == InfoFile || strings.HasPrefix(name, recordPrefix) && strings.HasSuffix(name, recordSuffix)
}
