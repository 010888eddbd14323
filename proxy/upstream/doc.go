// Package upstream reaches an account's endpoint on behalf of package
// proxy: it connects, straight or through an outbound proxy (a CONNECT
// tunnel or SOCKS5, the account's own or the environment's), makes the
// TLS handshake, sends a request and reads the start of its answer (the
// round trip of the HTTP client an Exit holds), and watches the client
// while no answer has started (ClientWatch), so that a client that leaves
// closes the upstream connection at once.
//
// It guarantees that a connect runs on a goroutine of its own, at most
// maxDialing at once, and that a bug met there comes back as the dial's
// error, for RaiseDialPanic to raise on the request's goroutine; that an
// answer's body is read with its own framing and its connection goes back
// to the pool only after a clean end (CloseStream cuts it otherwise); that
// the first byte of an answer is awaited within the response timeout and
// every later read within the stall timeout; and that no watch outlives
// its attempt.
//
// It never decides whose fault a failure is: it returns typed errors
// (DialError, ErrNoFreeConns, ErrResponseTimeout, ErrClientLeft), and
// package proxy, which keeps the failover table, classifies them. What it
// learns of an endpoint it records where proxy tells it to (Endpoints).
package upstream
