package proxy

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// An answer's body is read to the end its framing declares, and the
// connection is left at the next answer; a connection that ends before
// that is io.ErrUnexpectedEOF, never a clean io.EOF.
func TestAnswerBodyFraming(t *testing.T) {
	t.Parallel()
	const next = "HTTP/1.1 200 OK\r\n"
	cases := []struct {
		name, wire string
		length     int
		body       string
		err        error // nil: a clean end, with next left unread
	}{
		{"chunks", "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", -1, "hello world", nil},
		{"extension and trailer", "5;x=y\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n", -1, "hello", nil},
		{"upper-case hex", "A\r\n0123456789\r\n0\r\n\r\n", -1, "0123456789", nil},
		{"ends at a chunk's boundary", "5\r\nhello\r\n", -1, "hello", io.ErrUnexpectedEOF},
		{"ends inside a chunk", "5\r\nhel", -1, "hel", io.ErrUnexpectedEOF},
		{"ends inside a size line", "5\r\nhello\r\n1", -1, "hello", io.ErrUnexpectedEOF},
		{"ends before the trailer's end", "5\r\nhello\r\n0\r\n", -1, "hello", io.ErrUnexpectedEOF},
		{"no CRLF after the data", "5\r\nhelloXX0\r\n\r\n", -1, "hello", errBrokenChunk},
		{"size not hex", "zz\r\nhello\r\n0\r\n\r\n", -1, "", errBrokenChunk},
		{"size too large", "FFFFFFFFFFFF\r\nx", -1, "", errBrokenChunk},
		{"sized", "hello", 5, "hello", nil},
		{"sized, short", "hel", 5, "hel", io.ErrUnexpectedEOF},
		{"until the connection ends", "hello", -2, "hello", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			wire := c.wire
			if c.err == nil && c.length != -2 {
				wire += next
			}
			// One byte a read: every boundary falls between two reads.
			br := bufio.NewReader(iotest.OneByteReader(strings.NewReader(wire)))
			got, err := io.ReadAll(answerBody(br, c.length))
			if string(got) != c.body || !errors.Is(err, c.err) {
				t.Fatalf("read %q, %v; want %q, %v", got, err, c.body, c.err)
			}
			if c.err == nil && c.length != -2 {
				if rest, _ := io.ReadAll(br); string(rest) != next {
					t.Errorf("left %q on the connection, want %q", rest, next)
				}
			}
		})
	}
}
