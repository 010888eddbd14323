package main

import (
	"net/url"
	"time"

	"github.com/valyala/fasthttp"
)

// runFloor is the floor under rotor: the least a proxy built on rotor's
// own HTTP stack (a fasthttp server in front of a fasthttp client) can do.
// It hands every request on as it came and streams the answer back, with
// no client key, account choice, body scan, failover or record. What rotor
// adds on top of it is the cost of rotor's own work; what it adds on top
// of direct is the cost of any proxy on this machine. It prints its address
// on stdout and serves until killed.
func runFloor(target string) error {
	u, err := url.Parse(target)
	if err != nil {
		return err
	}
	client := &fasthttp.HostClient{Addr: u.Host, IsTLS: u.Scheme == "https", StreamResponseBody: true, MaxConns: 4096, ReadBufferSize: 16 << 10,
		// fasthttp bounds a TLS handshake by WriteTimeout; none would fail it at once.
		WriteTimeout: time.Minute}
	srv := &fasthttp.Server{
		MaxRequestBodySize: 8 << 20,
		Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.Request.URI().SetScheme(u.Scheme) // a HostClient refuses a request of another scheme
			resp := fasthttp.AcquireResponse()
			if err := client.Do(&ctx.Request, resp); err != nil {
				fasthttp.ReleaseResponse(resp)
				ctx.Error(err.Error(), fasthttp.StatusBadGateway)
				return
			}
			resp.Header.CopyTo(&ctx.Response.Header)
			ctx.SetBodyStream(floorBody{resp}, resp.Header.ContentLength())
		},
	}
	ln, err := announce()
	if err != nil {
		return err
	}
	return srv.Serve(ln)
}

// floorBody streams an upstream answer to the client; the server closes
// it once written, which hands the upstream connection back.
type floorBody struct{ resp *fasthttp.Response }

func (b floorBody) Read(p []byte) (int, error) { return b.resp.BodyStream().Read(p) }

func (b floorBody) Close() error {
	err := b.resp.CloseBodyStream()
	fasthttp.ReleaseResponse(b.resp)
	return err
}
