package jsonscan

// marks reports which of the 64 bytes of blk are quotes and which are
// backslashes, bit k for byte k: SSE2, which every amd64 has, compares 16
// bytes at a time.
//
//go:noescape
func marks(blk *[64]byte) (quotes, backslashes uint64)
