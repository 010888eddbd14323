package proxy

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/rotorproxy/rotor/accounts/homefs"
)

// InfoFile is the file `rotor serve` writes so clients and `rotor env` can
// find it.
const InfoFile = "proxy.json"

// Info is the content of proxy.json. It holds the client key, so the file
// is 0600 like every file in ROTOR_HOME.
type Info struct {
	URL       string    `json:"url"`
	PID       int       `json:"pid"`
	ClientKey string    `json:"client_key"`
	StartedAt time.Time `json:"started_at"`
}

// WriteInfo writes dir/proxy.json atomically.
func WriteInfo(dir string, in Info) error {
	data, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		return err
	}
	return homefs.WriteFile(filepath.Join(dir, InfoFile), append(data, '\n'))
}

// ReadInfo reads dir/proxy.json; os.ErrNotExist when no proxy runs there.
func ReadInfo(dir string) (Info, error) {
	var in Info
	data, err := os.ReadFile(filepath.Join(dir, InfoFile))
	if err != nil {
		return in, err
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return in, errors.New(filepath.Join(dir, InfoFile) + " is not valid JSON")
	}
	return in, nil
}

// RemoveInfo removes dir/proxy.json if it still describes process pid, so a
// proxy stopping never removes the file of another one started since.
func RemoveInfo(dir string, pid int) error {
	in, err := ReadInfo(dir)
	if err != nil || in.PID != pid {
		return nil
	}
	return os.Remove(filepath.Join(dir, InfoFile))
}

// ProcessAlive reports whether process pid runs, as a check of the pid in
// proxy.json; EPERM means it runs as another user.
func ProcessAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
