//go:build !unix

package upstream

import (
	"net"

	"github.com/valyala/fasthttp"
)

// ClientGone cannot peek at a socket here; a client that left is noticed
// at the next write instead.
func ClientGone(*fasthttp.RequestCtx) bool { return false }

// watchable is false: a client is not watched here (see ClientWatch), and
// one that leaves is noticed at the next write.
func watchable(net.Conn) bool { return false }

// awaitLeaving is never called here (watchable).
func awaitLeaving(net.Conn, bool) bool { return false }
