//go:build unix

package upstream

import (
	"errors"
	"net"
	"syscall"

	"github.com/valyala/fasthttp"
)

// ClientGone reports whether the client of ctx has closed its connection,
// without consuming a byte: it peeks at the socket. fasthttp reads nothing
// while a handler runs, so an orderly close or a reset waits there.
func ClientGone(ctx *fasthttp.RequestCtx) bool {
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

// watchable reports whether awaitLeaving can watch c: it is a socket.
func watchable(c net.Conn) bool {
	_, ok := c.(syscall.Conn)
	return ok
}

// awaitLeaving waits until the client of c leaves, and reports whether it
// did; false is a wait ended otherwise (c's read deadline, set to wake
// it). It peeks at the socket, consuming nothing, and between looks it
// waits in the network poller for the socket to become readable, so it
// costs nothing while the client stays quiet. A client that leaves closes
// its connection or resets it; on a WebSocket (frames) it may first send
// a close frame, which then is what is seen. Other bytes waiting (a pong,
// a pipelined request) hide an end of stream behind them: that client is
// noticed at the next write instead.
func awaitLeaving(c net.Conn, frames bool) bool {
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return false
	}
	left := false
	err = rc.Read(func(fd uintptr) bool {
		var b [128]byte // a close frame behind a pong or two: a pong to rotor's ping is 6 bytes
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == nil:
			// Data that is no goodbye: wait for more. The poller wakes
			// on new bytes only, so the same bytes are not looked at
			// again and again.
			left = n == 0 || frames && goodbye(b[:n])
			return left
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EWOULDBLOCK), errors.Is(err, syscall.EINTR):
			return false
		}
		left = true // reset or another hard error
		return true
	})
	return left && err == nil
}
