// Package upstream reaches an account's endpoint on behalf of package
// proxy. It watches the client while no answer has started (ClientWatch),
// so that a client that leaves closes the upstream connection at once,
// and tells whether a client has left (ClientGone).
//
// It guarantees that no watch outlives its attempt, and that a connection
// detached from a watch is never closed by it. It never decides whose
// fault a failure is: it returns typed errors (ErrClientLeft), and package
// proxy, which keeps the failover table, classifies them.
package upstream
