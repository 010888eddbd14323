package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	rerr "github.com/rotorproxy/rotor/errors"
)

// zeros is an endless body of zero bytes: an upload that is still being
// sent when the answer comes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// A request refused on its headers while a large body is still on its way
// gets its status: rotor answers, then reads and drops the rest for a
// while, so the client's kernel is not sent a reset that eats the answer.
func TestRefusedUploadStillGetsItsStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}}, func(c *Config) { c.MaxBody = 1 << 20 })
	const size = 60 << 20
	cases := []struct {
		name   string
		header map[string]string
		length int64 // -1: chunked
		status int
		code   string
	}{
		{"no key", map[string]string{}, size, 401, rerr.ProxyUnauthorized},
		{"no key, chunked", map[string]string{}, -1, 401, rerr.ProxyUnauthorized},
		{"foreign origin", map[string]string{"Authorization": "Bearer " + testKey, "Origin": "https://evil.example"}, size, 403, rerr.ProxyForbiddenHost},
		{"over the cap", map[string]string{"Authorization": "Bearer " + testKey}, size, 413, rerr.ProxyPayloadTooLarge},
		{"over the cap, chunked", map[string]string{"Authorization": "Bearer " + testKey}, -1, 413, rerr.ProxyPayloadTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Several rounds: a reset that eats the answer is a race the
			// client loses often, not always.
			for round := range 5 {
				body := io.Reader(io.LimitReader(zeros{}, size))
				if tc.length < 0 {
					body = io.MultiReader(body) // hides the length: chunked
				}
				req, err := http.NewRequest("POST", e.base+"/v1/responses", body)
				if err != nil {
					t.Fatal(err)
				}
				req.ContentLength = tc.length
				for k, v := range tc.header {
					req.Header.Set(k, v)
				}
				client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{}}
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("round %d: %v, want the %d answer", round, err, tc.status)
				}
				got := decodeError(t, resp)
				if resp.StatusCode != tc.status || got.Code != tc.code {
					t.Fatalf("round %d: %d %s, want %d %s", round, resp.StatusCode, got.Code, tc.status, tc.code)
				}
				if resp.Header.Get("Connection") != "close" && !resp.Close {
					t.Errorf("round %d: the connection stays open with a body left unread", round)
				}
			}
		})
	}
}

// A refusal of a request with no body does not cost the connection:
// pipelined requests after it are answered on the same one.
func TestBodilessRefusalKeepsTheConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(e.base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	const n = 40
	var raw strings.Builder
	for i := range n {
		auth := ""
		if i%2 == 0 {
			auth = "Authorization: Bearer " + testKey + "\r\n"
		}
		fmt.Fprintf(&raw, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n", auth)
	}
	if _, err := io.WriteString(c, raw.String()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for i := range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d of %d: %v", i+1, n, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		want := 200
		if i%2 == 1 {
			want = 401
		}
		if resp.StatusCode != want {
			t.Errorf("answer %d: status %d, want %d", i+1, resp.StatusCode, want)
		}
	}
}

// Headers over the limit get their 431 even when the client goes on
// sending: one header line longer than the whole read buffer, then a body.
func TestOversizedHeaderLineStillGets431(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindAPIKey, "k1"}})
	for round := range 5 {
		req, err := http.NewRequest("POST", e.base+"/v1/responses", io.LimitReader(zeros{}, 8<<20))
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = 8 << 20
		req.Header.Set("Authorization", "Bearer "+testKey)
		req.Header.Set("X-Big", strings.Repeat("a", 140<<10))
		client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxResponseHeaderBytes: 1 << 20}}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("round %d: %v, want the 431 answer", round, err)
		}
		got := decodeError(t, resp)
		if resp.StatusCode != 431 || got.Code != rerr.ProxyHeadersTooLarge {
			t.Fatalf("round %d: %d %s, want 431 %s", round, resp.StatusCode, got.Code, rerr.ProxyHeadersTooLarge)
		}
	}
}
