package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// roundTrip is how every upstream HTTP request goes out: fasthttp's own
// round trip (its DefaultTransport) with two things changed. The connection
// the request is sent on is attached to the attempt's clientWatch (the
// request's watchKey value), from before the request is written until its
// answer's body is closed, so a client that leaves can close it; and it is
// detached before fasthttp may hand it to another request. fasthttp's
// client offers no other way to learn which pooled connection a request
// uses, nor to cancel one. And the answer's body is read with rotor's own
// framing (answerBody), which tells a body's end from the connection's.
//
// Otherwise it does what DefaultTransport does for the client rotor
// configures (newUpstreamClient): a write deadline of WriteTimeout, no
// read timeout (idleConn bounds each read), no MaxConnDuration, the body
// always streamed, the connection returned to the pool once the body is
// closed cleanly, closed otherwise.
type roundTrip struct{}

// watchKey is the fasthttp request user value that holds the attempt's
// clientWatch.
type watchKey struct{}

// RoundTrip sends req on a connection of hc and reads the start of its
// answer into resp; retry says whether the failure may be retried on
// another connection (fasthttp's RetryIfErr then decides).
func (roundTrip) RoundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (retry bool, err error) {
	cw, _ := req.UserValue(watchKey{}).(*clientWatch)
	if cw.hasLeft() {
		return false, errClientLeft // a retry after the watch cut the last connection
	}
	cc, err := hc.AcquireConn(req.GetTimeOut(), req.ConnectionClose())
	if err != nil {
		return false, err
	}
	conn := cc.Conn()
	if !cw.attach(conn) {
		hc.ReleaseConn(cc) // nothing was written on it
		return false, errClientLeft
	}
	resp.ParseNetConn(conn)
	if err := writeRequest(hc, conn, req); err != nil {
		cw.detach(conn)
		hc.CloseConn(cc)
		return true, err
	}
	br := hc.AcquireReader(conn)
	body, err := readAnswer(hc, br, req, resp)
	// A body that lasts until the connection ends leaves none to reuse.
	keep := err == nil && !req.ConnectionClose() && !resp.ConnectionClose() && resp.Header.ContentLength() != -2
	if body == nil {
		cw.detach(conn)
		hc.ReleaseReader(br)
		if keep {
			hc.ReleaseConn(cc)
		} else {
			hc.CloseConn(cc)
		}
		return err != nil, err
	}
	resp.SetBodyStream(&upstreamBody{stream: body, watch: cw, conn: conn,
		done: func(clean bool) {
			hc.ReleaseReader(br)
			if clean && keep {
				hc.ReleaseConn(cc)
			} else {
				hc.CloseConn(cc)
			}
		}}, resp.Header.ContentLength())
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

// readAnswer reads the answer's head into resp and, when it has a body,
// returns that body, not yet read, as a stream over br (answerBody).
func readAnswer(hc *fasthttp.HostClient, br *bufio.Reader, req *fasthttp.Request, resp *fasthttp.Response) (io.Reader, error) {
	if hc.DisableHeaderNamesNormalizing {
		resp.Header.DisableNormalizing()
	}
	for {
		if err := resp.Header.Read(br); err != nil {
			return nil, err
		}
		if resp.StatusCode() != fasthttp.StatusContinue {
			break
		}
	}
	if s := resp.StatusCode(); resp.SkipBody || req.Header.IsHead() || s < 200 ||
		s == fasthttp.StatusNoContent || s == fasthttp.StatusNotModified {
		return nil, nil
	}
	return answerBody(br, resp.Header.ContentLength()), nil
}

// answerBody is the body that follows a head of content length n (-1:
// chunked, -2: until the connection ends) on br. A connection that ends
// before a chunked body's last chunk, or before a body's declared length,
// cut the answer: that is io.ErrUnexpectedEOF here, never io.EOF.
// fasthttp's own body stream says io.EOF when the connection ends at a
// chunk's boundary or short of the length, so an upstream that closed in
// the middle of a stream (a restart, a middlebox's timeout) looked as if
// it had finished, and its cut answer went to the client as whole.
func answerBody(br *bufio.Reader, n int) io.Reader {
	switch {
	case n == -1:
		return &chunkedBody{br: br}
	case n >= 0:
		return &sizedBody{r: br, left: n}
	}
	return br
}

// chunkedBody reads a chunked body (RFC 9112 docs/clients.md.1) to its last chunk and
// the trailer after it, so that the connection is left at the next
// answer. Each Read returns at most one chunk: an upstream stream sends
// an event a chunk, and taking only what one chunk holds lets the next
// events gather in the connection's buffer while this one is handed on,
// where reading everything buffered would wake the reader for each event.
type chunkedBody struct {
	br   *bufio.Reader
	left int   // bytes of the current chunk not yet read
	err  error // sticky: io.EOF after the trailer, or what broke the body
}

func (b *chunkedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.left == 0 {
		size, err := chunkSize(b.br)
		switch {
		case err != nil:
			b.err = unexpected(err)
			return 0, b.err
		case size == 0:
			b.err = skipTrailer(b.br)
			return 0, b.err
		}
		b.left = size
	}
	n, err := b.br.Read(p[:min(len(p), b.left)])
	b.left -= n
	if err == nil && b.left == 0 {
		err = crlf(b.br)
	}
	if err != nil {
		b.err = unexpected(err)
	}
	return n, b.err
}

// maxChunkSize bounds a chunk's declared size (1 GiB): a larger one is a
// broken upstream, not an answer.
const maxChunkSize = 1 << 30

// chunkSize reads a chunk's size line: hex digits, maybe extensions
// after ';' (ignored), CRLF.
func chunkSize(br *bufio.Reader) (int, error) {
	line, err := readLine(br)
	if err != nil {
		return 0, err
	}
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	size, err := strconv.ParseUint(string(bytes.TrimRight(line, " \t")), 16, 64)
	if err != nil || size > maxChunkSize {
		return 0, errBrokenChunk
	}
	return int(size), nil
}

// readLine reads one line of chunked framing (a size line, a trailer
// field) and returns it without its end: CRLF, or a lone LF, which RFC
// 9112 docs/files.md.2 lets a recipient take for one. A CR anywhere else breaks the
// framing, as Go's own chunked reader has it: a line two parsers could
// end in different places is how a connection's answers get mixed up.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	line = bytes.TrimSuffix(line[:len(line)-1], []byte{'\r'})
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, errBrokenChunk
	}
	return line, nil
}

// crlf reads the CRLF that ends a chunk's data.
func crlf(br *bufio.Reader) error {
	b, err := br.Peek(2)
	if err != nil {
		return err
	}
	if b[0] != '\r' || b[1] != '\n' {
		return errBrokenChunk
	}
	_, err = br.Discard(2)
	return err
}

var errBrokenChunk = errors.New("rotor: malformed chunked body from the upstream")

// unexpected is err with io.EOF made io.ErrUnexpectedEOF: in the middle of
// a body the connection's end is a cut.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// maxTrailer bounds the trailer lines read after a chunked body's last
// chunk.
const maxTrailer = 64

// skipTrailer reads the trailer fields after a chunked body's last
// chunk up to the empty line that ends them; io.EOF once it has.
func skipTrailer(br *bufio.Reader) error {
	for range maxTrailer {
		line, err := readLine(br)
		if err != nil {
			return unexpected(err)
		}
		if len(line) == 0 {
			return io.EOF
		}
	}
	return errors.New("rotor: too long a trailer after a chunked body")
}

// sizedBody reads a body of a declared length.
type sizedBody struct {
	r    io.Reader
	left int
}

func (b *sizedBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	n, err := b.r.Read(p[:min(len(p), b.left)])
	b.left -= n
	if b.left == 0 {
		return n, io.EOF
	}
	return n, unexpected(err)
}

// upstreamBody is an upstream answer's body as rotor reads it
// (resp.BodyStream). Closing it does what closing fasthttp's own does (the
// connection back to the pool after a clean end, closed otherwise), once
// the connection is detached from the watch.
type upstreamBody struct {
	stream io.Reader // reads from the connection's reader, until done
	watch  *clientWatch
	conn   net.Conn
	done   func(clean bool) // gives the connection back, or closes it
	closed atomic.Bool
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errCut // its stream went back to fasthttp's pool
	}
	return b.stream.Read(p)
}

// CloseWithError ends the body: err nil says it was read to its end, so
// the connection may serve another request. Only the first call counts.
func (b *upstreamBody) CloseWithError(err error) error {
	if !b.closed.CompareAndSwap(false, true) {
		return nil
	}
	b.watch.detach(b.conn)
	b.done(err == nil)
	return nil
}
