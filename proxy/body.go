package proxy

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"slices"
	"sync"

	"github.com/valyala/fasthttp"

	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/coding"
)

// A request's body: read once, bounded by --max-body as sent and as
// decoded, in a buffer recycled when the request ends.

// bodyPool recycles request body buffers (*bodyBuf): long Codex
// sessions send the whole history, megabytes, with every turn.
var bodyPool sync.Pool

// A bodyBuf is a body buffer of bodyPool, held until release gives it
// back; a nil one holds none. A pointer with a method, rather than a
// release closure, so that holding one costs no allocation per request.
type bodyBuf []byte

// release gives b back to bodyPool, unless it is too large to keep; the
// body read into it must not be used after.
func (b *bodyBuf) release() {
	if b != nil && cap(*b) <= maxPooledBody {
		*b = (*b)[:0]
		bodyPool.Put(b)
	}
}

// maxPooledBody keeps a rare huge body from pinning its buffer forever.
const maxPooledBody = 8 << 20

// readBody reads the request body, at most MaxBody bytes whether its
// length is declared or chunked, in held (nil: fasthttp's own); the body
// must not be used after held.release.
func (s *Server) readBody(ctx *fasthttp.RequestCtx) (body []byte, held *bodyBuf, spec *rerr.Spec) {
	n := ctx.Request.Header.ContentLength()
	if n > s.cfg.MaxBody {
		return nil, nil, bodyTooLarge(s.cfg.MaxBody)
	}
	stream := ctx.RequestBodyStream()
	if stream == nil || n == 0 {
		return ctx.Request.Body(), nil, nil
	}
	body, held, err := readBounded(stream, n, s.cfg.MaxBody)
	switch {
	case errors.Is(err, errBodyTooLarge):
		return nil, held, bodyTooLarge(s.cfg.MaxBody)
	case err != nil:
		return nil, held, &rerr.Spec{Code: rerr.ProxyBadRequest, Message: "cannot read the request body: " + err.Error()}
	}
	return body, held, nil
}

// errBodyTooLarge is readBounded's: the body, as sent or as decoded, is
// over the cap.
var errBodyTooLarge = errors.New("request body is larger than the cap")

// readBounded reads src to its end into a pooled buffer (sized for hint
// bytes when known), at most limit bytes: one more is errBodyTooLarge,
// and nothing past it is read. held.release returns the buffer; the body
// must not be used after it.
//
// A body costs at most limit plus maxPooledBody, whether it is kept,
// refused or decoded: see grow.
func readBounded(src io.Reader, hint, limit int) (body []byte, held *bodyBuf, err error) {
	held, _ = bodyPool.Get().(*bodyBuf)
	if held == nil {
		held = new(bodyBuf)
	}
	buf := (*held)[:0]
	defer func() { *held = buf }() // grown or not, the buffer release keeps
	if hint >= cap(buf) {
		// One more byte: the read that finds the end needs room.
		buf = grow(buf, hint+1, limit+1)
	}
	for {
		if len(buf) == cap(buf) {
			buf = grow(buf, max(cap(buf), 64<<10), limit+1)
		}
		n, err := src.Read(buf[len(buf):min(cap(buf), limit+1)])
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			return nil, held, errBodyTooLarge
		}
		if err == io.EOF {
			return buf, held, nil
		}
		if err != nil {
			return nil, held, err
		}
	}
}

// grow returns buf with room for by more bytes, never more than upTo in
// all. Doubled by hand, not by append, so the buffer never outgrows the
// cap by more than the allocator's rounding. Past maxPooledBody, a body
// is rare and large: one step straight to upTo, because doubling would
// hold the old and new buffers at once and leave garbage the size of the
// body behind. A collection first lets that buffer reuse the memory the
// last large body left, instead of growing the process by it.
func grow(buf []byte, by, upTo int) []byte {
	by = min(by, upTo-len(buf))
	if len(buf)+by > maxPooledBody {
		runtime.GC()
		by = upTo - len(buf)
	}
	return slices.Grow(buf, by)
}

// bodyTooLarge is the refusal of a body over the cap, whether it was
// sent that large or decodes to more (docs/selection.md Limits, docs/codex.md).
func bodyTooLarge(maxBody int) *rerr.Spec {
	return &rerr.Spec{Code: rerr.ProxyPayloadTooLarge,
		Message: "request body is larger than the proxy accepts (--max-body)",
		Extra:   []rerr.Field{{Key: "max_bytes", Value: maxBody}}}
}

// decodeBody decodes raw, compressed in c, into a buffer from bodyPool,
// never holding more than limit+1 decoded bytes: a body that decodes to
// more is errBodyTooLarge, however small raw is. held.release returns
// the buffer; the body must not be used after it.
func decodeBody(c coding.Coding, raw []byte, limit int) (body []byte, held *bodyBuf, err error) {
	if c == coding.None {
		return raw, nil, nil
	}
	dec, err := coding.NewReader(c, raw)
	if err != nil {
		return nil, nil, err
	}
	defer dec.Close()
	return readBounded(dec, 0, limit)
}

// decode reads r's body in the coding its Content-Encoding names, so that
// everything after sees the JSON; r.raw keeps the bytes as they came. A
// refusal is 413 for a body that decodes to more than maxBody, as for one
// sent that large, else 400.
func (r *request) decode(c coding.Coding, maxBody int) *rerr.Spec {
	body, held, err := decodeBody(c, r.body, maxBody)
	r.heldBody = held
	switch {
	case errors.Is(err, errBodyTooLarge):
		return bodyTooLarge(maxBody)
	case err != nil:
		return &rerr.Spec{Code: rerr.ProxyBadRequest,
			Message: "request body cannot be decoded (Content-Encoding: " + c.String() + "): " + err.Error()}
	}
	r.raw, r.body, r.coding = r.body, body, c
	return nil
}

// free returns the buffer of r's decoded body, once r no longer needs
// it: after Server.serve, as readBody's buffer after handle.
func (r *request) free() {
	r.heldBody.release()
}

// wire is what goes upstream for body, the adapter's body for r. Only a
// body the adapter edited is encoded again, once per request; an
// unchanged one goes as the client sent it. Either way it is in the
// client's coding, so the Content-Encoding header headerrules.CopyRequest
// passes on stays true.
func (r *request) wire(body []byte) []byte {
	switch {
	case r.coding == coding.None:
		return body
	case bytes.Equal(body, r.body): // the same slice compares in O(1)
		return r.raw
	case r.recoded.body == nil || !bytes.Equal(body, r.recoded.from):
		r.recoded.from, r.recoded.body = body, coding.Encode(r.coding, body)
	}
	return r.recoded.body
}
