// Package coding reads and writes the content codings of a request body
// (docs/codex.md, Compressed request bodies): a Content-Encoding header
// parsed (Parse), a body's decoded bytes read through a Reader
// (NewReader), and an edited body encoded again (Encode), in zstd, gzip
// or deflate.
//
// It guarantees that a decoder holds at most MaxZstdWindow beside what
// it hands out, whatever a frame claims, and that decoders and encoders
// are recycled: past their first use, decoding allocates nothing per
// byte. It never reads a body to its end on its own: how much decoded
// output is read, and so what a body may cost, is the caller's bound
// (package proxy's readBounded). It knows nothing of requests, accounts
// or the server.
package coding
