package upstream

import (
	"net"
	"testing"
	"time"
)

// tcpPair is both ends of a loopback TCP connection: the client's, and
// the server's, which a watch watches.
func tcpPair(t testing.TB) (client, server net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestReusedWatchTimerWatches is a watch on a timer a stopped watch gave
// back, fired or not: it still notices its own client leave and closes
// its own upstream connection, and no earlier watch acts on it.
func TestReusedWatchTimerWatches(t *testing.T) {
	if !watchable(&net.TCPConn{}) {
		t.Skip("no watch here")
	}
	_, quiet := tcpPair(t)
	early := NewClientWatch(quiet, false)
	if early.Stop() {
		t.Fatal("a client still there left")
	}
	late := NewClientWatch(quiet, false)
	time.Sleep(WatchAfter + 50*time.Millisecond) // fired: its goroutine waits
	if late.Stop() {
		t.Fatal("a client still there left")
	}

	client, server := tcpPair(t)
	up, upPeer := tcpPair(t)
	cw := NewClientWatch(server, false)
	defer cw.Stop()
	if !cw.Attach(up) {
		t.Fatal("attached to a watch whose client left")
	}
	client.Close()
	upPeer.SetReadDeadline(time.Now().Add(WatchAfter + 2*time.Second))
	if _, err := upPeer.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the upstream connection was not closed: %v", err)
	}
	if !cw.Stop() {
		t.Fatal("the client left unseen")
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// BenchmarkClientWatch is an attempt's watch that its answer beats: made
// and stopped before WatchAfter, as for nearly every request.
func BenchmarkClientWatch(b *testing.B) {
	_, c := tcpPair(b)
	b.ReportAllocs()
	for b.Loop() {
		cw := NewClientWatch(c, false)
		if cw == nil {
			b.Skip("no watch here")
		}
		if cw.Stop() {
			b.Fatal("left")
		}
	}
}
