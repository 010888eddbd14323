//go:build !amd64

package jsonscan

// marks reports which of the 64 bytes of blk are quotes and which are
// backslashes, bit k for byte k.
func marks(blk *[64]byte) (quotes, backslashes uint64) {
	return marksGeneric(blk)
}

// haveDense is false: str reads dense text block by block, in Go.
const haveDense = false

// dense is never called where there is no assembly for it.
func dense(b []byte, i int) (j int, found bool) {
	return i, false
}
