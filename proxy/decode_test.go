package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/rotorproxy/rotor/proxy/coding/codingtest"

	"github.com/rotorproxy/rotor/accounts"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/coding"
)

// Tests of docs/codex.md "Compressed request bodies": a body in zstd, gzip or
// deflate is read as the JSON it holds, bounded by --max-body on its
// decoded size, and goes upstream as it came unless rotor edits it.

// compress and decompress are codingtest's, named as these tests use them.
func compress(t testing.TB, name string, b []byte) []byte { return codingtest.Compress(t, name, b) }

func decompress(t testing.TB, contentEncoding string, b []byte) []byte {
	return codingtest.Decompress(t, contentEncoding, b)
}

// codings are the client's Content-Encoding headers for each way of
// compressing a body compress knows.
var codings = codingtest.Ways

// The cap is on the decoded size, exactly: a body of limit bytes decodes,
// one more byte does not, in every coding.
func TestDecodeBodyCap(t *testing.T) {
	t.Parallel()
	const limit = 100 << 10
	for _, cd := range codings {
		c, _ := coding.Parse([]byte(cd.Header))
		for _, n := range []int{0, 1, limit - 1, limit, limit + 1, 3 * limit} {
			plain := bytes.Repeat([]byte("{}"), n/2+1)[:n]
			body, held, err := decodeBody(c, compress(t, cd.Name, plain), limit)
			switch {
			case n > limit && !errors.Is(err, errBodyTooLarge):
				t.Errorf("%s, %d bytes: err %v, want errBodyTooLarge", cd.Name, n, err)
			case n <= limit && (err != nil || !bytes.Equal(body, plain)):
				t.Errorf("%s, %d bytes: got %d bytes, err %v", cd.Name, n, len(body), err)
			}
			held.release()
		}
	}
}

// FuzzDecodeBody feeds arbitrary bytes to every decoder: none panics, and
// none returns more than the cap.
func FuzzDecodeBody(f *testing.F) {
	for _, seed := range codingtest.FuzzSeeds(f) {
		f.Add(seed)
	}
	const limit = 4 << 10
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range []coding.Coding{coding.Zstd, coding.Gzip, coding.Deflate} {
			body, held, err := decodeBody(c, data, limit)
			if len(body) > limit || err != nil && body != nil {
				t.Fatalf("%s: %d bytes, err %v", c, len(body), err)
			}
			held.release()
		}
	})
}

// sendCompressed posts body to e compressed as name says (see compress),
// labelled with the Content-Encoding header, and returns the status.
func sendCompressed(t *testing.T, e *env, path, name, header string, body []byte) int {
	t.Helper()
	resp := e.do("POST", path, string(compress(t, name, body)), "Content-Encoding", header)
	readAll(t, resp)
	return resp.StatusCode
}

// A compressed body's prompt_cache_key keeps its conversation on one
// account, as an uncompressed one does; different keys still spread.
func TestCompressedBodyKeepsAffinity(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}, {accounts.KindAPIKey, "k2"}})
	for range 6 {
		body := []byte(`{"model":"gpt-5","stream":false,"input":"hi","prompt_cache_key":"conv-9"}`)
		if st := sendCompressed(t, e, "/v1/responses", "zstd", "zstd", body); st != 200 {
			t.Fatalf("status %d", st)
		}
	}
	if c := e.counts("k1", "k2"); c[0]*c[1] != 0 || c[0]+c[1] != 6 {
		t.Fatalf("one conversation went to both accounts: %v", c)
	}
	for i := range 6 {
		body := []byte(fmt.Sprintf(`{"model":"gpt-5","stream":false,"input":"hi","prompt_cache_key":"other-%d"}`, i))
		if st := sendCompressed(t, e, "/v1/responses", "zstd", "zstd", body); st != 200 {
			t.Fatalf("status %d", st)
		}
	}
	if c := e.counts("k1", "k2"); c[0] == 0 || c[1] == 0 {
		t.Errorf("six conversations all went to one account: %v", c)
	}
}

// A compressed body that a ChatGPT account needs edited (docs/accounts.md) or
// translated (docs/clients.md) goes upstream edited, compressed again in the
// client's coding and labelled with it.
func TestCompressedBodyIsEditedForChatGPT(t *testing.T) {
	t.Parallel()
	for _, cd := range codings {
		t.Run(cd.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, []acct{{accounts.KindChatGPT, "z"}})
			sendCompressed(t, e, "/v1/responses", cd.Name, cd.Header,
				[]byte(`{"model":"gpt-5","input":"hi","temperature":0.5}`))
			sendCompressed(t, e, "/v1/chat/completions", cd.Name, cd.Header,
				[]byte(`{"model":"gpt-5","messages":[{"role":"user","content":"hi"}],"stream":true}`))
			reqs := e.up.Requests()
			if len(reqs) != 2 {
				t.Fatalf("upstream saw %d requests", len(reqs))
			}
			for i, rq := range reqs {
				ce := rq.Header.Get("Content-Encoding")
				if !strings.EqualFold(ce, cd.Header) {
					t.Fatalf("request %d: Content-Encoding %q, want %q", i, ce, cd.Header)
				}
				var got map[string]any
				if err := json.Unmarshal(decompress(t, ce, rq.Body), &got); err != nil {
					t.Fatalf("request %d: upstream body is not JSON: %v", i, err)
				}
				if got["stream"] != true || got["store"] != false || got["temperature"] != nil {
					t.Errorf("request %d: not edited for ChatGPT: %v", i, got)
				}
				if i == 1 && (got["input"] == nil || got["messages"] != nil) {
					t.Errorf("chat request not translated to Responses: %v", got)
				}
			}
		})
	}
}

// A compressed body that needs no edit reaches the upstream byte for byte
// as the client sent it, with its Content-Encoding, on either account
// kind; so does one in a coding rotor cannot read.
func TestCompressedBodyNeedingNoEditGoesAsItCame(t *testing.T) {
	t.Parallel()
	codex := []byte(`{"model":"gpt-5","instructions":"","input":"hi","stream":true,"store":false,"prompt_cache_key":"c1"}`)
	for _, kind := range []accounts.Kind{accounts.KindChatGPT, accounts.KindAPIKey} {
		e := newEnv(t, []acct{{kind, "z"}})
		var sent [][]byte
		var headers []string
		for _, cd := range codings {
			b := compress(t, cd.Name, codex)
			readAll(t, e.do("POST", "/v1/responses", string(b), "Content-Encoding", strings.ToUpper(cd.Header)))
			sent, headers = append(sent, b), append(headers, strings.ToUpper(cd.Header))
		}
		opaque := []byte("\x1b\x00 not brotli, but rotor cannot tell")
		readAll(t, e.do("POST", "/v1/responses", string(opaque), "Content-Encoding", "br"))
		sent, headers = append(sent, opaque), append(headers, "br")
		reqs := e.up.Requests()
		if len(reqs) != len(sent) {
			t.Fatalf("%s: upstream saw %d requests, want %d", kind, len(reqs), len(sent))
		}
		for i, rq := range reqs {
			if !bytes.Equal(rq.Body, sent[i]) || rq.Header.Get("Content-Encoding") != headers[i] {
				t.Errorf("%s, %s: body or Content-Encoding (%q) changed", kind, headers[i], rq.Header.Get("Content-Encoding"))
			}
		}
	}
}

// A body that does not decode in the coding it names is the client's
// fault: 400, naming the coding, and nothing reaches the upstream.
func TestCorruptCompressedBodyIs400(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	good := compress(t, "zstd", []byte(`{"model":"gpt-5","input":"`+strings.Repeat("hi ", 1000)+`"}`))
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0xff
	for _, tc := range []struct{ name, header string }{
		{"plain text", "zstd"}, {"flipped", "zstd"}, {"truncated", "zstd"}, {"plain text", "gzip"}, {"plain text", "deflate"},
	} {
		body := []byte(`{"model":"gpt-5"}`)
		switch tc.name {
		case "flipped":
			body = flipped
		case "truncated":
			body = good[:len(good)-8]
		}
		resp := e.do("POST", "/v1/responses", string(body), "Content-Encoding", tc.header)
		got := decodeError(t, resp)
		if resp.StatusCode != 400 || got.Code != rerr.ProxyBadRequest || !strings.Contains(got.Message, tc.header) {
			t.Errorf("%s %s: status %d, error %+v", tc.name, tc.header, resp.StatusCode, got)
		}
	}
	if n := e.up.Count("k1"); n != 0 {
		t.Fatalf("%d undecodable bodies reached the upstream", n)
	}
}

// A decompression bomb gets 413 like a body sent that large, and rotor
// never holds it: what the process allocates while refusing it stays
// within the cap and the largest zstd window rotor decodes with (RFC 9659),
// far below the bomb's size. Not parallel: it counts the process's
// allocations.
func TestCompressedBombIs413(t *testing.T) {
	const maxBody = 1 << 20
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}}, func(c *Config) { c.MaxBody = maxBody })
	var bomb bytes.Buffer
	w, _ := zstd.NewWriter(&bomb, zstd.WithWindowSize(coding.MaxZstdWindow), zstd.WithEncoderConcurrency(1))
	zeros := make([]byte, 1<<20)
	for range 200 { // 200 MB
		w.Write(zeros)
	}
	w.Close()
	if bomb.Len() > 64<<10 {
		t.Fatalf("the bomb is %d bytes, not a bomb", bomb.Len())
	}
	body := bomb.String()
	readAll(t, e.do("GET", "/v1/models", "")) // warm the connection and the server
	warm := e.up.Count("k1")

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	resp := e.do("POST", "/v1/responses", body, "Content-Encoding", "zstd")
	got := decodeError(t, resp)
	runtime.GC()
	runtime.ReadMemStats(&after)

	if resp.StatusCode != 413 || got.Code != rerr.ProxyPayloadTooLarge || got.Extra["max_bytes"] != float64(maxBody) {
		t.Fatalf("status %d, error %+v", resp.StatusCode, got)
	}
	const bound = 4*maxBody + 2*coding.MaxZstdWindow
	t.Logf("refusing the bomb: heap grew %d KiB, %d KiB allocated", (int64(after.HeapAlloc)-int64(before.HeapAlloc))>>10, (after.TotalAlloc-before.TotalAlloc)>>10)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > bound {
		t.Errorf("the heap grew by %d MiB refusing the bomb", grew>>20)
	}
	if spent := after.TotalAlloc - before.TotalAlloc; spent > bound {
		t.Errorf("refusing the bomb allocated %d MiB", spent>>20)
	}
	if e.up.Count("k1") != warm {
		t.Fatal("the bomb reached the upstream")
	}
}
