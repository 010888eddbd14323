package jsonscan

import "golang.org/x/sys/cpu"

// marks reports which of the 64 bytes of blk are quotes and which are
// backslashes, bit k for byte k: SSE2, which every amd64 has, compares 16
// bytes at a time.
//
//go:noescape
func marks(blk *[64]byte) (quotes, backslashes uint64)

// haveDense is whether dense can run here: it needs AVX2, which Go's
// amd64 baseline does not promise; without it str reads block by block
// with marks.
var haveDense = cpu.X86.HasAVX2

// dense reads the text of a string from i, a backslash that escapes,
// as str's dense loop does, block after block in one call: the call per
// block and the loop per escape in Go cost more than the reading. It
// returns the index past the closing quote and true, or the first block
// it leaves to Go and false: one past len(b)-64, one with no backslash,
// or one with an invalid escape, or a \u escape whose digits cross into
// the next block, before its first unescaped quote.
//
//go:noescape
func dense(b []byte, i int) (j int, found bool)
