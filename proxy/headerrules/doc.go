// Package headerrules holds what may cross the proxy, each way, and what
// never does (docs/codex.md, Headers Codex reads): the headers an upstream never sees from
// a client (hop-by-hop ones, the client's credentials, cookies, org and
// project, Accept-Encoding) and those a client never sees from an
// upstream (hop-by-hop ones, framing rotor redoes, credentials and what
// asks for them), with any header a sender's Connection header names as
// hop-by-hop (CopyRequest, RelayResponse, RequestPasses); and an
// account's secrets, redacted wherever an upstream echoed them, in
// headers (RedactHeaders), in a body (Redact) and in a body read piece by
// piece (RedactingReader), a secret split between two reads included.
//
// It guarantees that the rules run on every request and answer without
// allocating for headers of ordinary length, and that a RedactingReader
// holds at most one read and the start of a secret. It knows nothing of
// requests, accounts or the server: it takes headers, bodies and a
// secrets.Secret.
package headerrules
