package coding

import (
	"bytes"
	"io"
	"sync"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
)

// A Coding is a Content-Encoding of a request body that rotor reads (docs/codex.md Compressed request bodies).
type Coding uint8

const (
	None Coding = iota // no Content-Encoding, identity, or one rotor cannot read
	Zstd
	Gzip
	Deflate
)

var names = [...]string{None: "identity", Zstd: "zstd", Gzip: "gzip", Deflate: "deflate"}

// String is c's name in a Content-Encoding header.
func (c Coding) String() string { return names[c] }

// Parse reads a Content-Encoding header. opaque reports a coding
// rotor cannot read (br, or several codings stacked), whose body is
// forwarded as it came.
func Parse(ce []byte) (c Coding, opaque bool) {
	ce = bytes.TrimSpace(ce)
	switch {
	case len(ce) == 0 || bytes.EqualFold(ce, []byte("identity")):
		return None, false
	case bytes.EqualFold(ce, []byte("zstd")):
		return Zstd, false
	// RFC 9110 section 8.4.1.3: a recipient treats x-gzip as gzip.
	case bytes.EqualFold(ce, []byte("gzip")) || bytes.EqualFold(ce, []byte("x-gzip")):
		return Gzip, false
	case bytes.EqualFold(ce, []byte("deflate")):
		return Deflate, false
	}
	return None, true
}

// MaxZstdWindow is the largest zstd window rotor decodes with: RFC 9659
// forbids larger ones in HTTP, and the window is what a zstd decoder
// holds beside its output, so it bounds that part of a body's cost
// whatever the frame claims.
const MaxZstdWindow = 8 << 20

// zstdDecoders recycles zstd decoders, which are costly to make. With
// concurrency 1 a decoder decodes on the caller's goroutine and starts
// none, so one the pool drops needs no Close.
var zstdDecoders = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxMemory(MaxZstdWindow))
	if err != nil {
		panic(err) // only for options that are wrong, which these are not
	}
	return d
}}

// gzipReaders, zlibReaders and flateReaders recycle the other decoders:
// each holds a 32 KiB window and Huffman tables.
var gzipReaders, zlibReaders, flateReaders sync.Pool

// A Reader reads one body's decoded bytes. Close hands its decoder back
// for the next body; neither the Reader nor what it read into a caller's
// buffer keeps the body after it.
type Reader struct {
	src  bytes.Reader // the body as it came
	dec  io.Reader
	pool *sync.Pool // where dec goes back, nil for none
}

// readers recycles Readers, so that a body's decoding allocates nothing.
var readers = sync.Pool{New: func() any { return new(Reader) }}

// NewReader reads raw, compressed in c; a Reader for None reads raw as
// it is. An error is a body that does not start as c says; one that
// goes wrong later is the Reader's, as its Read finds it.
func NewReader(c Coding, raw []byte) (*Reader, error) {
	r := readers.Get().(*Reader)
	r.src.Reset(raw)
	var err error
	switch c {
	case Zstd:
		d := zstdDecoders.Get().(*zstd.Decoder)
		// A *bytes.Reader, unlike a *bytes.Buffer, keeps the decoder
		// streaming into the caller's bounded buffer instead of decoding
		// the whole body into one of its own.
		r.dec, r.pool, err = d, &zstdDecoders, d.Reset(&r.src)
	case Gzip:
		zr, _ := gzipReaders.Get().(*gzip.Reader)
		if zr == nil {
			zr = new(gzip.Reader)
		}
		r.dec, r.pool, err = zr, &gzipReaders, zr.Reset(&r.src)
	case Deflate:
		// HTTP's deflate is zlib (RFC 9110 section 8.4.1.2), but some clients
		// send raw deflate: without a zlib header, it is read as that.
		pool, open := &zlibReaders, zlib.NewReader
		if !zlibHeader(raw) {
			pool, open = &flateReaders, newFlateReader
		}
		zr, _ := pool.Get().(io.ReadCloser)
		if zr == nil {
			zr, err = open(&r.src)
		} else {
			err = zr.(zlib.Resetter).Reset(&r.src, nil)
		}
		if zr != nil {
			r.dec, r.pool = zr, pool
		}
	default:
		r.dec = &r.src
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// Read reads decoded bytes.
func (r *Reader) Read(p []byte) (int, error) { return r.dec.Read(p) }

// Close hands r's decoder back and lets go of the body; r must not be
// used after it. It never fails.
func (r *Reader) Close() error {
	if d, ok := r.dec.(*zstd.Decoder); ok {
		d.Reset(nil) // lets go of the body
	}
	if r.pool != nil {
		r.pool.Put(r.dec)
	}
	r.src.Reset(nil)
	r.dec, r.pool = nil, nil
	readers.Put(r)
	return nil
}

func newFlateReader(r io.Reader) (io.ReadCloser, error) { return flate.NewReader(r), nil }

// zlibHeader reports whether b starts with a zlib header (RFC 1950 section 2.2):
// method 8 (deflate), a window of at most 32 KiB, and the check bits.
func zlibHeader(b []byte) bool {
	return len(b) >= 2 && b[0]&0x0f == 8 && b[0]>>4 <= 7 && (uint16(b[0])<<8|uint16(b[1]))%31 == 0
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

// gzipWriters and zlibWriters recycle the compressors of Encode.
var gzipWriters, zlibWriters sync.Pool

// Encode compresses body in c. Writing to memory cannot fail, so
// neither can it. gzip and deflate use the fastest level: the body is on
// its way to a request's first byte, where latency counts more than a
// few bytes on the wire. deflate is written as zlib, what the name means
// in HTTP, whichever form the client sent.
func Encode(c Coding, body []byte) []byte {
	if c == Zstd {
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
	case Gzip:
		zw, _ := gzipWriters.Get().(*gzip.Writer)
		if zw == nil {
			zw, _ = gzip.NewWriterLevel(nil, gzip.BestSpeed)
		}
		w, pool = zw, &gzipWriters
	case Deflate:
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
