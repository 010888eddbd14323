package proxy

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/rotorproxy/rotor/proxy/jsonscan"
)

// One identity per account (docs/codex.md). Codex names its installation with
// one id whatever account serves it (the x-codex-installation-id header,
// and the same id in client_metadata and x-codex-turn-metadata); sent as
// it is, it would tell the backend that every account of the pool is one
// person's. rotor shows each account an id of its own instead, derived
// from a secret of the home (HMAC of the account id), so the same account
// always sees the same id and no two accounts share one.

// installationHeader names Codex's installation id.
const installationHeader = "x-codex-installation-id"

// installationCarriers are the request headers the installation id is
// rewritten in: its own, and the turn metadata that repeats it.
var installationCarriers = []string{installationHeader, "x-codex-turn-metadata"}

// minInstallationID is the shortest client id rotor replaces: shorter
// strings could stand for something else in a body.
const minInstallationID = 16

// identities derives the id each account is shown.
type identities struct{ key []byte }

// newIdentities derives ids from key; without one, from a key of this
// process alone (an account then sees one id per process).
func newIdentities(key []byte) identities {
	if len(key) == 0 {
		key = make([]byte, 32)
		rand.Read(key)
	}
	return identities{key: key}
}

// of is the installation id account is shown: UUID-shaped, as Codex's own
// is, so a body keeps its length.
func (id identities) of(account string) string {
	m := hmac.New(sha256.New, id.key)
	m.Write([]byte(account))
	u := m.Sum(nil)[:16]
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// installation is the installation id the client sent with r, read once:
// its header, else its body's client_metadata; "" when it sent none.
func (r *request) installation() string {
	if !r.installationRead {
		r.installationRead = true
		if v := r.header.Peek(installationHeader); len(v) > 0 {
			r.installationID = string(v)
		} else if meta := r.member("client_metadata"); len(meta) > 0 {
			r.installationID = strings.Clone(jsonscan.Get(meta, installationHeader).Str)
		}
		if len(r.installationID) < minInstallationID {
			r.installationID = ""
		}
	}
	return r.installationID
}

// ownIdentity is body with the client's installation id replaced by the
// one account is shown; body itself when it does not carry it.
func (s *Server) ownIdentity(r *request, account string, body []byte) []byte {
	cid := r.installation()
	if cid == "" || !bytes.Contains(body, []byte(cid)) {
		return body
	}
	return bytes.ReplaceAll(body, []byte(cid), []byte(s.identities.of(account)))
}

// ownIdentityHeaders rewrites the installation id in the headers that
// carry it, as set by set.
func (s *Server) ownIdentityHeaders(r *request, account string, get func(string) []byte, set func(k, v string)) {
	cid := r.installation()
	if cid == "" {
		return
	}
	own := []byte(s.identities.of(account))
	for _, k := range installationCarriers {
		if v := get(k); bytes.Contains(v, []byte(cid)) {
			set(k, string(bytes.ReplaceAll(v, []byte(cid), own)))
		}
	}
}
