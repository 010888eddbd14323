package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/proxy/jsonscan"
)

// Account-bound content (docs/codex.md). The ChatGPT backend lets only the
// account that minted an encrypted_content blob (a reasoning item's, a
// compaction item's) read it again; any other account refuses the whole
// request. Codex sends its history, blobs included, with every request, so
// the first request after rotor moves a conversation would be refused.
// rotor therefore remembers who minted each blob it relays (mints), and
// before a request goes to an account takes out every blob another account
// minted (unbind). A blob rotor never saw (a session begun before rotor, a
// blob forgotten) is found by its refusal: the request is sent once more to
// the same account with every blob taken out (Server.attempt).

// mintKey is the fixed-size digest a blob is remembered by.
type mintKey [16]byte

func mintKeyOf(blob string) mintKey {
	sum := sha256.Sum256(unsafe.Slice(unsafe.StringData(blob), len(blob)))
	return mintKey(sum[:16])
}

// mintGeneration is how many blobs one generation of mints holds. Two
// generations are kept, so rotor remembers at least the last
// mintGeneration blobs and at most twice as many: about 2.5 MB at most,
// whatever the traffic (a 16-byte digest and an account id string each).
const mintGeneration = 1 << 15

// unknownOwner is the owner of a blob an account refused and rotor could
// not place: no account id, so every account is sent the conversation
// without it and no request is refused twice for it.
const unknownOwner = "\x00refused"

// mints remembers which account minted each blob rotor relayed. It is
// safe for concurrent use. It is kept in memory, per serve: two serves on
// one home share nothing here, and a blob minted through the other one is
// found by its refusal instead.
type mints struct {
	mu       sync.Mutex
	cur, old map[mintKey]string
	// owners are the accounts that ever minted a blob rotor learnt (a
	// few: one per account, and unknownOwner); never fewer than own what
	// cur and old hold, so a pool where only one account minted anything
	// is seen as such without looking at a blob.
	owners []string
}

// learn records that account minted blob.
func (m *mints) learn(blob, account string) {
	k := mintKeyOf(blob)
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.cur) >= mintGeneration || m.cur == nil {
		m.old, m.cur = m.cur, make(map[mintKey]string, 64)
	}
	m.cur[k] = account
	if !slices.Contains(m.owners, account) {
		m.owners = append(m.owners, account)
	}
}

// onlyBy reports whether every blob rotor remembers was minted by account
// (or none was): then no blob can be foreign to it.
func (m *mints) onlyBy(account string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.owners) == 0 || len(m.owners) == 1 && m.owners[0] == account
}

// owner is the account that minted blob, if rotor knows it.
func (m *mints) owner(blob string) (string, bool) {
	k := mintKeyOf(blob)
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, ok := m.cur[k]; ok {
		return a, true
	}
	a, ok := m.old[k]
	return a, ok
}

// learnItem records the blob of one output item, if it carries one.
func (m *mints) learnItem(item gjson.Result, account string) {
	if b := item.Get("encrypted_content"); b.Type == gjson.String && b.Str != "" {
		m.learn(b.Str, account)
	}
}

// learnOutput records the blobs of a whole answer's output items (a JSON
// answer, such as a compaction's).
func (m *mints) learnOutput(answer []byte, account string) {
	if !bytes.Contains(answer, encryptedKey) {
		return
	}
	gjson.GetBytes(answer, "output").ForEach(func(_, item gjson.Result) bool {
		m.learnItem(item, account)
		return true
	})
}

// encryptedKey is the key of a blob, as jsonscan.Scan finds it.
var encryptedKey = []byte(jsonscan.BlobKey)

// compactionTypes are the item types that carry a conversation's earlier
// context, summarized by the account that compacted it.
var compactionTypes = map[string]bool{"compaction": true, "compaction_summary": true, "context_compaction": true}

// Developer messages that stand in for content another account minted.
const (
	cutNote = "Earlier context of this conversation was summarized on another account and could not be carried over to this one."
	leftOut = "An item of this conversation that only another account can read was left out: "
)

// unbind returns body as account may send it: every item whose
// encrypted_content another account minted is taken out (all of them when
// r.unbindAll is set). A reasoning item keeps what is readable of it
// (summary, content) and loses encrypted_content, id and status, and is
// dropped when nothing readable is left; a compaction item, or any other
// item only one account can read, becomes a developer message saying what
// was left out, unless redo can make the compaction again for account. The items account minted itself, and every byte around
// the changed items, are kept as sent. body is returned as it is (the
// same slice) when nothing in it is foreign. r.contextCut says whether
// a compaction had to go, for this attempt's account.
func (s *Server) unbind(r *request, account string, body []byte, redo func(blob string) []byte) []byte {
	r.contextCut = false
	if r.encoded || !s.mayBeForeign(r, account, body) {
		return body
	}
	input := gjson.Get(unsafe.String(unsafe.SliceData(body), len(body)), "input")
	if !input.IsArray() || input.Index <= 0 {
		return body
	}
	bound := func(item gjson.Result) bool {
		if !strings.Contains(item.Raw, `"encrypted_content"`) {
			return false
		}
		blob := item.Get("encrypted_content")
		return blob.Type == gjson.String && s.foreign(r, account, blob.Str)
	}
	foreign := false
	input.ForEach(func(_, item gjson.Result) bool {
		foreign = bound(item)
		return !foreign
	})
	if !foreign {
		return body
	}
	// Something must go: the array is written anew, item by item, every
	// item that stays as it was sent.
	out := make([]byte, 0, len(body))
	out = append(append(out, body[:input.Index]...), '[')
	n := 0
	add := func(item []byte) {
		if n > 0 {
			out = append(out, ',')
		}
		n++
		out = append(out, item...)
	}
	input.ForEach(func(_, item gjson.Result) bool {
		if !bound(item) {
			add([]byte(item.Raw))
			return true
		}
		switch typ := item.Get("type").Str; {
		case typ == "reasoning":
			if kept, ok := readableReasoning(item); ok {
				add(kept)
			}
		case compactionTypes[typ]:
			if redo != nil {
				if again := redo(item.Get("encrypted_content").Str); again != nil {
					add(again)
					return true
				}
			}
			r.contextCut = true
			add(developerNote(cutNote))
		default:
			add(developerNote(leftOut + typ))
		}
		return true
	})
	out = append(out, ']')
	return append(out, body[input.Index+len(input.Raw):]...)
}

// mayBeForeign reports whether body, going to account, may carry a blob
// account must not be sent; false is certain, true is for unbind to look
// at item by item. Over HTTP it looks only at the blobs jsonscan.Scan
// noted in r's body (an edited body's items are the client's, unchanged),
// and at none while no other account has minted anything: an API-key
// pool, or a body without blobs, costs no search at all. A socket's body may carry
// the conversation the socket remembers in front, which no scan saw.
func (s *Server) mayBeForeign(r *request, account string, body []byte) bool {
	switch {
	case r.socket != nil:
		return bytes.Contains(body, encryptedKey)
	case len(r.scan.Blobs) == 0:
		return false
	case r.unbindAll:
		return true
	case s.mints.onlyBy(account):
		return false
	}
	in, ok := r.memberAt("input")
	if !ok || r.body[in.ValStart] != '[' {
		return false
	}
	for _, b := range r.scan.Blobs {
		if b.Start < in.ValStart || b.End > in.End || r.body[b.Start] != '"' {
			continue // not in an input item, or not a string: not a blob
		}
		if s.foreign(r, account, jsonscan.StringAt(r.body, b.Start, b.End)) {
			return true
		}
	}
	return false
}

// foreign reports whether blob must not go to account.
func (s *Server) foreign(r *request, account, blob string) bool {
	if r.unbindAll {
		return true
	}
	owner, ok := s.mints.owner(blob)
	return ok && owner != account
}

// readableReasoning is a reasoning item without encrypted_content, id and
// status, the members only its own account can use; ok is false when no
// summary or content is left to read.
func readableReasoning(item gjson.Result) ([]byte, bool) {
	readable := false
	out := []byte{'{'}
	n := 0
	item.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "encrypted_content", "id", "status":
			return true
		case "summary", "content":
			readable = readable || len(v.Array()) > 0
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		out = append(out, k.Raw...)
		out = append(out, ':')
		out = append(out, v.Raw...)
		return true
	})
	return append(out, '}'), readable
}

// developerNote is a developer message item with text.
func developerNote(text string) []byte {
	q, _ := json.Marshal(text)
	b := append([]byte(`{"type":"message","role":"developer","content":[{"type":"input_text","text":`), q...)
	return append(b, `}]}`...)
}

// disown marks every blob of r that rotor knows no owner of as unreadable
// by any account: account has just refused one of them.
func (s *Server) disown(r *request) {
	mark := func(items gjson.Result) {
		items.ForEach(func(_, item gjson.Result) bool {
			if b := item.Get("encrypted_content"); b.Type == gjson.String && b.Str != "" {
				if _, ok := s.mints.owner(b.Str); !ok {
					s.mints.learn(b.Str, unknownOwner)
				}
			}
			return true
		})
	}
	if r.encoded || !bytes.Contains(r.body, encryptedKey) && r.prior == nil {
		return
	}
	mark(jsonscan.Get(r.body, "input"))
	if r.prior != nil {
		for _, p := range r.prior.Parts() {
			if bytes.Contains(p, encryptedKey) {
				mark(gjson.Parse("[" + string(p) + "]"))
			}
		}
	}
}

// turnStateHeader carries the backend's sticky routing within a turn: an
// upstream sets it on its answer (a socket's handshake, an HTTP answer),
// Codex sends it back with the turn's next requests. Like a blob it
// belongs to the account that set it.
const turnStateHeader = "x-codex-turn-state"

// learnTurnState records the turn state an answer of account set.
func (s *Server) learnTurnState(v []byte, account string) {
	if len(v) > 0 {
		s.mints.learn(string(v), account)
	}
}

// foreignTurnState reports whether the turn state v, sent by the client,
// was set by an account other than account; such a one is not sent.
func (s *Server) foreignTurnState(v []byte, account string) bool {
	if len(v) == 0 {
		return false
	}
	owner, ok := s.mints.owner(string(v))
	return ok && owner != account
}
