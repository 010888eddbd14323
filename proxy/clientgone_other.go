//go:build !unix

package proxy

import "github.com/valyala/fasthttp"

// clientGone cannot peek at a socket here; a client that left is noticed
// at the next write instead.
func clientGone(*fasthttp.RequestCtx) bool { return false }
