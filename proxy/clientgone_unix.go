//go:build unix

package proxy

import (
	"errors"
	"syscall"

	"github.com/valyala/fasthttp"
)

// clientGone reports whether the client of ctx has closed its connection,
// without consuming a byte: it peeks at the socket. fasthttp reads nothing
// while a handler runs, so an orderly close or a reset waits there.
func clientGone(ctx *fasthttp.RequestCtx) bool {
	sc, ok := ctx.Conn().(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == nil:
			gone = n == 0 // end of stream: the client closed
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EWOULDBLOCK), errors.Is(err, syscall.EINTR):
		default:
			gone = true // reset or another hard error
		}
		return true // never wait for readability
	})
	return gone
}
