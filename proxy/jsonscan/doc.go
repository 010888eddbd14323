// Package jsonscan reads a request body once: Scan validates it as JSON
// (RFC 8259) and, in the same pass, notes where each top-level member of
// an object begins and ends (Member), where every "encrypted_content"
// value is at any depth (Blobs), and where the conversation's first
// elements are (Turns). Everything rotor later reads from a body (model,
// affinity keys, docs/cost.md's derived key) or edits in it (the ChatGPT
// rewrite, docs/accounts.md) comes from those notes, so a long session's
// megabytes of history are walked one time, not once per field.
//
// What it hands back are offsets into the body and views of it (Get,
// StringAt, Member.Key), never copies: nothing read may outlive the body.
// It knows nothing of accounts, requests or the server; package proxy
// decides what a member means and what an edit writes.
package jsonscan
