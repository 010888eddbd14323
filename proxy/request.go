package proxy

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/chat"
	"github.com/rotorproxy/rotor/proxy/coding"
	"github.com/rotorproxy/rotor/proxy/jsonscan"
	"github.com/rotorproxy/rotor/proxy/upstream"
	"github.com/rotorproxy/rotor/proxy/websocket"
)

// request is one client request on its way through the forward loop:
// what the client asked for, read once, and what the loop has learnt
// about it so far.
type request struct {
	id        string // x-request-id, in logs and payloads
	op        op
	start     time.Time
	transport string // how it came in, when not as an HTTP request: transportWebSocket
	// header and query are the client's; they, like body, are valid
	// until the request is finished.
	header *fasthttp.RequestHeader
	query  []byte
	body   []byte
	// raw is the body as it came when it came compressed in a coding
	// rotor reads (docs/codex.md); body is then the decoded JSON, in
	// heldBody's buffer.
	raw      []byte
	coding   coding.Coding
	heldBody *bodyBuf

	// What rotor reads in the body: its members (unless it is encoded in
	// a coding rotor cannot read, and so opaque), the model and the
	// affinity key.
	encoded     bool
	scan        jsonscan.Scanned
	chat        chat.Request // op == opChat
	codexClient bool         // a models request from Codex CLI: it gets the catalog as is
	// codexCatalog: Codex's catalog is asked for and a ChatGPT account
	// could answer it, so no API key is asked (apiKeyAdapter.refuses).
	codexCatalog bool
	model        string
	tier         string // the service_tier asked for, "" for none
	affinityKey  string
	// fallbackAffinity is the conversation of a request that names none:
	// a socket's requests stay together (socket.create).
	fallbackAffinity string
	// keyDerived: the affinity key is derived from the conversation's
	// beginning (docs/selection.md); adopted: such a key, new to the selector, was
	// bound to the account already serving the request's socket.
	keyDerived, adopted bool

	// A request that came in on a socket: the socket, its frame as sent
	// and the frame's input items, the exchange it names if the socket
	// remembers it, whether body is the HTTP form yet (asHTTP), and the
	// upstream socket that answered, if one did.
	socket     *socket
	frame      []byte
	frameInput []byte
	prior      *websocket.History
	httpForm   bool
	answeredBy *websocket.Upstream

	// edited is the body as an adapter that edits bodies made it, once
	// per request (chatgptAdapter.body).
	edited struct {
		made       bool
		body       []byte
		answerForm answerForm
		err        error
	}
	// recoded is an edited body (from) compressed again in coding, once
	// per request (request.wire).
	recoded struct{ from, body []byte }
	// listAliases are the alias names the attempt's account kind adds to
	// a models list (Server.listsAliases).
	listAliases []string

	// The loop's progress: accounts attempted (ids) and what each
	// attempt came to, the last account's index as users number it, and
	// the endpoints that could not be reached, behind which no other
	// account is tried unless probing lets one attempt through.
	attempted   []string
	verdicts    []verdict
	uri         []byte // the attempt's upstream URI (uriOf)
	lastIndex   int
	unreachable []string
	probing     bool
	netErr      error // the last connect failure, for the client's message
	// upstreamAnswered: an attempt got an upstream's answer, if a failed
	// one, so the answer the client gets has a time to first byte.
	upstreamAnswered bool

	// unbindAll: an account refused a blob rotor did not know to be
	// foreign, so every blob is taken out of the retry (docs/codex.md);
	// contextCut: a compaction another account made could not be carried
	// over, and the conversation lost its summarized context.
	unbindAll, contextCut bool
	// recompacted: a compaction another account made was made again on
	// this one; recompactDepth: r is itself such a remake (recompact).
	recompacted    bool
	recompactDepth int
	// installationID is the client's installation id (installation),
	// read once.
	installationID   string
	installationRead bool
	// answer is the attempt's answer (readStart's), in r rather than
	// allocated with every attempt; commit copies what it needs of it.
	answer answer
	// watch watches the client during the attempt in progress
	// (watchedAttempt), nil between attempts.
	watch *upstream.ClientWatch
	// dialWait bounds an upstream socket's handshake in place of
	// ConnectTimeout (dialEarly's, which the client's handshake waits for).
	dialWait time.Duration
	// redialed: the socket's upstream socket expired and a new one was
	// opened for this request; it is not done twice.
	redialed bool

	// counted: the request was read, so its end is a usage record (a
	// refusal before that, by the guard or the route, is only logged).
	counted bool
	// streaming: its answer is being relayed as a stream, counted in the
	// open streams until finish.
	streaming bool
	// finished: finish has run; a socket's request a bug ended is
	// finished only if it has not been (socket.panicked).
	finished bool

	// pooled: the request came from requests and goes back there once
	// finished (release); handedOff: its answer's relay, or its socket,
	// holds it past the handler, and that relay releases it.
	pooled, handedOff bool
}

// requests recycles the requests of HTTP calls. A request is 1.6 KiB,
// most of it the table of its body's members; made afresh for every call,
// it is garbage that the collector leaves resident for minutes after a
// burst of streams, whose read buffers have raised its goal far above
// what the streams themselves hold.
var requests = sync.Pool{New: func() any { return new(request) }}

// newHTTPRequest returns a request for one HTTP call, with its id. The
// handler releases it when it returns, unless it was handed off.
func newHTTPRequest(header *fasthttp.RequestHeader) *request {
	r := requests.Get().(*request)
	r.id, r.header, r.pooled = newRequestID(), header, true
	return r
}

// release returns a pooled request once nothing refers to it any more;
// a request made otherwise (a socket's) is left to the collector.
//
// The arrays under attempted, verdicts and uri are kept, emptied, for
// the next request: nothing holds them past finish, and most requests
// would otherwise allocate them anew for their one attempt.
func (r *request) release() {
	if r.pooled {
		attempted, verdicts, uri := r.attempted[:0], r.verdicts[:0], r.uri[:0]
		clear(r.attempted) // no account id is kept alive by a pooled request
		if cap(uri) > 4<<10 {
			uri = nil // a long query's: not kept for every request after
		}
		*r = request{attempted: attempted, verdicts: verdicts, uri: uri}
		requests.Put(r)
	}
}

// read fills in what rotor needs from the body, decoded first when it is
// compressed: its members, checked to be JSON, the Chat Completions
// parameters, the model and the affinity key. A refusal is the client's
// fault: 400, or 413 for a body that decodes to more than maxBody.
func (r *request) read(maxBody int) *rerr.Spec {
	// A body in a coding rotor cannot read is forwarded as it came, with
	// its header: rotor reads nothing in it and rewrites nothing.
	c, opaque := coding.Parse(r.header.ContentEncoding())
	r.encoded = opaque
	if c != coding.None && r.op != opModels {
		if spec := r.decode(c, maxBody); spec != nil {
			return spec
		}
	}
	var f bodyFields
	switch {
	case r.op == opModels:
		r.codexClient = hasQueryArg(r.query, "client_version")
	case r.encoded:
	case !jsonscan.Scan(r.body, &r.scan):
		return &rerr.Spec{Code: rerr.ProxyBadRequest, Message: "request body is not valid JSON"}
	case r.op == opChat:
		var err error
		if !r.scan.Object {
			return &rerr.Spec{Code: rerr.ProxyBadRequest, Message: "request body is not a JSON object"}
		}
		// From the scan's members: no second walk of the messages.
		if r.chat, err = chat.ParseMembers(r.scan.Each(r.body)); err != nil {
			return &rerr.Spec{Code: rerr.ProxyBadRequest, Message: err.Error()}
		}
		r.model = r.chat.Model
		f.promptCacheKey = r.chat.PromptCacheKey // read by chat.ParseMembers
		r.tier = strings.Clone(readFields(r.body, r.scan.Members).tier)
	default:
		f = readFields(r.body, r.scan.Members)
		r.model = strings.Clone(f.model) // outlives the pooled body in logs
		r.tier = strings.Clone(f.tier)
	}
	// A conversation the request names, else the one its beginning
	// derives (docs/selection.md), else the socket's own: a client that opens a
	// socket per turn and names nothing keeps its conversation on one
	// account as it would over HTTP.
	r.affinityKey = affinityKey(r.header, f)
	if r.affinityKey == "" {
		r.affinityKey = derivedAffinity(r)
		r.keyDerived = r.affinityKey != ""
		r.affinityKey = cmp.Or(r.affinityKey, r.fallbackAffinity)
	}
	return nil
}

// hasQueryArg reports whether the query string q has an argument name.
func hasQueryArg(q []byte, name string) bool {
	for len(q) > 0 {
		var arg []byte
		arg, q, _ = bytes.Cut(q, []byte{'&'})
		if k, _, _ := bytes.Cut(arg, []byte{'='}); string(k) == name {
			return true
		}
	}
	return false
}

// sessionHeaders name a client's conversation, in the order trusted.
// Newer Codex CLIs spell it session-id on the wire.
var sessionHeaders = []string{"session_id", "session-id", "conversation_id"}

// affinityKey is the conversation a request belongs to: a session header,
// else the body's prompt_cache_key, else its previous_response_id. It is a
// fixed-size digest, so a client cannot make rotor hold megabytes of keys
// for the affinity's lifetime.
func affinityKey(h *fasthttp.RequestHeader, f bodyFields) string {
	for _, name := range sessionHeaders {
		if v := h.Peek(name); len(v) > 0 {
			return digestKey('s', v)
		}
	}
	if f.promptCacheKey != "" {
		return digestKey('p', []byte(f.promptCacheKey))
	}
	if f.previousResponseID != "" {
		return digestKey('r', []byte(f.previousResponseID))
	}
	return ""
}

// derivedAffinity is the conversation of a request that names none (docs/selection.md): a digest of its model, its instructions or system messages, and
// its first user message, which every later turn of the same
// conversation repeats. Different conversations get different keys, and
// so still spread over the pool; "" when the body has no user message to
// tell it by. Of each part only its length and its first affinityPrefix
// bytes are digested (digestBounded), so a pasted file of megabytes costs
// what a short message does.
func derivedAffinity(r *request) string {
	if r.encoded || r.op != opResponses && r.op != opChat && r.op != opCompact {
		return ""
	}
	// The members as jsonscan.Scan found them: no second walk over a body of
	// megabytes, and nothing read past the first user message.
	var turns []byte
	if r.op == opChat {
		turns = r.member("messages")
	} else {
		turns = r.member("input")
	}
	if len(turns) == 0 || turns[0] != '[' {
		return "" // one turn as a string: no conversation to keep
	}
	h := sha256.New()
	io.WriteString(h, r.model)
	h.Write([]byte{0})
	if r.op != opChat {
		digestBounded(h, r.member("instructions"))
	}
	// The first user message ends the beginning; what comes before it
	// that is not a system or developer message does not count.
	user := false
	visit := func(item []byte) bool {
		switch jsonscan.RoleOf(item) {
		case "system", "developer":
			digestBounded(h, item)
		case "user":
			digestBounded(h, item)
			user = true
			return false
		}
		return true
	}
	eachTurn(r, turns, visit)
	if !user {
		return ""
	}
	return string(append([]byte{'d'}, h.Sum(nil)...))
}

// eachTurn calls fn with each element of turns, the body's conversation,
// until fn returns false: the elements jsonscan.Scan noted first, with no walk
// at all, then, past them, as jsonscan.EachItem walks them.
func eachTurn(r *request, turns []byte, fn func(item []byte) bool) {
	sc := &r.scan
	if sc.NTurns == 0 || &r.body[sc.Conversation.Start] != &turns[0] {
		jsonscan.EachItem(turns, 0, fn)
		return
	}
	for _, t := range sc.Turns[:sc.NTurns] {
		if !fn(r.body[t.Start:t.End]) {
			return
		}
	}
	if !sc.AllTurns {
		jsonscan.EachItem(turns, sc.Turns[sc.NTurns-1].End-sc.Conversation.Start, fn)
	}
}

// affinityPrefix is how much of each part of a conversation's beginning
// derivedAffinity digests. 4 KiB is about a thousand tokens: two
// conversations that agree on that much of their first message, and on
// its length to the byte, start with the same pasted text and the same
// question around it. Sending both to one account costs nothing and keeps
// their shared beginning in one prompt cache, which is kept by prefix
// too; and it is 500 times less to digest than a pasted 2 MiB file.
const affinityPrefix = 4 << 10

// digestBounded writes to h the length of v and its first affinityPrefix
// bytes, as they are in the body (no copy). The length keeps apart parts
// that share their first bytes and not their size; it leads, so that the
// parts' boundaries cannot shift into each other.
func digestBounded(h hash.Hash, v []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(v)))
	h.Write(n[:])
	h.Write(v[:min(len(v), affinityPrefix)])
}

// member is the value of the body's top-level member key as sent (the
// first, if repeated), nil when the body has none or is not an object.
func (r *request) member(key string) []byte {
	if m, ok := r.memberAt(key); ok {
		return r.body[m.ValStart:m.End]
	}
	return nil
}

// memberAt is where the body's top-level member key is (the first, if
// repeated); ok is false when the body has none.
func (r *request) memberAt(key string) (jsonscan.Member, bool) {
	for _, m := range r.scan.Members {
		if m.Key(r.body) == key {
			return m, true
		}
	}
	return jsonscan.Member{}, false
}

// inputArray is the body's input when it is an array of items, nil for a
// string input or none: only items carry what rotor looks for in them.
func (r *request) inputArray() []byte {
	if in := r.member("input"); len(in) > 0 && in[0] == '[' {
		return in
	}
	return nil
}

// bodyFields are the top-level members of a Responses request that rotor
// itself reads. They are views into the body: valid only while it is.
type bodyFields struct {
	model, promptCacheKey, previousResponseID string
	// tier is the service_tier asked for (docs/selection.md), kept in the usage
	// record so the report shows how much went to Fast.
	tier string
}

// readFields reads bodyFields from a body's top-level members. Of
// repeated keys the first counts, as with gjson.Get.
func readFields(body []byte, ms []jsonscan.Member) bodyFields {
	var f bodyFields
	for _, m := range ms {
		var dst *string
		switch m.Key(body) {
		case "model":
			dst = &f.model
		case "prompt_cache_key":
			dst = &f.promptCacheKey
		case "previous_response_id":
			dst = &f.previousResponseID
		case "service_tier":
			dst = &f.tier
		}
		if dst != nil && *dst == "" {
			*dst, _ = m.Str(body)
		}
	}
	return f
}

// digestKey is kind followed by the SHA-256 of v.
func digestKey(kind byte, v []byte) string {
	sum := sha256.Sum256(v)
	var b [1 + sha256.Size]byte
	b[0] = kind
	copy(b[1:], sum[:])
	return string(b[:])
}
