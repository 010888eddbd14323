package home

import (
	"os"
	"time"
)

// Stamp identifies one version of a file cheaply (modification time, size
// and file identity), so watchers can tell a change without reading the
// file.
type Stamp struct {
	ModTime time.Time
	Size    int64
	ID      uint64 // atomic writes rename a new file in, so this changes too (0 where unknown)
	Exists  bool
}

// StatStamp returns the stamp of path; the zero Stamp when it is missing.
func StatStamp(path string) Stamp {
	fi, err := os.Stat(path)
	if err != nil {
		return Stamp{}
	}
	return Stamp{ModTime: fi.ModTime(), Size: fi.Size(), ID: fileID(fi), Exists: true}
}
