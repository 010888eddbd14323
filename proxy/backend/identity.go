package backend

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

// InstallationHeader names Codex's installation id.
const InstallationHeader = "x-codex-installation-id"

// installationCarriers are the request headers the installation id is
// rewritten in: its own, and the turn metadata that repeats it.
var installationCarriers = []string{InstallationHeader, "x-codex-turn-metadata"}

// minInstallationID is the shortest client id rotor replaces: shorter
// strings could stand for something else in a body.
const minInstallationID = 16

// Identities derives the id each account is shown.
type Identities struct{ key []byte }

// NewIdentities derives ids from key; without one, from a key of this
// process alone (an account then sees one id per process).
func NewIdentities(key []byte) Identities {
	if len(key) == 0 {
		key = make([]byte, 32)
		rand.Read(key)
	}
	return Identities{key: key}
}

// Of is the installation id account is shown: UUID-shaped, as Codex's own
// is, so a body keeps its length.
func (id Identities) Of(account string) string {
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

// Installation is the installation id a client sent: its header's value
// h, else its body's client_metadata meta; "" when it sent none (or one
// too short to stand for an id).
func Installation(h, meta []byte) string {
	id := ""
	if len(h) > 0 {
		id = string(h)
	} else if len(meta) > 0 {
		id = strings.Clone(jsonscan.Get(meta, InstallationHeader).Str)
	}
	if len(id) < minInstallationID {
		id = ""
	}
	return id
}

// Own is body with the client's installation id cid replaced by the
// one account is shown; body itself when it does not carry it.
func (id Identities) Own(cid, account string, body []byte) []byte {
	if cid == "" || !bytes.Contains(body, []byte(cid)) {
		return body
	}
	return bytes.ReplaceAll(body, []byte(cid), []byte(id.Of(account)))
}

// OwnHeaders rewrites the client's installation id cid in the headers
// that carry it, read by get, as set by set.
func (id Identities) OwnHeaders(cid, account string, get func(string) []byte, set func(k, v string)) {
	if cid == "" {
		return
	}
	own := []byte(id.Of(account))
	for _, k := range installationCarriers {
		if v := get(k); bytes.Contains(v, []byte(cid)) {
			set(k, string(bytes.ReplaceAll(v, []byte(cid), own)))
		}
	}
}
