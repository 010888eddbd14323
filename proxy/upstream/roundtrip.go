package upstream

import (
	"bufio"
	"net"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/proxy/chunked"
)

// roundTrip is how every upstream HTTP request goes out: fasthttp's own
// round trip (its DefaultTransport) with two things changed. The connection
// the request is sent on is attached to the attempt's ClientWatch (the
// request's watchKey value), from before the request is written until its
// answer's body is closed, so a client that leaves can close it; and it is
// detached before fasthttp may hand it to another request. fasthttp's
// client offers no other way to learn which pooled connection a request
// uses, nor to cancel one. And the answer's body is read with rotor's own
// framing (chunked.Body), which tells a body's end from the connection's.
//
// Otherwise it does what DefaultTransport does for the client rotor
// configures (newUpstreamClient): a write deadline of WriteTimeout, no
// read timeout (idleConn bounds each read), no MaxConnDuration, the body
// always streamed, the connection returned to the pool once the body is
// closed cleanly, closed otherwise.
type roundTrip struct{}

// watchKey is the fasthttp request user value that holds the attempt's
// ClientWatch.
type watchKey struct{}

// SetWatch makes cw (nil: none) the watch of req's attempt: the round
// trip attaches the connection req goes out on to it.
func SetWatch(req *fasthttp.Request, cw *ClientWatch) {
	if cw != nil {
		req.SetUserValue(watchKey{}, cw)
	}
}

// RoundTrip sends req on a connection of hc and reads the start of its
// answer into resp; retry says whether the failure may be retried on
// another connection (fasthttp's RetryIfErr then decides).
func (roundTrip) RoundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (retry bool, err error) {
	cw, _ := req.UserValue(watchKey{}).(*ClientWatch)
	if cw.HasLeft() {
		return false, ErrClientLeft // a retry after the watch cut the last connection
	}
	cc, err := hc.AcquireConn(req.GetTimeOut(), req.ConnectionClose())
	if err != nil {
		return false, err
	}
	conn := cc.Conn()
	if !cw.Attach(conn) {
		hc.ReleaseConn(cc) // nothing was written on it
		return false, ErrClientLeft
	}
	resp.ParseNetConn(conn)
	if err := writeRequest(hc, conn, req); err != nil {
		cw.Detach(conn)
		hc.CloseConn(cc)
		return true, err
	}
	br := hc.AcquireReader(conn)
	body, err := readAnswer(hc, br, req, resp)
	// A body that lasts until the connection ends leaves none to reuse.
	keep := err == nil && !req.ConnectionClose() && !resp.ConnectionClose() && resp.Header.ContentLength() != -2
	if !body {
		cw.Detach(conn)
		hc.ReleaseReader(br)
		if keep {
			hc.ReleaseConn(cc)
		} else {
			hc.CloseConn(cc)
		}
		return err != nil, err
	}
	ub := &upstreamBody{watch: cw, conn: conn,
		done: func(clean bool) {
			hc.ReleaseReader(br)
			if clean && keep {
				hc.ReleaseConn(cc)
			} else {
				hc.CloseConn(cc)
			}
		}}
	ub.stream.Reset(br, resp.Header.ContentLength())
	resp.SetBodyStream(ub, resp.Header.ContentLength())
	return false, nil
}

// writeRequest writes req on conn, within hc's WriteTimeout if it has one.
func writeRequest(hc *fasthttp.HostClient, conn net.Conn, req *fasthttp.Request) error {
	var deadline time.Time
	if hc.WriteTimeout > 0 {
		deadline = time.Now().Add(hc.WriteTimeout)
	}
	if err := conn.SetWriteDeadline(deadline); err != nil {
		return err
	}
	bw := hc.AcquireWriter(conn)
	err := req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	hc.ReleaseWriter(bw)
	if x, ok := err.(interface{ Timeout() bool }); ok && x.Timeout() {
		err = fasthttp.ErrTimeout // as fasthttp says it
	}
	return err
}

// readAnswer reads the answer's head into resp from br and reports
// whether a body follows it there (framed by chunked.Framed).
func readAnswer(hc *fasthttp.HostClient, br *bufio.Reader, req *fasthttp.Request, resp *fasthttp.Response) (bool, error) {
	if hc.DisableHeaderNamesNormalizing {
		resp.Header.DisableNormalizing()
	}
	for {
		if err := resp.Header.Read(br); err != nil {
			return false, err
		}
		if resp.StatusCode() != fasthttp.StatusContinue {
			break
		}
	}
	if s := resp.StatusCode(); resp.SkipBody || req.Header.IsHead() || s < 200 ||
		s == fasthttp.StatusNoContent || s == fasthttp.StatusNotModified {
		return false, nil
	}
	return true, nil
}

// upstreamBody is an upstream answer's body as rotor reads it
// (resp.BodyStream). Closing it does what closing fasthttp's own does (the
// connection back to the pool after a clean end, closed otherwise), once
// the connection is detached from the watch.
type upstreamBody struct {
	stream chunked.Framed // reads from the connection's reader, until done
	watch  *ClientWatch
	conn   net.Conn
	done   func(clean bool) // gives the connection back, or closes it
	closed atomic.Bool
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, ErrCut // its stream went back to fasthttp's pool
	}
	return b.stream.Read(p)
}

// CloseWithError ends the body: err nil says it was read to its end, so
// the connection may serve another request. Only the first call counts.
func (b *upstreamBody) CloseWithError(err error) error {
	if !b.closed.CompareAndSwap(false, true) {
		return nil
	}
	b.watch.Detach(b.conn)
	b.done(err == nil)
	return nil
}
