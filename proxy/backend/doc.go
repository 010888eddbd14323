// Package backend holds the ChatGPT backend's own rules (docs/codex.md,
// docs/selection.md): what its answers say of an account's meter (quota
// headers and codex.rate_limits events, limit families, credits) and how
// the pool's limits are shown in its shape; who minted each encrypted
// blob and turn state (Mints), and a compaction made again on another
// account (Compactions); the installation id each account is shown
// (Identities); the pool's signed-in access tokens (Tokens); and the
// background usage reader (Reader).
//
// It never imports package proxy: it takes what it needs (a body, an
// account id, a header, a ledger, function values) and returns values, so
// the request path keeps the wiring. Its ledgers are safe for concurrent
// use and bounded in memory whatever the traffic. Account kinds are not
// compared here: whoever signs in to the backend is said by a predicate
// the caller's adapters answer.
package backend

// HeaderSetter is the part of a header this package writes: a request's,
// an answer's, or a refusal's.
type HeaderSetter interface{ Set(key, value string) }
