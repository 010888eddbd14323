package proxy

import (
	"strings"
	"testing"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// BenchmarkSocketTurn is one response.create on a client socket, answered
// over the socket's upstream socket by the fake: the whole WebSocket
// transport, both ways, in process (the allocations are the client's and
// the fake's too). "large" sends a 1 MiB input, which the socket reads
// into one buffer and sends up as it came.
func BenchmarkSocketTurn(b *testing.B) {
	large := `{"type":"response.create","model":"gpt-5","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"` +
		strings.Repeat("x", 1<<20) + `"}]}]}`
	for _, bc := range []struct{ name, frame string }{{"small", createFrame}, {"large", large}} {
		b.Run(bc.name, func(b *testing.B) {
			e := newBenchEnv(b)
			e.up.Set("k1", upstreamtest.Behavior{ContextWindow: 1 << 21})
			c := e.openSocket()
			b.SetBytes(int64(len(bc.frame)))
			for b.Loop() {
				if err := c.WriteMessage(websocket.TextMessage, []byte(bc.frame)); err != nil {
					b.Fatal(err)
				}
				for done := false; !done; {
					_, p, err := c.ReadMessage()
					if err != nil {
						b.Fatal(err)
					}
					switch gjson.GetBytes(p, "type").Str {
					case "response.completed":
						done = true
					case "error", "response.failed", "response.incomplete":
						b.Fatalf("frame %s", p)
					}
				}
			}
		})
	}
}
