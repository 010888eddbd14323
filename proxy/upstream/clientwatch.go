package upstream

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A client that leaves while rotor waits on an upstream for it (docs/selection.md:
// "a client that goes away cancels the upstream request"). fasthttp's
// server reads nothing from a client while its handler runs, and a socket
// reads nothing while it answers a request, so a client that leaves before
// the first byte of its answer is otherwise noticed at the next write:
// after the upstream's headers and first output, which a long answer takes
// minutes to send, all that time generating, and billing, for no one.
//
// So while an attempt waits (its connect, its request, the answer's
// headers, the hold-back before the first output), a ClientWatch watches
// the client's connection, and when the client leaves it closes the
// upstream connection the attempt is on: the wait ends at once, the
// attempt fails, and proxy's failover, seeing the client gone, finishes
// the request as 499 client_closed and charges no account.
//
// The watch costs a timer per attempt, and the timer is reused: a
// stopped one goes back to a pool (watchTimers) for the next attempt, so
// an attempt pays for arming it again, not for making one (two
// allocations and the runtime's timer set up and torn down, on every
// request). Only an attempt still waiting after WatchAfter gets a
// goroutine, parked in the network poller on the client's socket (no
// polling) until the client leaves or the attempt ends; the attempt's end
// stops it and waits for it, so none is left behind.

// WatchAfter is how long an attempt waits before its client is watched:
// an upstream that answers sooner costs no goroutine, and a client that
// leaves is still let go of well within docs/selection.md's second.
const WatchAfter = 250 * time.Millisecond

// ErrClientLeft is an attempt's error once its client has left.
var ErrClientLeft = errors.New("rotor: the client left before its answer started")

// ClientWatch watches one attempt's client. Its methods take a nil
// receiver: no watch (a transport that cannot watch).
type ClientWatch struct {
	conn   net.Conn // the client's, as the network poller knows it
	frames bool     // the client speaks WebSocket: a close frame is leaving too
	// timer starts the watch; nil once Stop has given it back. Only the
	// attempt's goroutine, which makes the watch and stops it, uses it.
	timer *watchTimer
	ended sync.WaitGroup // the watching goroutine, once the timer fired

	mu       sync.Mutex
	up       net.Conn // the upstream connection the attempt is on, nil between
	left     bool     // the client was seen leaving
	watching bool     // the goroutine waits on conn
	stopped  bool
}

// NewClientWatch starts watching conn for an attempt; nil when conn
// cannot be watched here.
func NewClientWatch(conn net.Conn, frames bool) *ClientWatch {
	conn = underlying(conn)
	if conn == nil || !watchable(conn) {
		return nil
	}
	cw := &ClientWatch{conn: conn, frames: frames}
	cw.ended.Add(1)
	wt := watchTimers.Get().(*watchTimer)
	wt.cw.Store(cw)
	if wt.t == nil {
		wt.t = time.AfterFunc(WatchAfter, wt.fire)
	} else {
		wt.t.Reset(WatchAfter)
	}
	cw.timer = wt
	return cw
}

// A watchTimer starts the watch of whichever attempt holds it. It is its
// own object, not the ClientWatch, because a watch is still read after it
// stops (HasLeft, Detach from an answer's body), whereas the timer is
// done with once Stop returns: stopped before it fired, or fired and its
// goroutine ended.
type watchTimer struct {
	t  *time.Timer // made on first use, re-armed by Reset after
	cw atomic.Pointer[ClientWatch]
}

var watchTimers = sync.Pool{New: func() any { return new(watchTimer) }}

// fire is the timer's function: the watch of the attempt that armed it.
// Stop gives the timer back only after the goroutine has ended, so cw is
// the one armed for.
func (wt *watchTimer) fire() { wt.cw.Load().run() }

// underlying is the socket under the wrappers the server puts around a
// client's connection: fasthttp's for a hijacked one (a WebSocket's).
func underlying(c net.Conn) net.Conn {
	for {
		u, ok := c.(interface{ UnsafeConn() net.Conn })
		if !ok {
			return c
		}
		c = u.UnsafeConn()
	}
}

// run is the watching goroutine: it waits, in the poller, until the client
// leaves or Stop wakes it.
func (cw *ClientWatch) run() {
	defer cw.ended.Done()
	cw.mu.Lock()
	if cw.stopped {
		cw.mu.Unlock()
		return
	}
	cw.watching = true
	// No deadline while it waits: the server's read timeout of the
	// request would end the watch early, and Stop sets one to wake it.
	cw.conn.SetReadDeadline(time.Time{})
	cw.mu.Unlock()

	left := awaitLeaving(cw.conn, cw.frames)

	cw.mu.Lock()
	defer cw.mu.Unlock()
	cw.watching = false
	if cw.stopped {
		// Woken by Stop: the connection is the server's again, as it was.
		cw.conn.SetReadDeadline(time.Time{})
		return
	}
	if left {
		cw.left = true
		closeRaw(cw.up)
	}
}

// Stop ends the watch, once the attempt has its answer or its failure,
// and reports whether the client left meanwhile. After it returns no
// connection is closed by the watch. The attempt's goroutine calls it,
// once or more: the calls after the first only report.
func (cw *ClientWatch) Stop() bool {
	if cw == nil {
		return false
	}
	wt := cw.timer
	if wt == nil {
		return cw.HasLeft()
	}
	cw.timer = nil
	fired := !wt.t.Stop()
	cw.mu.Lock()
	cw.stopped = true
	cw.up = nil
	if cw.watching {
		cw.conn.SetReadDeadline(aLongTimeAgo) // wakes the goroutine
	}
	cw.mu.Unlock()
	if fired {
		cw.ended.Wait()
	} else {
		cw.ended.Done()
	}
	// Stopped before it fired, or its goroutine over: nothing of this
	// attempt runs on the timer any more.
	wt.cw.Store(nil)
	watchTimers.Put(wt)
	return cw.HasLeft()
}

// aLongTimeAgo is a deadline in the past, which wakes a waiting read.
var aLongTimeAgo = time.Unix(1, 0)

// HasLeft reports whether the watch saw the client leave.
func (cw *ClientWatch) HasLeft() bool {
	if cw == nil {
		return false
	}
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.left
}

// Attach makes c the upstream connection the attempt waits on, which the
// watch closes if the client leaves. It is false, and c not attached,
// when the client has left already: nothing is to be sent on it.
func (cw *ClientWatch) Attach(c net.Conn) bool {
	if cw == nil {
		return true
	}
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if cw.left {
		return false
	}
	if !cw.stopped {
		cw.up = c
	}
	return true
}

// Detach lets c go before it returns to a pool: from then on another
// request may use it, and the watch must not close it.
func (cw *ClientWatch) Detach(c net.Conn) {
	if cw == nil {
		return
	}
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if cw.up == c {
		cw.up = nil
	}
}

// DialWatched is dial for an upstream socket whose attempt cw watches
// (nil: none): its connection is attached to cw from the start, so a
// client that leaves during the handshake ends it; none is opened for a
// client already gone.
func DialWatched(cw *ClientWatch, dial func(addr string) (net.Conn, error)) func(_, addr string) (net.Conn, error) {
	return func(_, addr string) (net.Conn, error) {
		c, err := dial(addr)
		if err == nil && !cw.Attach(c) {
			c.Close()
			return nil, ErrClientLeft
		}
		return c, err
	}
}

// closeRaw closes c under its TLS, if any: no close_notify, which could
// wait behind a write in progress; the upstream sees the connection end.
func closeRaw(c net.Conn) {
	if c == nil {
		return
	}
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	c.Close()
}

// goodbye reports whether b, bytes a WebSocket client has sent that rotor
// has not read, hold a close frame: frames before it (a pong) are
// skipped; an incomplete one ends the look.
func goodbye(b []byte) bool {
	for len(b) >= 2 {
		if b[0]&0x0f == 0x8 {
			return true
		}
		head, n := 2, int(b[1]&0x7f)
		switch n {
		case 126:
			if len(b) < 4 {
				return false
			}
			head, n = 4, int(b[2])<<8|int(b[3])
		case 127:
			return false // a data frame of 64 KiB or more: no close frame in view
		}
		if b[1]&0x80 != 0 {
			head += 4 // the mask key
		}
		if len(b) < head+n {
			return false
		}
		b = b[head+n:]
	}
	return false
}
