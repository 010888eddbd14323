package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/proxy"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// peakRSS is the process's peak resident set (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Skip("no VmHWM in /proc/PID/status")
	return 0
}

// A body rotor refuses, or decodes to find it too large, costs no more
// than the cap and a small constant, also one right after the other: a
// chunked upload one byte over the cap, then a 0.5 MB gzip body that
// inflates to 500 MB (docs/selection.md Limits), then a large body it forwards.
// 248 MB peaked here once, for a 64 MiB cap.
func TestServeMemoryAroundLargeBodiesStaysNearTheCap(t *testing.T) {
	// A model whose context window holds the 48 MiB body forwarded last.
	h := signalHome(t, upstreamtest.Behavior{ContextWindow: 64 << 20})
	p := raceServe(t, rotorBin, h.env, "serve")
	addr := hostOf(p.url)
	idleKeepAlive(t, p.url) // one request served: the baseline is a working serve
	base := peakRSS(t, p.cmd.Process.Pid)

	const limit = proxy.DefaultMaxBody
	status := overCapChunkedUpload(t, addr, limit+1)
	if status != 413 {
		t.Fatalf("chunked upload over the cap: status %d, want 413", status)
	}
	var bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
	zero := make([]byte, 1<<20)
	for range 500 {
		zw.Write(zero)
	}
	zw.Close()
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/responses", &bomb)
	req.Header.Set("Authorization", "Bearer "+raceClientKey)
	req.Header.Set("Content-Encoding", "gzip")
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Fatalf("gzip bomb: status %d, want 413", resp.StatusCode)
	}

	// And one forwarded: a 48 MiB conversation, as a long Codex session
	// sends.
	big := `{"model":"gpt-5","input":"` + strings.Repeat("a", 48<<20) + `"}`
	req, _ = http.NewRequest("POST", "http://"+addr+"/v1/responses", strings.NewReader(big))
	req.Header.Set("Authorization", "Bearer "+raceClientKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err = (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("48 MiB body: status %d, want 200", resp.StatusCode)
	}

	peak := peakRSS(t, p.cmd.Process.Pid)
	const slack = 24 << 20
	if grew := peak - base; grew > limit+slack {
		t.Errorf("peak RSS grew by %d MiB over the %d MiB it had serving (cap %d MiB, allowed cap + %d MiB)",
			grew>>20, base>>20, limit>>20, slack>>20)
	}
	t.Logf("peak RSS %d MiB, %d MiB before the bodies", peak>>20, base>>20)
}

// overCapChunkedUpload sends n bytes as a chunked body with the client key
// and returns the status rotor answers.
func overCapChunkedUpload(t *testing.T, addr string, n int) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", raceClientKey)
	go func() {
		chunk := bytes.Repeat([]byte("a"), 1<<20)
		w := bufio.NewWriter(c)
		for sent := 0; sent < n; {
			part := chunk[:min(len(chunk), n-sent)]
			fmt.Fprintf(w, "%x\r\n%s\r\n", len(part), part)
			sent += len(part)
		}
		io.WriteString(w, "0\r\n\r\n")
		w.Flush() // an error here is the refusal arriving first
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("chunked upload: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
