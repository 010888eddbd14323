package backend

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
// the same account with every blob taken out (Sent.All).

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

// Mints remembers which account minted each blob rotor relayed, and each
// turn state. It is safe for concurrent use; the zero value is empty. It
// is kept in memory, per serve: two serves on one home share nothing
// here, and a blob minted through the other one is found by its refusal
// instead.
type Mints struct {
	mu       sync.Mutex
	cur, old map[mintKey]string
	// owners are the accounts that ever minted a blob rotor learnt (a
	// few: one per account, and unknownOwner); never fewer than own what
	// cur and old hold, so a pool where only one account minted anything
	// is seen as such without looking at a blob.
	owners []string
}

// Learn records that account minted blob.
func (m *Mints) Learn(blob, account string) {
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

// OnlyBy reports whether every blob rotor remembers was minted by account
// (or none was): then no blob can be foreign to it.
func (m *Mints) OnlyBy(account string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.owners) == 0 || len(m.owners) == 1 && m.owners[0] == account
}

// Owner is the account that minted blob, if rotor knows it.
func (m *Mints) Owner(blob string) (string, bool) {
	k := mintKeyOf(blob)
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, ok := m.cur[k]; ok {
		return a, true
	}
	a, ok := m.old[k]
	return a, ok
}

// LearnItem records the blob of one output item, if it carries one.
func (m *Mints) LearnItem(item gjson.Result, account string) {
	if b := item.Get("encrypted_content"); b.Type == gjson.String && b.Str != "" {
		m.Learn(b.Str, account)
	}
}

// LearnOutput records the blobs of a whole answer's output items (a JSON
// answer, such as a compaction's).
func (m *Mints) LearnOutput(answer []byte, account string) {
	if !bytes.Contains(answer, encryptedKey) {
		return
	}
	gjson.GetBytes(answer, "output").ForEach(func(_, item gjson.Result) bool {
		m.LearnItem(item, account)
		return true
	})
}

// encryptedKey is the key of a blob, as jsonscan.Scan finds it.
var encryptedKey = []byte(jsonscan.BlobKey)

// CarriesBlob reports whether b may carry a blob: whether it names the
// key of one anywhere. False is certain.
func CarriesBlob(b []byte) bool { return bytes.Contains(b, encryptedKey) }

// compactionTypes are the item types that carry a conversation's earlier
// context, summarized by the account that compacted it.
var compactionTypes = map[string]bool{"compaction": true, "compaction_summary": true, "context_compaction": true}

// Developer messages that stand in for content another account minted.
const (
	cutNote = "Earlier context of this conversation was summarized on another account and could not be carried over to this one."
	leftOut = "An item of this conversation that only another account can read was left out: "
)

// Sent is what Unbind knows of the request a body comes from, as the
// client sent it. It is passed by value: a few words, no allocation.
type Sent struct {
	// Body is the request's body as read, and Scan what jsonscan.Scan
	// noted of it: only the blobs it noted are looked at over HTTP.
	Body []byte
	Scan *jsonscan.Scanned
	// Socket says the request came over a socket: the body may carry in
	// front the conversation the socket remembers, which no scan saw.
	Socket bool
	// Encoded says the body goes compressed, as it came: nothing in it
	// is read.
	Encoded bool
	// All says every blob goes, whoever minted it: the account refused
	// one rotor could not place.
	All bool
}

// Unbind returns body as account may send it: every item whose
// encrypted_content another account minted is taken out (all of them when
// src.All is set). A reasoning item keeps what is readable of it
// (summary, content) and loses encrypted_content, id and status, and is
// dropped when nothing readable is left; a compaction item, or any other
// item only one account can read, becomes a developer message saying what
// was left out, unless redo can make the compaction again for account. The items account minted itself, and every byte around
// the changed items, are kept as sent. body is returned as it is (the
// same slice) when nothing in it is foreign. cut says whether
// a compaction had to go, for this account.
func (m *Mints) Unbind(src Sent, account string, body []byte, redo func(blob string) []byte) (out []byte, cut bool) {
	if src.Encoded || !m.mayBeForeign(&src, account, body) {
		return body, false
	}
	input := gjson.Get(unsafe.String(unsafe.SliceData(body), len(body)), "input")
	if !input.IsArray() || input.Index <= 0 {
		return body, false
	}
	bound := func(item gjson.Result) bool {
		if !strings.Contains(item.Raw, `"encrypted_content"`) {
			return false
		}
		blob := item.Get("encrypted_content")
		return blob.Type == gjson.String && m.foreign(&src, account, blob.Str)
	}
	foreign := false
	input.ForEach(func(_, item gjson.Result) bool {
		foreign = bound(item)
		return !foreign
	})
	if !foreign {
		return body, false
	}
	// Something must go: the array is written anew, item by item, every
	// item that stays as it was sent.
	out = make([]byte, 0, len(body))
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
			cut = true
			add(developerNote(cutNote))
		default:
			add(developerNote(leftOut + typ))
		}
		return true
	})
	out = append(out, ']')
	return append(out, body[input.Index+len(input.Raw):]...), cut
}

// mayBeForeign reports whether body, going to account, may carry a blob
// account must not be sent; false is certain, true is for Unbind to look
// at item by item. Over HTTP it looks only at the blobs jsonscan.Scan
// noted in src's body (an edited body's items are the client's, unchanged),
// and at none while no other account has minted anything: an API-key
// pool, or a body without blobs, costs no search at all. A socket's body may carry
// the conversation the socket remembers in front, which no scan saw.
func (m *Mints) mayBeForeign(src *Sent, account string, body []byte) bool {
	switch {
	case src.Socket:
		return bytes.Contains(body, encryptedKey)
	case len(src.Scan.Blobs) == 0:
		return false
	case src.All:
		return true
	case m.OnlyBy(account):
		return false
	}
	in, ok := inputOf(src)
	if !ok || src.Body[in.ValStart] != '[' {
		return false
	}
	for _, b := range src.Scan.Blobs {
		if b.Start < in.ValStart || b.End > in.End || src.Body[b.Start] != '"' {
			continue // not in an input item, or not a string: not a blob
		}
		if m.foreign(src, account, jsonscan.StringAt(src.Body, b.Start, b.End)) {
			return true
		}
	}
	return false
}

// inputOf is where src's body has its top-level input member.
func inputOf(src *Sent) (jsonscan.Member, bool) {
	for _, m := range src.Scan.Members {
		if m.Key(src.Body) == "input" {
			return m, true
		}
	}
	return jsonscan.Member{}, false
}

// foreign reports whether blob must not go to account.
func (m *Mints) foreign(src *Sent, account, blob string) bool {
	if src.All {
		return true
	}
	owner, ok := m.Owner(blob)
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

// Disown marks every blob of body's input, and of parts (the items of a
// socket's remembered conversation), that rotor knows no owner of as
// unreadable by any account: an account has just refused one of them.
func (m *Mints) Disown(body []byte, parts [][]byte) {
	mark := func(items gjson.Result) {
		items.ForEach(func(_, item gjson.Result) bool {
			if b := item.Get("encrypted_content"); b.Type == gjson.String && b.Str != "" {
				if _, ok := m.Owner(b.Str); !ok {
					m.Learn(b.Str, unknownOwner)
				}
			}
			return true
		})
	}
	if !bytes.Contains(body, encryptedKey) && parts == nil {
		return
	}
	mark(jsonscan.Get(body, "input"))
	for _, p := range parts {
		if bytes.Contains(p, encryptedKey) {
			mark(gjson.Parse("[" + string(p) + "]"))
		}
	}
}

// TurnStateHeader carries the backend's sticky routing within a turn: an
// upstream sets it on its answer (a socket's handshake, an HTTP answer),
// Codex sends it back with the turn's next requests. Like a blob it
// belongs to the account that set it.
const TurnStateHeader = "x-codex-turn-state"

// LearnTurnState records the turn state an answer of account set.
func (m *Mints) LearnTurnState(v []byte, account string) {
	if len(v) > 0 {
		m.Learn(string(v), account)
	}
}

// ForeignTurnState reports whether the turn state v, sent by the client,
// was set by an account other than account; such a one is not sent.
func (m *Mints) ForeignTurnState(v []byte, account string) bool {
	if len(v) == 0 {
		return false
	}
	owner, ok := m.Owner(string(v))
	return ok && owner != account
}
