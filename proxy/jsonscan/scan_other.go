//go:build !amd64

package jsonscan

// marks reports which of the 64 bytes of blk are quotes and which are
// backslashes, bit k for byte k.
func marks(blk *[64]byte) (quotes, backslashes uint64) {
	return marksGeneric(blk)
}
