// Package chunked reads an upstream answer's body off its connection as
// its head frames it (docs/selection.md: a cut stream is a failure):
// chunked (RFC 9112 section 7.1; Reader), of a declared length, or until
// the connection ends (Body).
//
// It guarantees that a body ends cleanly (io.EOF) only where its framing
// says it ends, leaving the connection at the next answer, and that a
// connection that ends before that is io.ErrUnexpectedEOF, never io.EOF:
// a cut answer never looks whole. A chunked Reader hands on at most one
// chunk a Read, so an upstream's events leave as they come; broken
// framing is ErrMalformed. It knows nothing of HTTP heads, clients or
// the server: it takes a bufio.Reader and a length.
package chunked
