package proxy

import (
	"bytes"
	"fmt"
	"testing"
)

// FuzzSSEScanner: however a stream is cut into reads, the scanner hands
// on the same events, and each is a data line of the stream. An upstream's
// reads split events anywhere, and the relay feeds each read as it comes.
func FuzzSSEScanner(f *testing.F) {
	f.Add([]byte("event: response.created\ndata: {\"type\":\"response.created\"}\n\ndata: {\"type\":\"x\"}\r\n\n"), []byte{3, 1, 40})
	f.Add([]byte("data:{}\ndata: \n: comment\ndata: [DONE]\n"), []byte{1})
	f.Add([]byte("data: {\"type\":\"a\"}"), []byte{2, 2})
	f.Fuzz(func(t *testing.T, stream, cuts []byte) {
		whole := scanAll(stream, nil)
		if got := scanAll(stream, cuts); got != whole {
			t.Fatalf("cut at %v: %q; whole: %q", cuts, got, whole)
		}
		// Each event is a complete data line's payload.
		var want bytes.Buffer
		lines := bytes.Split(stream, []byte("\n"))
		for _, l := range lines[:len(lines)-1] { // the last has no end yet
			if d, ok := bytes.CutPrefix(bytes.TrimSuffix(l, []byte("\r")), []byte("data:")); ok {
				d = bytes.TrimPrefix(d, []byte(" "))
				fmt.Fprintf(&want, "%q %q\n", readEvent(d).typ, d)
			}
		}
		if whole != want.String() {
			t.Fatalf("events %q, want %q", whole, want.String())
		}
	})
}

// scanAll feeds stream to a scanner in reads of the lengths cuts gives
// (cycled; all at once when cuts is empty) and lists the events it hands
// on, each with its type.
func scanAll(stream, cuts []byte) string {
	var out bytes.Buffer
	sc := sseScanner{onEvent: func(e event) { fmt.Fprintf(&out, "%q %q\n", e.typ, e.data) }}
	for i := 0; len(stream) > 0; i++ {
		n := len(stream)
		if len(cuts) > 0 {
			n = min(n, int(cuts[i%len(cuts)])+1)
		}
		sc.feed(stream[:n])
		stream = stream[n:]
	}
	return out.String()
}
