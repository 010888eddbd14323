package upstreamtest

// The ChatGPT backend's own rules for account-bound content, lookups and
// the Lite marker (docs/codex.md), enforced so that no rotor test passes against
// a kinder upstream than the real one. The package doc says what each rule
// answers; this file holds the blobs, the checks and the refusals.

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The values of Behavior.BlobRefusal: how encrypted content the caller's
// account cannot read is refused. The real backend has answered in each of
// these shapes, so rotor must recognise all three.
const (
	// BlobRefusalCode (also the zero value "") is HTTP 400
	// invalid_request_error with code invalid_encrypted_content; on a
	// socket, an error frame with status 400.
	BlobRefusalCode = "code"
	// BlobRefusalNull is the same 400 with "code":null: only the message
	// says "encrypted content" and "could not be verified".
	BlobRefusalNull = "null"
	// BlobRefusalStream is a 200 stream (frames on a socket) of
	// response.created then response.failed whose response.error carries
	// code invalid_encrypted_content and the message, before any output. A
	// request that did not ask for a stream (POST /v1/responses without
	// "stream":true, the compact routes) gets BlobRefusalCode instead: the
	// backend has no stream to fail there.
	BlobRefusalStream = "stream"
)

const (
	// defaultSocketLifetime is the real backend's limit on one socket.
	defaultSocketLifetime = 60 * time.Minute

	// blobVersion leads every blob, as Fernet's version byte does; it is
	// why blobs (and real encrypted_content) start with "gAAAAA".
	blobVersion = 0x80
	// blobHeaderLen is version (1) + unix time (8) + GCM nonce (12); the
	// header is the GCM additional data, so none of it can be altered.
	blobHeaderLen = 1 + 8 + 12

	// includeEncrypted is the include value that makes the backend mint
	// encrypted_content on reasoning items.
	includeEncrypted = "reasoning.encrypted_content"

	// liteHeader marks a Responses Lite request over HTTP (and on a
	// socket's handshake); liteMetadataKey is the same marker inside a
	// response.create frame's client_metadata, which Codex uses because a
	// socket has no per-request headers.
	liteHeader      = "X-OpenAI-Internal-Codex-Responses-Lite"
	liteMetadataKey = "ws_request_header_x_openai_internal_codex_responses_lite"

	// socketModel is the openai-model header of a socket's 101 answer.
	socketModel = "gpt-5-codex"

	// maxSocketIDs bounds the responses a socket remembers for
	// previous_response_id: the newest ones are the ones a client names.
	maxSocketIDs = 64

	// Placeholders in the refusal fixtures, replaced at serve time (plain
	// text, not {{...}}, so the fixtures stay the real bodies word for word).
	blobPlaceholder     = "gAAA...DQ==" // the shortened blob, in both invalid_encrypted_content fixtures and sse/invalid_encrypted_content.sse
	itemPlaceholder     = "'rs_gone'"   // item_not_found_404.json
	previousPlaceholder = "'resp_gone'" // previous_response_not_found_400.json
	indexPlaceholder    = "input[0]"    // missing_encrypted_content_400.json (message and param)

	// blobRefusalStream is the BlobRefusalStream answer under testdata/sse/.
	blobRefusalStream = "invalid_encrypted_content.sse"

	// defaultContextWindow is the context window, in tokens, of every model
	// the fake serves (its catalog's context_window), unless
	// Behavior.ContextWindow says otherwise.
	defaultContextWindow = 272000
	// contextLengthStream is how the ChatGPT backend fails a streamed
	// request over the window, under testdata/sse/.
	contextLengthStream = "failed_context_length.sse"
)

// identity is the account a request speaks for: its chatgpt-account-id
// header when present (ChatGPT accounts), else its bearer token (API keys).
// Blobs are bound to it, as the real backend binds them to the account.
func identity(h http.Header, token string) string {
	if id := strings.TrimSpace(h.Get("chatgpt-account-id")); id != "" {
		return id
	}
	return token
}

// aead is the cipher that seals blobs. A fresh one per call: crypto/cipher
// does not promise that one AEAD may be used from several goroutines, and
// building one costs far less than anything else a request does here.
func (s *Server) aead() cipher.AEAD {
	block, err := aes.NewCipher(s.secret[:])
	if err != nil {
		panic("upstreamtest: " + err.Error()) // a 32-byte key cannot fail
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		panic("upstreamtest: " + err.Error())
	}
	return gcm
}

// Mint returns a new blob bound to owner (an account id, as sent in
// chatgpt-account-id, or a bearer token): the value this server puts in
// encrypted_content for that account, and accepts back only from it. Tests
// use it to build input that carries another account's content without
// running a stream first. Every call returns a different blob.
//
// The format is Fernet-looking base64url with padding:
// 0x80, the unix time (8 bytes, big-endian), a 12-byte random nonce, then
// owner sealed with AES-256-GCM under a key random per Server (the header
// is the additional data). It is verified without any state, so the fake
// remembers nothing per blob.
func (s *Server) Mint(owner string) string {
	hdr := make([]byte, blobHeaderLen, blobHeaderLen+len(owner)+16)
	hdr[0] = blobVersion
	binary.BigEndian.PutUint64(hdr[1:9], uint64(time.Now().Unix()))
	_, _ = rand.Read(hdr[9:blobHeaderLen])
	nonce := bytes.Clone(hdr[9:blobHeaderLen])
	sealed := s.aead().Seal(nil, nonce, []byte(owner), bytes.Clone(hdr))
	return base64.URLEncoding.EncodeToString(append(hdr, sealed...))
}

// Owner returns the owner a blob or an x-codex-turn-state value of this
// server was minted for: the chatgpt-account-id of the request that minted
// it, or its bearer token when it had none. ok is false for anything this
// server did not mint (another Server's blob, a made-up string).
func (s *Server) Owner(blob string) (owner string, ok bool) {
	raw, err := base64.URLEncoding.DecodeString(blob)
	if err != nil || len(raw) < blobHeaderLen+16 || raw[0] != blobVersion {
		return "", false
	}
	hdr := raw[:blobHeaderLen]
	plain, err := s.aead().Open(nil, hdr[9:], raw[blobHeaderLen:], hdr)
	if err != nil {
		return "", false
	}
	return string(plain), true
}

// readableBy reports whether blob was minted by this server for owner.
func (s *Server) readableBy(blob, owner string) bool {
	got, ok := s.Owner(blob)
	return ok && got == owner
}

// shortBlob is how the backend names a blob in its refusal: the first and
// last four characters ("gAAA...DQ=="), so a message never carries a whole
// blob.
func shortBlob(blob string) string {
	if len(blob) <= 11 {
		return blob
	}
	return blob[:4] + "..." + blob[len(blob)-4:]
}

// jsonText is v escaped for use inside a JSON string.
func jsonText(v string) string {
	q, _ := json.Marshal(v)
	return string(q[1 : len(q)-1])
}

// isTrue reports whether a marker's value says "true".
func isTrue(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "true") }

// inputItem is what the rules read of one input item.
type inputItem struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	// EncryptedContent is nil when absent or null; any string, "" too, is
	// a blob to verify.
	EncryptedContent *string `json:"encrypted_content"`
}

// inputItems returns the request's input items; a string input (or none)
// has none.
func (r *requestBody) inputItems() []inputItem {
	var items []inputItem
	if t := bytes.TrimSpace(r.Input); len(t) == 0 || t[0] != '[' {
		return nil
	}
	_ = json.Unmarshal(r.Input, &items) // a malformed item reads as empty
	return items
}

// encrypted reports whether the request asked for encrypted reasoning.
func (r *requestBody) encrypted() bool { return slices.Contains(r.Include, includeEncrypted) }

// liteMarked reports whether a socket frame carries the Lite marker in its
// client_metadata.
func (r *requestBody) liteMarked() bool {
	var v string
	return json.Unmarshal(r.ClientMetadata[liteMetadataKey], &v) == nil && isTrue(v)
}

// scope is where a request arrived and what came with it besides its body.
type scope struct {
	owner   string // identity of the caller (the handshake's on a socket)
	codex   bool   // a /backend-api/codex route, where store is always false
	compact bool   // a compact route
	lite    bool   // the Lite marker came with it
	// known reports whether previous_response_id names a response the
	// caller may continue; nil where the fake does not check it (/v1 over
	// HTTP, where the real API would look in its store).
	known func(id string) bool
	// window is the model's context window in tokens (0: not checked, as
	// on the compact routes).
	window int
}

// refusal is a request the backend's rules refuse: an error fixture with
// its status, and the text to put in place of the fixture's placeholder.
type refusal struct {
	status  int
	fixture string   // under testdata/errors/
	repl    []string // old, new pairs applied to the fixture's text
	// blob is set for encrypted content the caller cannot read: then
	// Behavior.BlobRefusal picks the form, and status/fixture are the
	// BlobRefusalCode one.
	blob string
	// stream, when set, is the refusal's form for a request that asked for
	// a stream: a fixture under testdata/sse/ ending in response.failed.
	stream string
}

// check applies the rules to a Responses or compact request, in the order
// the backend validates: the store flag, previous_response_id, the Lite
// marker, then the input items one by one (the first that fails decides).
// It returns nil for a request the rules let through.
func (s *Server) check(req *requestBody, sc scope) *refusal {
	if sc.codex && !sc.compact && req.Store != nil && *req.Store {
		return &refusal{status: http.StatusBadRequest, fixture: "store_required_false_400.json"}
	}
	if id := req.PreviousResponseID; id != "" && sc.known != nil && !sc.known(id) {
		return &refusal{status: http.StatusBadRequest, fixture: "previous_response_not_found_400.json",
			repl: []string{previousPlaceholder, "'" + jsonText(id) + "'"}}
	}
	items := req.inputItems()
	if !sc.compact && !sc.lite {
		if req.Reasoning != nil && req.Reasoning.Context == "all_turns" {
			return &refusal{status: http.StatusBadRequest, fixture: "lite_reasoning_context_400.json"}
		}
		if len(items) > 0 && items[0].Type == "additional_tools" {
			return &refusal{status: http.StatusBadRequest, fixture: "lite_additional_tools_400.json"}
		}
	}
	// With store false an item's id is a lookup in a store that holds
	// nothing: the ChatGPT backend never stores, /v1 only when asked to.
	lookups := sc.codex || (req.Store != nil && !*req.Store)
	for i, it := range items {
		switch it.Type {
		case "reasoning":
			if it.EncryptedContent != nil {
				if !s.readableBy(*it.EncryptedContent, sc.owner) {
					return blobRefusal(*it.EncryptedContent)
				}
			} else if it.ID != "" && lookups {
				return itemNotFound(it.ID)
			}
		case "item_reference":
			if lookups {
				return itemNotFound(it.ID)
			}
		case "compaction", "compaction_summary", "context_compaction":
			if it.EncryptedContent == nil {
				return &refusal{status: http.StatusBadRequest, fixture: "missing_encrypted_content_400.json",
					repl: []string{indexPlaceholder, "input[" + strconv.Itoa(i) + "]"}}
			}
			if !s.readableBy(*it.EncryptedContent, sc.owner) {
				return blobRefusal(*it.EncryptedContent)
			}
		}
	}
	if sc.window > 0 && req.inputTokens() > sc.window {
		rf := &refusal{status: http.StatusBadRequest, fixture: "context_length_exceeded_400.json"}
		if sc.codex {
			rf.stream = contextLengthStream // the backend fails the stream instead
		}
		return rf
	}
	return nil
}

// inputTokens is the request's input counted as the fake counts tokens
// everywhere (PromptCache too): one per 4 bytes.
func (r *requestBody) inputTokens() int { return (len(r.Input) + 3) / 4 }

// blobRefusal refuses encrypted content the caller cannot read.
func blobRefusal(blob string) *refusal {
	return &refusal{status: http.StatusBadRequest, fixture: "invalid_encrypted_content_400.json",
		repl: []string{blobPlaceholder, jsonText(shortBlob(blob))}, blob: blob}
}

// itemNotFound is the 404 of an item id looked up where nothing is stored.
func itemNotFound(id string) *refusal {
	return &refusal{status: http.StatusNotFound, fixture: "item_not_found_404.json",
		repl: []string{itemPlaceholder, "'" + jsonText(id) + "'"}}
}

// form resolves the form of rf: the error fixture to send, or the
// response.failed stream to replay instead (only when the request asked
// for a stream). Behavior.BlobRefusal decides it for a blob; an unknown
// BlobRefusal is an error, so a typo in a test fails loudly instead of
// testing the default.
func (rf *refusal) form(b Behavior, streamed bool) (fixture, stream string, err error) {
	if rf.blob == "" {
		if streamed && rf.stream != "" {
			return "", rf.stream, nil
		}
		return rf.fixture, "", nil
	}
	switch b.BlobRefusal {
	case "", BlobRefusalCode:
		return rf.fixture, "", nil
	case BlobRefusalNull:
		return "invalid_encrypted_content_null_400.json", "", nil
	case BlobRefusalStream:
		if streamed {
			return "", blobRefusalStream, nil
		}
		return rf.fixture, "", nil
	}
	return "", "", fmt.Errorf("unknown Behavior.BlobRefusal %q (want %q, %q or %q)", b.BlobRefusal, BlobRefusalCode, BlobRefusalNull, BlobRefusalStream)
}

// replacing returns an eventEdit that applies old, new pairs to every
// event: the refusal stream's placeholder.
func replacing(repl []string) eventEdit {
	return func(_ string, data []byte) []byte { return replaceAll(data, repl) }
}

// replaceAll applies old, new pairs to b. It never writes into b (fixtures
// are cached and shared), returning a copy when anything is replaced.
func replaceAll(b []byte, repl []string) []byte {
	for i := 0; i+1 < len(repl); i += 2 {
		b = bytes.ReplaceAll(b, []byte(repl[i]), []byte(repl[i+1]))
	}
	return b
}

// refuse answers a refused HTTP request, in the form rf and b say.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, b Behavior, rf *refusal, model string, streamed bool, fill filler) {
	fixture, stream, err := rf.form(b, streamed)
	switch {
	case err != nil:
		fixtureMissing(w, err)
	case stream != "":
		// No stream faults: the refusal is the answer under test.
		s.serveStream(w, r, Behavior{}, "sse/"+stream, model, fill, replacing(rf.repl), nil)
	default:
		s.serveFixtureError(w, rf.status, fixture, fill, rf.repl...)
	}
}

// eventEdit rewrites one event's data payload (compact JSON) before it is
// sent; typ is the event's type. It may return data itself, but never
// writes into it.
type eventEdit func(typ string, data []byte) []byte

// minting returns the eventEdit that mints encrypted_content for owner on
// every reasoning item of the answer, or nil when the request did not ask
// for it (include lacks "reasoning.encrypted_content"). The item's blob is
// the same in response.output_item.done and in the final response's output,
// as the backend's is; the map holding it lives for one answer and holds at
// most its items. A remote compaction (v2, a compaction_trigger last in the
// input) gets its compaction item's blob minted for owner instead.
func (s *Server) minting(owner string, req *requestBody) eventEdit {
	if req.compactionTrigger() {
		// A compaction is bound to its account, asked for or not.
		return replacing([]string{compactionPlaceholder, s.Mint(owner)})
	}
	if !req.encrypted() {
		return nil
	}
	blobs := make(map[string]string)
	return func(typ string, data []byte) []byte {
		switch typ {
		case "response.output_item.done", "response.completed", "response.incomplete":
		default:
			return data
		}
		spans := reasoningItems(data)
		if len(spans) == 0 {
			return data
		}
		out := make([]byte, 0, len(data)+len(spans)*(len(owner)+96))
		last := 0
		for _, sp := range spans {
			if sp.hasBlob {
				continue // a fixture that already carries one keeps it
			}
			blob, ok := blobs[sp.id]
			if !ok || sp.id == "" {
				blob = s.Mint(owner)
				if sp.id != "" {
					blobs[sp.id] = blob
				}
			}
			out = append(out, data[last:sp.end]...)
			out = append(out, `,"encrypted_content":"`...)
			out = append(out, blob...)
			out = append(out, '"')
			last = sp.end
		}
		return append(out, data[last:]...)
	}
}

// itemSpan is a reasoning item found in an event: the offset of its
// closing brace, its id, and whether it already has encrypted_content.
type itemSpan struct {
	end     int
	id      string
	hasBlob bool
}

// reasoningItems finds every object with "type":"reasoning" in data, in
// order, by walking its tokens: the event is rewritten in place rather than
// decoded and encoded again, so every other byte stays as recorded.
func reasoningItems(data []byte) []itemSpan {
	type frame struct {
		object, wantKey bool
		key, typ, id    string
		hasBlob         bool
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var (
		stack []frame
		out   []itemSpan
	)
	for {
		tok, err := dec.Token()
		if err != nil {
			return out // io.EOF, or malformed: what was found so far
		}
		if n := len(stack) - 1; n >= 0 && stack[n].object && stack[n].wantKey {
			if k, ok := tok.(string); ok {
				stack[n].key, stack[n].wantKey = k, false
				continue
			}
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				stack = append(stack, frame{object: d == '{', wantKey: d == '{'})
				continue // the parent's value ends when this one closes
			default:
				f := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				if f.object && f.typ == "reasoning" {
					out = append(out, itemSpan{end: int(dec.InputOffset()) - 1, id: f.id, hasBlob: f.hasBlob})
				}
			}
		}
		// A value of the enclosing object is complete.
		if n := len(stack) - 1; n >= 0 && stack[n].object {
			p := &stack[n]
			switch p.key {
			case "type":
				p.typ, _ = tok.(string)
			case "id":
				p.id, _ = tok.(string)
			case "encrypted_content":
				p.hasBlob = true
			}
			p.wantKey = true
		}
	}
}

// idRing is the bounded set of response ids a socket produced: the newest
// maxSocketIDs of them.
type idRing struct {
	ids  [maxSocketIDs]string
	next int
}

func (r *idRing) add(id string) {
	r.ids[r.next] = id
	r.next = (r.next + 1) % maxSocketIDs
}

func (r *idRing) has(id string) bool {
	return id != "" && slices.Contains(r.ids[:], id)
}
