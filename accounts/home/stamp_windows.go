//go:build windows

package home

import "os"

// fileID is 0: Windows exposes no inode through os.FileInfo, and the
// modification time (100 ns resolution) and size tell versions apart.
func fileID(os.FileInfo) uint64 { return 0 }
