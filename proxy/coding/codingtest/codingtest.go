// Package codingtest compresses and decompresses bodies the way clients
// and upstreams do, with encoders and decoders other than rotor's own, so
// that tests of rotor's content codings (package coding and the proxy
// that uses it) are not judged by the code under test. Tests only.
package codingtest

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"io"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// Ways are the ways Compress knows to compress a body, with the
// Content-Encoding a client sends for each: rawDeflate is deflate without
// zlib's wrapping, as some clients send it.
var Ways = []struct{ Name, Header string }{
	{"zstd", "zstd"}, {"gzip", "gzip"}, {"deflate", "deflate"}, {"rawDeflate", "deflate"},
}

// Compress encodes b the way name says (one of Ways' names), as a client
// would: the standard library's encoders, klauspost's for zstd, which
// the standard library lacks.
func Compress(t testing.TB, name string, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	var w io.WriteCloser
	switch name {
	case "zstd":
		w, _ = zstd.NewWriter(&out)
	case "gzip":
		w = gzip.NewWriter(&out)
	case "deflate":
		w = zlib.NewWriter(&out)
	case "rawDeflate":
		w, _ = flate.NewWriter(&out, flate.DefaultCompression)
	default:
		t.Fatalf("no coding %q", name)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// Decompress decodes b, sent with Content-Encoding contentEncoding (zstd,
// gzip or deflate), as an upstream would; the test fails when it cannot.
func Decompress(t testing.TB, contentEncoding string, b []byte) []byte {
	t.Helper()
	var r io.Reader
	var err error
	switch strings.ToLower(contentEncoding) {
	case "zstd":
		var d *zstd.Decoder
		d, err = zstd.NewReader(bytes.NewReader(b))
		if err == nil {
			defer d.Close()
		}
		r = d
	case "gzip":
		r, err = gzip.NewReader(bytes.NewReader(b))
	case "deflate":
		r, err = zlib.NewReader(bytes.NewReader(b))
	default:
		t.Fatalf("no decoder for Content-Encoding %q", contentEncoding)
	}
	if err != nil {
		t.Fatalf("a body that does not decode as %s: %v", contentEncoding, err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("a body that does not decode as %s: %v", contentEncoding, err)
	}
	return out
}

// FuzzSeeds are the inputs the decoders' fuzz tests start from: a small
// body and 64 KiB of zeros in each of Ways, an empty input, and a zstd
// magic number with nothing after it.
func FuzzSeeds(t testing.TB) [][]byte {
	t.Helper()
	var seeds [][]byte
	for _, w := range Ways {
		seeds = append(seeds, Compress(t, w.Name, []byte(`{"model":"gpt-5","input":"hi"}`)), Compress(t, w.Name, make([]byte, 64<<10)))
	}
	return append(seeds, []byte{}, []byte{0x28, 0xb5, 0x2f, 0xfd})
}
