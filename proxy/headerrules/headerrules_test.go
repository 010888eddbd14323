package headerrules

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts/secrets"
)

// Tests of the header rules alone: what each way drops, what a
// Connection header adds to it, and an account's secrets redacted
// wherever an upstream echoed them. The same rules on the wire, through
// a serve, are proxy's tests (codexheaders_test.go, passthrough_test.go).

// neverUp and neverBack are the headers that never cross, written out
// here so that a name dropped from the rules fails a test.
var (
	neverUp = []string{"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
		"proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade", "host", "cookie", "x-api-key",
		"authorization", "content-length", "accept-encoding", "openai-organization", "openai-project", "origin",
		"chatgpt-account-id", "originator"}
	neverBack = []string{"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
		"upgrade", "content-length", "set-cookie", "set-cookie2", "authorization", "proxy-authorization",
		"proxy-authenticate", "www-authenticate", "cookie", "x-api-key", "x-request-id", "date", "server", "alt-svc"}
)

// Every header a client must not pass on stays behind, in any case,
// with every one its Connection header names; the rest go as sent.
func TestCopyRequestDropsWhatNeverReachesAnUpstream(t *testing.T) {
	t.Parallel()
	var src, dst fasthttp.RequestHeader
	for _, k := range neverUp {
		src.Set(strings.ToUpper(k[:1])+k[1:], "v")
	}
	src.Set("Connection", "keep-alive, X-Hop, x-other-HOP")
	src.Set("X-Hop", "1")
	src.Set("X-Other-Hop", "1")
	keep := map[string]string{"Content-Type": "application/json", "Session_id": "s1", "X-Codex-Turn-State": "t",
		"Openai-Beta": "responses=experimental", "User-Agent": "codex_cli_rs/0.50.0"}
	for k, v := range keep {
		src.Set(k, v)
	}
	CopyRequest(&dst, &src)
	got := map[string]string{}
	for k, v := range dst.All() {
		got[string(k)] = string(v)
	}
	// fasthttp keeps its own Content-Type and User-Agent apart from the
	// other headers; what All lists is what goes.
	for k, v := range keep {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := keep[k]; !ok && k != "Host" {
			t.Errorf("%s reached the upstream", k)
		}
	}
	if RequestPasses([]byte("x-hop"), []byte("X-HOP")) || RequestPasses(nil, []byte("Authorization")) ||
		!RequestPasses([]byte("x-hop"), []byte("Session_id")) {
		t.Error("RequestPasses does not follow CopyRequest's rule")
	}
}

// An answer's hop-by-hop, framing and credential headers stay behind,
// with every one its Connection header names; the rest reach the client.
func TestRelayResponseDropsWhatNeverReachesAClient(t *testing.T) {
	t.Parallel()
	var src, dst fasthttp.ResponseHeader
	for _, k := range neverBack {
		src.Set(k, "v")
	}
	src.Set("Connection", "X-Hop")
	src.Set("X-Hop", "1")
	src.Set("X-Codex-Primary-Used-Percent", "12")
	src.Set("X-Models-Etag", "e1")
	RelayResponse(&dst, &src)
	for _, k := range neverBack {
		if k != "content-length" && len(dst.Peek(k)) > 0 {
			t.Errorf("%s reached the client", k)
		}
	}
	if len(dst.Peek("X-Hop")) > 0 {
		t.Error("a header the Connection header names reached the client")
	}
	if string(dst.Peek("X-Codex-Primary-Used-Percent")) != "12" || string(dst.Peek("X-Models-Etag")) != "e1" {
		t.Errorf("the upstream's own headers did not reach the client: %s", dst.String())
	}
}

// A header name longer than headerIn's buffer is still found, in any case.
func TestHeaderInReadsLongNames(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x-long", 20)
	m := map[string]bool{long: true, "te": true}
	if !headerIn(m, []byte(strings.ToUpper(long))) || !headerIn(m, []byte("TE")) || headerIn(m, []byte("t")) {
		t.Error("headerIn misses a name")
	}
	if !namedIn([]byte(" a ,B,, c"), []byte("b")) || namedIn([]byte("ab, c"), []byte("b")) {
		t.Error("namedIn misreads a list")
	}
}

// A secret echoed in any header's value is replaced; a short value (a
// test's) is not a secret to look for; headers with none stay as sent.
func TestRedactHeadersReplacesEchoedSecrets(t *testing.T) {
	t.Parallel()
	sec := secrets.Secret{APIKey: "sk-0123456789abcdef", AccessToken: "short", IDToken: "id-token-0123456789"}
	var h fasthttp.ResponseHeader
	h.Set("X-Echo", "key sk-0123456789abcdef and id-token-0123456789 again")
	h.Set("Www-Authenticate", `Bearer error="sk-0123456789abcdef"`)
	h.Set("X-Plain", "short and plain")
	RedactHeaders(&h, &sec)
	if got := string(h.Peek("X-Echo")); got != "key [redacted] and [redacted] again" {
		t.Errorf("X-Echo: %q", got)
	}
	if got := string(h.Peek("Www-Authenticate")); got != `Bearer error="[redacted]"` {
		t.Errorf("Www-Authenticate: %q", got)
	}
	if got := string(h.Peek("X-Plain")); got != "short and plain" {
		t.Errorf("X-Plain: %q", got)
	}
	if got := Redact([]byte("nothing here"), &sec); string(got) != "nothing here" {
		t.Errorf("Redact changed a body with no secret: %q", got)
	}
}

// The rules run on every request and answer: with headers of ordinary
// length, and no secret echoed, they allocate nothing.
func TestHeaderRulesAllocateNothing(t *testing.T) {
	var in, out fasthttp.RequestHeader
	in.Set("Authorization", "Bearer sk-client")
	in.Set("Session_id", "s1")
	in.Set("Connection", "keep-alive")
	var up, back fasthttp.ResponseHeader
	up.Set("X-Request-Id", "req_1")
	up.Set("X-Codex-Primary-Used-Percent", "12")
	sec := secrets.Secret{AccessToken: "access-token-0123456789"}
	CopyRequest(&out, &in)
	RelayResponse(&back, &up)
	if n := testing.AllocsPerRun(100, func() {
		out.Reset()
		CopyRequest(&out, &in)
		back.Reset()
		RelayResponse(&back, &up)
		RedactHeaders(&back, &sec)
	}); n != 0 {
		t.Errorf("%.1f allocations a request", n)
	}
}

// A passed-through answer is redacted as it streams: a secret split over
// any two reads is replaced, and no byte that cannot begin one waits for
// the next read.
func TestRedactingReaderFindsSecretsAcrossReads(t *testing.T) {
	t.Parallel()
	sec := secrets.Secret{AccessToken: "access-token-0123456789", RefreshToken: "refresh-xyz-987", IDToken: "short"}
	whole := "head access-token-0123456789 mid refresh-xyz-987refresh-xyz-987 access-token-01 short " +
		strings.Repeat("x", 100) + "access-access-token-0123456789 tail access-token-0123456789"
	want := Redact([]byte(whole), &sec)
	if bytes.Contains(want, []byte("0123456789")) || !bytes.Contains(want, []byte("access-token-01 short")) {
		t.Fatalf("redact itself: %s", want)
	}
	for _, name := range []string{"one byte a read", "half a read", "whole"} {
		var src io.Reader = strings.NewReader(whole)
		switch name {
		case "one byte a read":
			src = iotest.OneByteReader(src)
		case "half a read":
			src = iotest.HalfReader(src)
		}
		got, err := io.ReadAll(&RedactingReader{src: src, sec: sec})
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %q, %v\nwant %q", name, got, err, want)
		}
	}
	// An event whose end cannot begin a secret goes at once; one whose
	// end could waits for what follows it.
	pr, pw := io.Pipe()
	rr := &RedactingReader{src: pr, sec: sec}
	buf := make([]byte, 1024)
	go pw.Write([]byte("data: one\n\n"))
	if n, err := rr.Read(buf); err != nil || string(buf[:n]) != "data: one\n\n" {
		t.Fatalf("the first event: %q, %v", buf[:n], err)
	}
	go pw.Write([]byte("data: acc"))
	if n, err := rr.Read(buf); err != nil || string(buf[:n]) != "data: " {
		t.Fatalf("an event ending as a secret begins: %q, %v", buf[:n], err)
	}
	go pw.Write([]byte("ess-token-0123456789\n\n"))
	if n, err := rr.Read(buf); err != nil || string(buf[:n]) != "[redacted]\n\n" {
		t.Fatalf("the secret's rest: %q, %v", buf[:n], err)
	}
	// Cut in the middle of one: its start is never sent.
	go func() { pw.Write([]byte("x access-tok")); pw.CloseWithError(io.ErrUnexpectedEOF) }()
	got, err := io.ReadAll(rr)
	if err != io.ErrUnexpectedEOF || string(got) != "x " {
		t.Errorf("a cut answer: %q, %v", got, err)
	}
}

// A RedactingReader Reset for another answer reads it from its start,
// whatever the last one left; one that Fail ended returns that error.
func TestRedactingReaderResetAndFail(t *testing.T) {
	t.Parallel()
	sec := secrets.Secret{AccessToken: "access-token-0123456789"}
	var rr RedactingReader
	rr.Reset(io.MultiReader(strings.NewReader("left access-tok"), iotest.ErrReader(io.ErrUnexpectedEOF)), sec)
	if got, err := io.ReadAll(&rr); err != io.ErrUnexpectedEOF || string(got) != "left " || rr.Err() != err {
		t.Fatalf("cut: %q, %v (Err %v)", got, err, rr.Err())
	}
	rr.Reset(strings.NewReader("next access-token-0123456789"), secrets.Secret{AccessToken: "access-token-0123456789"})
	if got, err := io.ReadAll(&rr); err != nil || string(got) != "next [redacted]" || rr.Err() != io.EOF {
		t.Fatalf("after Reset: %q, %v (Err %v)", got, err, rr.Err())
	}
	rr.Reset(strings.NewReader("more"), sec)
	rr.Fail(io.ErrClosedPipe)
	if n, err := rr.Read(make([]byte, 8)); n != 0 || err != io.ErrClosedPipe {
		t.Fatalf("after Fail: %d, %v", n, err)
	}
	if !bytes.Equal(Redact([]byte("access-token-0123456789"), &sec), []byte("[redacted]")) {
		t.Fatal("Redact")
	}
}
