package sse

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/rotation/usage"
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
				fmt.Fprintf(&want, "%q %q\n", Read(d).Type, d)
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
	sc := Scanner{OnEvent: func(e Event) { fmt.Fprintf(&out, "%q %q\n", e.Type, e.Data) }}
	for i := 0; len(stream) > 0; i++ {
		n := len(stream)
		if len(cuts) > 0 {
			n = min(n, int(cuts[i%len(cuts)])+1)
		}
		sc.Feed(stream[:n])
		stream = stream[n:]
	}
	return out.String()
}

// A usage object is read in either API's names, nested counts included;
// the Responses name wins wherever it comes.
func TestUsageOfReadsEitherAPIsNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		json string
		want *usage.Tokens
	}{
		{`{"input_tokens":1280,"input_tokens_details":{"cached_tokens":1024},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":1289}`,
			&usage.Tokens{Input: 1280, Cached: 1024, Output: 9, Reasoning: 3, Total: 1289}},
		{`{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}`,
			&usage.Tokens{Input: 10, Cached: 4, Output: 5, Reasoning: 2, Total: 15}},
		{`{"prompt_tokens":1,"input_tokens":2,"output_tokens":3,"completion_tokens":4}`, &usage.Tokens{Input: 2, Output: 3}},
		{`{}`, &usage.Tokens{}},
		{`null`, nil},
	} {
		got := UsageOf(gjson.Parse(tc.json))
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("UsageOf(%s) = %+v, want %+v", tc.json, got, tc.want)
		}
	}
}
