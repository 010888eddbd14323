package main

import (
	"bytes"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// upstream answers POST /v1/responses like the OpenAI API: one JSON object,
// or with "stream": true an SSE stream of events header x-bench-events
// deltas, x-bench-gap-ms apart. Each delta carries "t", the UnixNano at
// which it was written, for the client to compute per-event latency.
// Session requests (x-bench-session, or a WebSocket on /v1/responses) get
// a tool call each (session.go).
type upstream struct {
	srv *http.Server
}

var completed = []byte(`{"id":"resp_bench","object":"response","status":"completed","model":"gpt-5","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]}],"usage":{"input_tokens":10,"output_tokens":1,"total_tokens":11}}`)

// runUpstream serves the upstream in this process, announcing its URL on
// stdout, until killed: the benchmark runs it as a child of its own, so
// that its CPU and scheduling are not the measuring client's. With caOut
// set it serves over TLS, with a certificate of its own making written
// there in PEM for the run's processes to trust (SSL_CERT_FILE).
func runUpstream(caOut string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	scheme := "http"
	if caOut != "" {
		cert, _, err := upstreamtest.SelfSigned()
		if err != nil {
			return err
		}
		pemCert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})
		if err := os.WriteFile(caOut, pemCert, 0o600); err != nil {
			return err
		}
		ln, scheme = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}}), "https"
	}
	fmt.Printf("%s://%s\n", scheme, ln.Addr())
	u := &upstream{}
	u.srv = &http.Server{Handler: http.HandlerFunc(u.serve), ReadHeaderTimeout: 10 * time.Second}
	return u.srv.Serve(ln)
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.EqualFold(r.Header.Get("Upgrade"), "websocket"):
		serveSessionSocket(w, r)
		return
	case r.Header.Get("x-bench-session") != "":
		io.Copy(io.Discard, r.Body)
		serveSessionSSE(w)
		return
	}
	// The body is read whole, as the real API does before answering.
	// Clients put "stream" first (SDKs) or last (Codex): both ends count.
	var head [512]byte
	n, _ := io.ReadFull(r.Body, head[:])
	var tail tailWriter
	io.Copy(&tail, r.Body)
	if !bytes.Contains(head[:n], []byte(`"stream":true`)) && !bytes.Contains(tail.last(), []byte(`"stream":true`)) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(completed)
		return
	}
	events, _ := strconv.Atoi(r.Header.Get("x-bench-events"))
	gap, _ := strconv.Atoi(r.Header.Get("x-bench-gap-ms"))
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	fmt.Fprint(w, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_bench\",\"status\":\"in_progress\"}}\n\n")
	fl.Flush()
	for i := range events {
		if i > 0 && gap > 0 {
			select {
			case <-time.After(time.Duration(gap) * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\",\"t\":%d}\n\n", time.Now().UnixNano())
		fl.Flush()
	}
	fmt.Fprintf(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":%s}\n\n", completed)
}

// tailWriter keeps the last bytes written to it, up to 512.
type tailWriter struct {
	buf [1024]byte
	n   int
}

func (t *tailWriter) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) > 512 {
		p = p[len(p)-512:]
	}
	if t.n+len(p) > len(t.buf) {
		t.n = copy(t.buf[:], t.buf[t.n-512:t.n]) // keep the last 512
	}
	t.n += copy(t.buf[t.n:], p)
	return n, nil
}

func (t *tailWriter) last() []byte { return t.buf[max(0, t.n-512):t.n] }
