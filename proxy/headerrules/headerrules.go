package headerrules

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts/secrets"
)

// dropRequestHeaders never reach an upstream: hop-by-hop headers, the
// client's credentials and cookies, headers naming the client's own org or
// project (wrong for another account), and Accept-Encoding, so the upstream
// answers uncompressed and rotor can read usage from the stream as it
// passes.
var dropRequestHeaders = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "proxy-authenticate": true,
	"proxy-authorization": true, "te": true, "trailer": true, "transfer-encoding": true, "upgrade": true,
	"host": true, "cookie": true, "x-api-key": true, "authorization": true, "content-length": true,
	"accept-encoding": true, "openai-organization": true, "openai-project": true, "origin": true,
	"chatgpt-account-id": true, "originator": true,
}

// dropResponseHeaders are not copied back to the client: hop-by-hop
// headers, framing rotor redoes, and anything that carries or asks for
// credentials, which belong to the account, not to the client.
var dropResponseHeaders = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "te": true, "trailer": true,
	"transfer-encoding": true, "upgrade": true, "content-length": true, "set-cookie": true,
	"set-cookie2": true, "authorization": true, "proxy-authorization": true, "proxy-authenticate": true,
	"www-authenticate": true, "cookie": true, "x-api-key": true,
	"x-request-id": true, "date": true, "server": true, "alt-svc": true,
}

// headerIn reports whether the header name k, in any case, is in m, without
// allocating for names of ordinary length.
func headerIn(m map[string]bool, k []byte) bool {
	var buf [64]byte
	if len(k) > len(buf) {
		return m[strings.ToLower(string(k))]
	}
	for i, c := range k {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return m[string(buf[:len(k)])]
}

// CopyRequest copies the client's headers an upstream may see:
// none of dropRequestHeaders, and none that the client's Connection
// header names as hop-by-hop (RFC 9110 section 7.6.1).
func CopyRequest(dst, src *fasthttp.RequestHeader) {
	hop := src.Peek("Connection")
	for k, v := range src.All() {
		if passes(dropRequestHeaders, hop, k) {
			dst.AddBytesKV(k, v)
		}
	}
}

// RelayResponse copies the upstream's answer headers a client may see:
// none of dropResponseHeaders, and none that the upstream's Connection
// header names as hop-by-hop.
func RelayResponse(dst, src *fasthttp.ResponseHeader) {
	hop := src.Peek("Connection")
	for k, v := range src.All() {
		if passes(dropResponseHeaders, hop, k) {
			dst.AddBytesKV(k, v)
		}
	}
}

// RequestPasses reports whether the client's request header k may reach
// an upstream, hop being the client's Connection header: CopyRequest's
// rule, for a request that is not a fasthttp one (a socket's handshake).
func RequestPasses(hop, k []byte) bool { return passes(dropRequestHeaders, hop, k) }

// passes reports whether header k crosses the proxy: it is not in drop,
// and the sender's Connection header (hop) does not name it as hop-by-hop.
// Both directions use it, as net/http/httputil's removeHopByHopHeaders does.
func passes(drop map[string]bool, hop, k []byte) bool {
	return !headerIn(drop, k) && (len(hop) == 0 || !namedIn(hop, k))
}

// namedIn reports whether the comma-separated list names k, in any case.
func namedIn(list, k []byte) bool {
	for len(list) > 0 {
		var item []byte
		item, list, _ = bytes.Cut(list, []byte{','})
		if bytes.EqualFold(bytes.TrimSpace(item), k) {
			return true
		}
	}
	return false
}

// minSecret is the length from which a value of a secret is redacted:
// a shorter one (a test's) would be found in ordinary text.
const minSecret = 8

// Redact replaces the account's own secrets wherever an upstream quoted
// them in an error body, before any of it can reach the client or a log.
func Redact(body []byte, sec *secrets.Secret) []byte {
	for _, v := range secretValues(sec) {
		if len(v) >= minSecret && bytes.Contains(body, []byte(v)) {
			body = bytes.ReplaceAll(body, []byte(v), []byte("[redacted]"))
		}
	}
	return body
}

// quotes reports whether b contains one of sec's values, without
// allocating: it runs on every header of every answer.
func quotes(b []byte, sec *secrets.Secret) bool {
	for _, v := range secretValues(sec) {
		if len(v) >= minSecret && strings.Contains(unsafe.String(unsafe.SliceData(b), len(b)), v) {
			return true
		}
	}
	return false
}

// secretValues are the values of sec that must never leave rotor.
func secretValues(sec *secrets.Secret) [4]string {
	return [...]string{sec.APIKey, sec.AccessToken, sec.RefreshToken, sec.IDToken}
}

// RedactHeaders replaces, in every header of an answer, the account's
// own secrets where an upstream (or a gateway at its base_url) echoed
// them: a header is relayed to the client whatever its name.
func RedactHeaders(h *fasthttp.ResponseHeader, sec *secrets.Secret) {
	var echoed [][]byte
	for k, v := range h.All() {
		if quotes(v, sec) {
			echoed = append(echoed, bytes.Clone(k))
		}
	}
	for _, k := range echoed {
		h.SetBytesV(string(k), Redact(h.PeekBytes(k), sec))
	}
}

// A RedactingReader is Redact for a body read piece by piece, which may be
// any size: it holds at most one read of src and the bytes at its end
// that could begin one of the secrets, so a secret split between two
// reads is replaced as surely as one inside a read, and everything else
// is handed on as soon as it arrives (a stream's event is not held back
// behind the next).
type RedactingReader struct {
	src io.Reader
	sec secrets.Secret
	// buf[off:ready] is redacted and may go; buf[ready:] could still
	// begin a secret, and waits for the next read.
	buf        []byte
	off, ready int
	err        error // src's, sticky
}

// redactChunk is what one read of the source asks for.
const redactChunk = 32 << 10

// Read hands on the next redacted bytes. When src fails, what could
// begin a secret is dropped, never sent: a secret cut short is a secret
// still.
func (r *RedactingReader) Read(p []byte) (int, error) {
	for r.off == r.ready {
		if r.err != nil {
			return 0, r.err
		}
		r.buf = append(r.buf[:0], r.buf[r.off:]...) // the held bytes first
		held := len(r.buf)
		r.buf = slices.Grow(r.buf, redactChunk)
		n, err := r.src.Read(r.buf[held : held+redactChunk])
		r.buf, r.err = Redact(r.buf[:held+n], &r.sec), err
		r.off, r.ready = 0, len(r.buf)
		if err != io.EOF {
			r.ready -= secretStart(r.buf, &r.sec)
		}
	}
	n := copy(p, r.buf[r.off:r.ready])
	r.off += n
	return n, nil
}

// Reset makes r read src for sec's secrets from the start, keeping its
// buffer.
func (r *RedactingReader) Reset(src io.Reader, sec secrets.Secret) {
	r.src, r.sec = src, sec
	r.buf, r.off, r.ready, r.err = r.buf[:0], 0, 0, nil
}

// Err is what ended src's reads, nil while it has not: io.EOF for an
// answer read to its end.
func (r *RedactingReader) Err() error { return r.err }

// Fail ends r with err: once what is redacted is handed on, Read
// returns err.
func (r *RedactingReader) Fail(err error) { r.err = err }

// secretStart is how many bytes at the end of b could begin a value of
// sec: the longest end of b that is the start of one (shorter than it,
// for a whole one is redacted already).
func secretStart(b []byte, sec *secrets.Secret) int {
	held := 0
	for _, v := range secretValues(sec) {
		if len(v) < minSecret {
			continue
		}
		for i := max(0, len(b)-len(v)+1); len(b)-i > held; i++ {
			j := bytes.IndexByte(b[i:], v[0])
			if j < 0 {
				break
			}
			if i += j; len(b)-i > held && v[:len(b)-i] == string(b[i:]) {
				held = len(b) - i
				break
			}
		}
	}
	return held
}
