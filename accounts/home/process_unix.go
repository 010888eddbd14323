//go:build unix

package home

import (
	"errors"
	"syscall"
)

// ProcessAlive reports whether process pid runs, as a check of the pid in
// a serve record; EPERM means it runs as another user.
func ProcessAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
