package coding

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/rotorproxy/rotor/proxy/coding/codingtest"
)

// Tests of docs/codex.md "Compressed request bodies", for the codings
// alone: a body in zstd, gzip or deflate reads as what was compressed,
// and what rotor encodes again reads, with a client's decoder, as what
// it edited. The bound on a decoded body is package proxy's, and tested
// there (decode_test.go).

// compress and decompress are codingtest's, named as these tests use them.
func compress(t testing.TB, name string, b []byte) []byte { return codingtest.Compress(t, name, b) }

func decompress(t testing.TB, c Coding, b []byte) []byte {
	return codingtest.Decompress(t, c.String(), b)
}

// codings are the client's Content-Encoding headers for each way of
// compressing a body compress knows.
var codings = codingtest.Ways

func TestParseCoding(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in     string
		want   Coding
		opaque bool
	}{
		{"", None, false}, {"identity", None, false}, {"IDENTITY", None, false},
		{"zstd", Zstd, false}, {"ZStd", Zstd, false}, {" gzip ", Gzip, false},
		{"x-gzip", Gzip, false}, {"Deflate", Deflate, false},
		{"br", None, true}, {"gzip, zstd", None, true}, {"compress", None, true},
	} {
		if c, opaque := Parse([]byte(tc.in)); c != tc.want || opaque != tc.opaque {
			t.Errorf("Parse(%q) = %v, %v; want %v, %v", tc.in, c, opaque, tc.want, tc.opaque)
		}
	}
}

// What rotor encodes again decodes, with the client's decoder, to what it
// edited.
func TestEncodeBodyRoundTrip(t *testing.T) {
	t.Parallel()
	body := []byte(`{"model":"gpt-5","stream":true,"store":false,"input":"` + strings.Repeat("hello ", 5000) + `"}`)
	for _, c := range []Coding{Zstd, Gzip, Deflate} {
		for range 2 { // the second time from the pools
			if got := decompress(t, c, Encode(c, body)); !bytes.Equal(got, body) {
				t.Errorf("%s: round trip changed the body", c)
			}
		}
	}
	if got := Encode(None, body); !bytes.Equal(got, body) {
		t.Error("Encode(None) changed the body")
	}
}

// A Reader reads what a client compressed, in every coding and form
// (zlib's deflate and raw deflate alike), again and again from its
// recycled decoders; a Reader for None reads the body as it is.
func TestReaderReadsWhatClientsSend(t *testing.T) {
	t.Parallel()
	plain := []byte(`{"model":"gpt-5","input":"` + strings.Repeat("hi there ", 20000) + `"}`)
	for _, cd := range codings {
		c, _ := Parse([]byte(cd.Header))
		raw := compress(t, cd.Name, plain)
		for i := range 3 {
			r, err := NewReader(c, raw)
			if err != nil {
				t.Fatalf("%s, time %d: %v", cd.Name, i, err)
			}
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("%s, time %d: %d bytes, %v", cd.Name, i, len(got), err)
			}
		}
	}
	r, _ := NewReader(None, plain)
	if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, plain) {
		t.Errorf("None: %d bytes, %v", len(got), err)
	}
	r.Close()
}

// A body that is not in the coding it names fails, when it starts or
// when it is read, and leaves the decoders fit for the next body.
func TestReaderFailsOnWhatIsNotItsCoding(t *testing.T) {
	t.Parallel()
	for _, cd := range codings[:3] {
		c, _ := Parse([]byte(cd.Header))
		good := compress(t, cd.Name, []byte(strings.Repeat("hi ", 1000)))
		flipped := bytes.Clone(good)
		flipped[len(flipped)/2] ^= 0xff
		for _, body := range [][]byte{[]byte(`{"model":"gpt-5"}`), flipped, good[:len(good)-8]} {
			if err := readAll(c, body); err == nil {
				t.Errorf("%s: %.20q read without an error", c, body)
			}
		}
	}
	for _, cd := range codings {
		c, _ := Parse([]byte(cd.Header))
		if err := readAll(c, compress(t, cd.Name, []byte("{}"))); err != nil {
			t.Errorf("%s after a failure: %v", cd.Name, err)
		}
	}
}

// readAll reads body through a Reader to its end and returns its error.
func readAll(c Coding, body []byte) error {
	r, err := NewReader(c, body)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.Copy(io.Discard, r)
	return err
}

// A zstd frame that asks for a window over MaxZstdWindow is refused
// before the decoder holds it (RFC 9659), however little it holds.
func TestReaderRefusesAZstdWindowOverTheMax(t *testing.T) {
	t.Parallel()
	var big bytes.Buffer
	w, _ := zstd.NewWriter(&big, zstd.WithWindowSize(4*MaxZstdWindow), zstd.WithEncoderConcurrency(1))
	w.Write(make([]byte, 5*MaxZstdWindow))
	w.Close()
	err := readAll(Zstd, big.Bytes())
	if !errors.Is(err, zstd.ErrWindowSizeExceeded) {
		t.Fatalf("a %d MiB window: %v, want %v", 4*MaxZstdWindow>>20, err, zstd.ErrWindowSizeExceeded)
	}
	var ok bytes.Buffer
	w, _ = zstd.NewWriter(&ok, zstd.WithWindowSize(MaxZstdWindow), zstd.WithEncoderConcurrency(1))
	w.Write(make([]byte, 2*MaxZstdWindow))
	w.Close()
	if err := readAll(Zstd, ok.Bytes()); err != nil {
		t.Fatalf("a window of MaxZstdWindow: %v", err)
	}
}

// Past its first body, a Reader's decoding allocates nothing: the Reader
// and its decoder come back from their pools.
func TestReaderIsRecycled(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops pooled values")
	}
	plain := []byte(strings.Repeat(`{"type":"message","content":"hello"},`, 2000))
	buf := make([]byte, 64<<10)
	for _, cd := range codings {
		c, _ := Parse([]byte(cd.Header))
		raw := compress(t, cd.Name, plain)
		allocs := testing.AllocsPerRun(20, func() {
			r, err := NewReader(c, raw)
			if err != nil {
				t.Fatal(err)
			}
			for err == nil {
				_, err = r.Read(buf)
			}
			r.Close()
		})
		if allocs > 1 {
			t.Errorf("%s: %.1f allocations a body", cd.Name, allocs)
		}
	}
}

// FuzzDecode feeds arbitrary bytes to every decoder: none panics, and a
// Reader hands out what it read, never more than asked.
func FuzzDecode(f *testing.F) {
	for _, seed := range codingtest.FuzzSeeds(f) {
		f.Add(seed)
	}
	const limit = 4 << 10
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range []Coding{Zstd, Gzip, Deflate} {
			r, err := NewReader(c, data)
			if err != nil {
				if r != nil {
					t.Fatalf("%s: a Reader and an error", c)
				}
				continue
			}
			got, _ := io.ReadAll(io.LimitReader(r, limit))
			r.Close()
			if len(got) > limit {
				t.Fatalf("%s: %d bytes", c, len(got))
			}
		}
	})
}
