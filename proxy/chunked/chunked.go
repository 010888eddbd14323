package chunked

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
)

// Body is the body that follows a head of content length n (-1:
// chunked, -2: until the connection ends) on br. A connection that ends
// before a chunked body's last chunk, or before a body's declared length,
// cut the answer: that is io.ErrUnexpectedEOF here, never io.EOF.
// fasthttp's own body stream says io.EOF when the connection ends at a
// chunk's boundary or short of the length, so an upstream that closed in
// the middle of a stream (a restart, a middlebox's timeout) looked as if
// it had finished, and its cut answer went to the client as whole.
func Body(br *bufio.Reader, n int) io.Reader {
	f := new(Framed)
	f.Reset(br, n)
	return f
}

// A Framed is a body as Body frames it, held by value where it is read
// (the upstream package's answer body), so that framing an answer
// allocates nothing of its own; it must not be copied once Reset.
type Framed struct {
	chunks Reader
	sized  sizedBody
	br     *bufio.Reader // neither: the body lasts until the connection ends
}

// Reset makes f the body of content length n on br, as Body's.
func (f *Framed) Reset(br *bufio.Reader, n int) {
	*f = Framed{}
	switch {
	case n == -1:
		f.chunks.br = br
	case n >= 0:
		f.sized = sizedBody{r: br, left: n, framed: true}
	default:
		f.br = br
	}
}

func (f *Framed) Read(p []byte) (int, error) {
	switch {
	case f.chunks.br != nil:
		return f.chunks.Read(p)
	case f.sized.framed:
		return f.sized.Read(p)
	}
	return f.br.Read(p)
}

// A Reader reads a chunked body (RFC 9112 section 7.1) to its last chunk and
// the trailer after it, so that the connection is left at the next
// answer. Each Read returns at most one chunk: an upstream stream sends
// an event a chunk, and taking only what one chunk holds lets the next
// events gather in the connection's buffer while this one is handed on,
// where reading everything buffered would wake the reader for each event.
type Reader struct {
	br   *bufio.Reader
	left int   // bytes of the current chunk not yet read
	err  error // sticky: io.EOF after the trailer, or what broke the body
}

// NewReader reads the chunked body that follows on br.
func NewReader(br *bufio.Reader) *Reader { return &Reader{br: br} }

// Read returns at most one chunk's data: io.EOF after the trailer, once
// the body is whole; any other error is sticky.
func (b *Reader) Read(p []byte) (int, error) {
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
		return 0, ErrMalformed
	}
	return int(size), nil
}

// readLine reads one line of chunked framing (a size line, a trailer
// field) and returns it without its end: CRLF, or a lone LF, which RFC
// 9112 section 2.2 lets a recipient take for one. A CR anywhere else breaks the
// framing, as Go's own chunked reader has it: a line two parsers could
// end in different places is how a connection's answers get mixed up.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	line = bytes.TrimSuffix(line[:len(line)-1], []byte{'\r'})
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, ErrMalformed
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
		return ErrMalformed
	}
	_, err = br.Discard(2)
	return err
}

// ErrMalformed is a chunked body whose framing is broken: a size that
// is not hex or is over maxChunkSize, a chunk's data not followed by
// CRLF, a CR inside a line.
var ErrMalformed = errors.New("rotor: malformed chunked body from the upstream")

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
	r      io.Reader
	left   int
	framed bool // in use: a Framed's, of a length even 0
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
