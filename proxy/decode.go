package proxy

import (
	"bytes"
	"errors"
	"io"
	"sync"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"

	rerr "github.com/rotorproxy/rotor/errors"
)

// A coding is a Content-Encoding of a request body that rotor reads (docs/codex.md Compressed request bodies).
type coding uint8

const (
	codingNone coding = iota // no Content-Encoding, identity, or one rotor cannot read
	codingZstd
	codingGzip
	codingDeflate
)

var codingNames = [...]string{codingNone: "identity", codingZstd: "zstd", codingGzip: "gzip", codingDeflate: "deflate"}

// parseCoding reads a Content-Encoding header. opaque reports a coding
// rotor cannot read (br, or several codings stacked), whose body is
// forwarded as it came.
func parseCoding(ce []byte) (c coding, opaque bool) {
	ce = bytes.TrimSpace(ce)
	switch {
	case len(ce) == 0 || bytes.EqualFold(ce, []byte("identity")):
		return codingNone, false
	case bytes.EqualFold(ce, []byte("zstd")):
		return codingZstd, false
	// RFC 9110 docs/dashboard.md.4.1.3: a recipient treats x-gzip as gzip.
	case bytes.EqualFold(ce, []byte("gzip")) || bytes.EqualFold(ce, []byte("x-gzip")):
		return codingGzip, false
	case bytes.EqualFold(ce, []byte("deflate")):
		return codingDeflate, false
	}
	return codingNone, true
}

// zstdMaxWindow is the largest zstd window rotor decodes with: RFC 9659
// forbids larger ones in HTTP, and the window is what a zstd decoder
// holds beside its output, so it bounds that part of a body's cost
// whatever the frame claims.
const zstdMaxWindow = 8 << 20

// zstdDecoders recycles zstd decoders, which are costly to make. With
// concurrency 1 a decoder decodes on the caller's goroutine and starts
// none, so one the pool drops needs no Close.
var zstdDecoders = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxMemory(zstdMaxWindow))
	if err != nil {
		panic(err) // only for options that are wrong, which these are not
	}
	return d
}}

// gzipReaders, zlibReaders and flateReaders recycle the other decoders:
// each holds a 32 KiB window and Huffman tables.
var gzipReaders, zlibReaders, flateReaders sync.Pool

// decodeBody decodes raw, compressed in c, into a buffer from bodyPool,
// never holding more than limit+1 decoded bytes: a body that decodes to
// more is errBodyTooLarge, however small raw is. release returns the
// buffer; the body must not be used after it.
func decodeBody(c coding, raw []byte, limit int) (body []byte, release func(), err error) {
	release = func() {}
	src := bytes.NewReader(raw)
	var dec io.Reader
	switch c {
	case codingZstd:
		d := zstdDecoders.Get().(*zstd.Decoder)
		defer func() {
			d.Reset(nil) // lets go of raw
			zstdDecoders.Put(d)
		}()
		// A *bytes.Reader, unlike a *bytes.Buffer, keeps the decoder
		// streaming into the bounded buffer below instead of decoding
		// the whole body into one of its own.
		dec, err = d, d.Reset(src)
	case codingGzip:
		zr, _ := gzipReaders.Get().(*gzip.Reader)
		if zr == nil {
			zr = new(gzip.Reader)
		}
		defer gzipReaders.Put(zr)
		dec, err = zr, zr.Reset(src)
	case codingDeflate:
		// HTTP's deflate is zlib (RFC 9110 docs/dashboard.md.4.1.2), but some clients
		// send raw deflate: without a zlib header, it is read as that.
		pool, open := &zlibReaders, zlib.NewReader
		if !zlibHeader(raw) {
			pool, open = &flateReaders, newFlateReader
		}
		zr, _ := pool.Get().(io.ReadCloser)
		if zr == nil {
			zr, err = open(src)
		} else {
			err = zr.(zlib.Resetter).Reset(src, nil)
		}
		if zr != nil {
			defer pool.Put(zr)
		}
		dec = zr
	default:
		return raw, release, nil
	}
	if err != nil {
		return nil, release, err
	}

	return readBounded(dec, 0, limit)
}

func newFlateReader(r io.Reader) (io.ReadCloser, error) { return flate.NewReader(r), nil }

// zlibHeader reports whether b starts with a zlib header (RFC 1950 docs/files.md.2):
// method 8 (deflate), a window of at most 32 KiB, and the check bits.
func zlibHeader(b []byte) bool {
	return len(b) >= 2 && b[0]&0x0f == 8 && b[0]>>4 <= 7 && (uint16(b[0])<<8|uint16(b[1]))%31 == 0
}

// decode reads r's body in the coding its Content-Encoding names, so that
// everything after sees the JSON; r.raw keeps the bytes as they came. A
// refusal is 413 for a body that decodes to more than maxBody, as for one
// sent that large, else 400.
func (r *request) decode(c coding, maxBody int) *rerr.Spec {
	body, release, err := decodeBody(c, r.body, maxBody)
	r.freeBody = release
	switch {
	case errors.Is(err, errBodyTooLarge):
		return bodyTooLarge(maxBody)
	case err != nil:
		return &rerr.Spec{Code: rerr.ProxyBadRequest,
			Message: "request body cannot be decoded (Content-Encoding: " + codingNames[c] + "): " + err.Error()}
	}
	r.raw, r.body, r.coding = r.body, body, c
	return nil
}

// free returns the buffer of r's decoded body, once r no longer needs
// it: after Server.serve, as readBody's buffer after handle.
func (r *request) free() {
	if r.freeBody != nil {
		r.freeBody()
	}
}

// wire is what goes upstream for body, the adapter's body for r. Only a
// body the adapter edited is encoded again, once per request; an
// unchanged one goes as the client sent it. Either way it is in the
// client's coding, so the Content-Encoding header copyRequestHeaders
// passes on stays true.
func (r *request) wire(body []byte) []byte {
	switch {
	case r.coding == codingNone:
		return body
	case bytes.Equal(body, r.body): // the same slice compares in O(1)
		return r.raw
	case r.recoded.body == nil || !bytes.Equal(body, r.recoded.from):
		r.recoded.from, r.recoded.body = body, encodeBody(r.coding, body)
	}
	return r.recoded.body
}

// zstdEncoder encodes edited bodies. EncodeAll is safe for concurrent
// use; made on first use, as most serves never edit a compressed body.
var zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		panic(err) // only for options that are wrong, which these are not
	}
	return e
})

// gzipWriters and zlibWriters recycle the compressors of encodeBody.
var gzipWriters, zlibWriters sync.Pool

// encodeBody compresses body in c. Writing to memory cannot fail, so
// neither can it. gzip and deflate use the fastest level: the body is on
// its way to a request's first byte, where latency counts more than a
// few bytes on the wire. deflate is written as zlib, what the name means
// in HTTP, whichever form the client sent.
func encodeBody(c coding, body []byte) []byte {
	if c == codingZstd {
		return zstdEncoder().EncodeAll(body, make([]byte, 0, len(body)/4+64))
	}
	var out bytes.Buffer
	out.Grow(len(body)/4 + 64)
	var w interface {
		io.WriteCloser
		Reset(io.Writer)
	}
	var pool *sync.Pool
	switch c {
	case codingGzip:
		zw, _ := gzipWriters.Get().(*gzip.Writer)
		if zw == nil {
			zw, _ = gzip.NewWriterLevel(nil, gzip.BestSpeed)
		}
		w, pool = zw, &gzipWriters
	case codingDeflate:
		zw, _ := zlibWriters.Get().(*zlib.Writer)
		if zw == nil {
			zw, _ = zlib.NewWriterLevel(nil, zlib.BestSpeed)
		}
		w, pool = zw, &zlibWriters
	default:
		return body
	}
	w.Reset(&out)
	w.Write(body)
	w.Close()
	w.Reset(nil) // lets go of out
	pool.Put(w)
	return out.Bytes()
}
