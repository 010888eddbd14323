//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly || windows)

package secrets

import (
	"fmt"
	"os"
	"runtime"
)

// lockFile refuses to run unlocked: without a cross-process lock, concurrent
// rotor processes could lose each other's secrets.
func lockFile(*os.File, bool) error {
	return fmt.Errorf("file locking is not implemented on %s", runtime.GOOS)
}

func syncDir(string) error { return nil }
