package proxy

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// Tests of SPEC §10 "Compressed request bodies": a body in zstd, gzip or
// deflate is read as the JSON it holds, bounded by --max-body on its
// decoded size, and goes upstream as it came unless rotor edits it.

// compress encodes b as a client would, with encoders other than rotor's
// own (the standard library's; klauspost's for zstd, which it lacks).
// rawDeflate is deflate without zlib's wrapping, as some clients send it.
func compress(t testing.TB, name string, b []byte) []byte {
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

// decompress decodes what the upstream received, independently of rotor.
func decompress(t testing.TB, contentEncoding string, b []byte) []byte {
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
		t.Fatalf("upstream got Content-Encoding %q", contentEncoding)
	}
	if err != nil {
		t.Fatalf("upstream got a body that does not decode as %s: %v", contentEncoding, err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("upstream got a body that does not decode as %s: %v", contentEncoding, err)
	}
	return out
}

// codings are the client's Content-Encoding headers for each way of
// compressing a body compress knows.
var codings = []struct{ name, header string }{
	{"zstd", "zstd"}, {"gzip", "gzip"}, {"deflate", "deflate"}, {"rawDeflate", "deflate"},
}

func TestParseCoding(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in     string
		want   coding
		opaque bool
	}{
		{"", codingNone, false}, {"identity", codingNone, false}, {"IDENTITY", codingNone, false},
		{"zstd", codingZstd, false}, {"ZStd", codingZstd, false}, {" gzip ", codingGzip, false},
		{"x-gzip", codingGzip, false}, {"Deflate", codingDeflate, false},
		{"br", codingNone, true}, {"gzip, zstd", codingNone, true}, {"compress", codingNone, true},
	} {
		if c, opaque := parseCoding([]byte(tc.in)); c != tc.want || opaque != tc.opaque {
			t.Errorf("parseCoding(%q) = %v, %v; want %v, %v", tc.in, c, opaque, tc.want, tc.opaque)
		}
	}
}

// The cap is on the decoded size, exactly: a body of limit bytes decodes,
// one more byte does not, in every coding.
func TestDecodeBodyCap(t *testing.T) {
	t.Parallel()
	const limit = 100 << 10
	for _, cd := range codings {
		c, _ := parseCoding([]byte(cd.header))
		for _, n := range []int{0, 1, limit - 1, limit, limit + 1, 3 * limit} {
			plain := bytes.Repeat([]byte("{}"), n/2+1)[:n]
			body, release, err := decodeBody(c, compress(t, cd.name, plain), limit)
			switch {
			case n > limit && !errors.Is(err, errBodyTooLarge):
				t.Errorf("%s, %d bytes: err %v, want errBodyTooLarge", cd.name, n, err)
			case n <= limit && (err != nil || !bytes.Equal(body, plain)):
				t.Errorf("%s, %d bytes: got %d bytes, err %v", cd.name, n, len(body), err)
			}
			release()
		}
	}
}

// What rotor encodes again decodes, with the client's decoder, to what it
// edited.
func TestEncodeBodyRoundTrip(t *testing.T) {
	t.Parallel()
	body := []byte(`{"model":"gpt-5","stream":true,"store":false,"input":"` + strings.Repeat("hello ", 5000) + `"}`)
	for _, c := range []coding{codingZstd, codingGzip, codingDeflate} {
		for range 2 { // the second time from the pools
			if got := decompress(t, codingNames[c], encodeBody(c, body)); !bytes.Equal(got, body) {
				t.Errorf("%s: round trip changed the body", codingNames[c])
			}
		}
	}
}

// FuzzDecodeBody feeds arbitrary bytes to every decoder: none panics, and
// none returns more than the cap.
func FuzzDecodeBody(f *testing.F) {
	for _, cd := range codings {
		f.Add(compress(f, cd.name, []byte(`{"model":"gpt-5","input":"hi"}`)))
		f.Add(compress(f, cd.name, make([]byte, 64<<10)))
	}
	f.Add([]byte{})
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd}) // a zstd magic number, then nothing
	const limit = 4 << 10
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range []coding{codingZstd, codingGzip, codingDeflate} {
			body, release, err := decodeBody(c, data, limit)
			if len(body) > limit || err != nil && body != nil {
				t.Fatalf("%s: %d bytes, err %v", codingNames[c], len(body), err)
			}
			release()
		}
	})
}
