package proxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// quietConns are the connections that have not sent a byte yet (a
// browser's preconnect, an editor's spare connection): nothing is in
// flight on them, so a shutdown closes them at once. fasthttp counts a
// connection active from its accept until its first request is answered,
// so its own shutdown would wait for such a one the whole drain, where
// docs/commands.md gives a shutdown with nothing in flight 1 s.
type quietConns struct {
	mu sync.Mutex
	m  map[*quietConn]struct{}
}

// quietConn is an accepted connection that tells its set when it is first
// heard from, or closed.
type quietConn struct {
	net.Conn
	set   *quietConns
	heard atomic.Bool
}

// add wraps c and keeps it in the set until it says something.
func (q *quietConns) add(c net.Conn) net.Conn {
	qc := &quietConn{Conn: c, set: q}
	q.mu.Lock()
	if q.m == nil {
		q.m = make(map[*quietConn]struct{})
	}
	q.m[qc] = struct{}{}
	q.mu.Unlock()
	return qc
}

func (q *quietConns) remove(c *quietConn) {
	q.mu.Lock()
	delete(q.m, c)
	q.mu.Unlock()
}

// closeUntil closes every quiet connection now and every 100 ms, for any
// accepted while the listener closes, until stop is called.
func (q *quietConns) closeUntil() (stop func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			q.mu.Lock()
			for c := range q.m {
				c.Conn.Close()
				delete(q.m, c)
			}
			q.mu.Unlock()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-ended }
}

func (c *quietConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.heard.Load() {
		c.heard.Store(true)
		c.set.remove(c)
	}
	return n, err
}

func (c *quietConn) Close() error {
	if !c.heard.Load() {
		c.set.remove(c)
	}
	return c.Conn.Close()
}

// SyscallConn lets upstream.ClientGone peek at the socket underneath.
func (c *quietConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.New("rotor: not a socket")
}
