package jsonscan

import (
	"bytes"
	"encoding/binary"
	"iter"
	"math/bits"
	"unsafe"

	"github.com/tidwall/gjson"
)

// A Member is one top-level member of a JSON object: its key (quotes
// included) spans Start to KeyEnd, its value ValStart to End.
type Member struct {
	Start, KeyEnd, ValStart, End int
}

// maxDepth bounds nesting, as encoding/json does: a body of a million '['
// must not cost a million stack frames.
const maxDepth = 10000

// TopMembers is how many members a body's scan keeps without allocating;
// Responses bodies have about a dozen.
const TopMembers = 24

// Scanned is a body read by Scan. A caller keeps one and hands it to
// Scan again: up to TopMembers members fit in it without allocating.
type Scanned struct {
	Object  bool     // the body is a JSON object
	Members []Member // its top-level members, in order
	array   [TopMembers]Member
	// Blobs are the values of every "encrypted_content" member in the
	// body, at any depth: account-bound content (docs/codex.md) can only be
	// where one is, so a body without any is never looked at for it
	// again. A key spelled with escapes is not seen, as bytes.Contains
	// did not see one before.
	Blobs []Span
	// Turns[:NTurns] are where the first elements of the conversation
	// (the first "input" or "messages" member's array) are, Conversation
	// that member's value and AllTurns whether Turns holds every element:
	// what docs/cost.md's derived key reads, found without walking a
	// pasted file again.
	Turns        [HeadTurns]Span
	NTurns       int
	Conversation Span
	AllTurns     bool
	// plain keeps the scan's dense text from the assembly: tests hold
	// the assembly to the Go reading with it.
	plain bool
}

// HeadTurns is how many of a conversation's first elements a scan notes:
// its system or developer messages and its first user message are among
// them in every client seen.
const HeadTurns = 8

// A Span is where a value is in a body: body[Start:End].
type Span struct{ Start, End int }

// BlobKey is the key, quotes included, whose values Scan notes as Blobs
// wherever it is in a body.
const BlobKey = `"encrypted_content"`

// Get reads path in JSON data (a request body, a frame) as
// gjson.GetBytes does, without copying what it finds: it runs on bodies
// of megabytes, where GetBytes would copy a whole history. The result
// points into data, so nothing of it may outlive data.
func Get(data []byte, path string) gjson.Result {
	return gjson.Get(unsafe.String(unsafe.SliceData(data), len(data)), path)
}

// Scan reports whether body is one valid JSON value (RFC 8259, with
// surrounding whitespace) and, when it is an object, records its top-level
// members in s. History is mostly text, and str skips text fast; see
// there for the one laxity this buys.
func Scan(body []byte, s *Scanned) bool {
	return scan(body, s, false)
}

// scan is Scan; plain keeps dense text from dense and to str's own
// loop, the reading there is on CPUs without AVX2 and other
// architectures: tests hold the two to each other.
func scan(body []byte, s *Scanned, plain bool) bool {
	s.Members, s.Blobs = s.array[:0], s.Blobs[:0]
	s.NTurns, s.Conversation, s.AllTurns, s.Object = 0, Span{}, false, false
	s.plain = plain
	p := scanner{b: body, rec: s}
	i := p.space(0)
	if i < len(body) && body[i] == '{' {
		s.Object = true
		i = p.object(i, 0, s)
	} else {
		i = p.value(i, 0)
	}
	return i >= 0 && p.space(i) == len(body)
}

// EachItem calls fn with each element of arr, a JSON array a scan has
// found valid, until fn returns false, from the one after from: arr's
// opening bracket, or the end of an element. Elements are walked as
// Scan walks them, text at memory speed, with no gjson parse.
func EachItem(arr []byte, from int, fn func(item []byte) bool) {
	p := scanner{b: arr}
	i := p.space(from)
	if i < len(arr) && (arr[i] == '[' || arr[i] == ',') {
		i = p.space(i + 1)
	}
	for i < len(arr) && arr[i] != ']' {
		end := p.value(i, 1)
		if end < 0 || !fn(arr[i:end]) {
			return
		}
		if i = p.space(end); i < len(arr) && arr[i] == ',' {
			i = p.space(i + 1)
		}
	}
}

// RoleOf is the role of item, a JSON object a scan has found valid (""
// when it is not an object or has no string role). Its members are
// walked only as far as role, which clients send before content.
func RoleOf(item []byte) string {
	if len(item) == 0 || item[0] != '{' {
		return ""
	}
	p := scanner{b: item}
	for i := p.space(1); i < len(item) && item[i] == '"'; {
		start := i
		keyEnd := p.str(i)
		if keyEnd < 0 {
			return ""
		}
		valStart := p.space(p.space(keyEnd) + 1) // past the colon
		end := p.value(valStart, 1)
		if end < 0 {
			return ""
		}
		if StringAt(item, start, keyEnd) == "role" {
			if item[valStart] != '"' {
				return ""
			}
			return StringAt(item, valStart, end)
		}
		if i = p.space(end); i < len(item) && item[i] == ',' {
			i = p.space(i + 1)
		}
	}
	return ""
}

// IsConversationKey reports whether key (quotes included) names the
// conversation: "input" (Responses) or "messages" (Chat Completions).
func IsConversationKey(key []byte) bool {
	return string(key) == `"input"` || string(key) == `"messages"`
}

// each yields the key (unescaped) and the value as sent of every
// top-level Member s found in body, in order.
func (s *Scanned) Each(body []byte) iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		for _, m := range s.Members {
			if !yield(m.Key(body), body[m.ValStart:m.End]) {
				return
			}
		}
	}
}

// key is m's key, unescaped. The common case (no escapes) is a view into
// body and costs nothing.
func (m Member) Key(body []byte) string {
	return StringAt(body, m.Start, m.KeyEnd)
}

// str is m's value when it is a string, unescaped (a view into body when
// it has no escapes), and ok reports whether it is one.
func (m Member) Str(body []byte) (v string, ok bool) {
	if body[m.ValStart] != '"' {
		return "", false
	}
	return StringAt(body, m.ValStart, m.End), true
}

// StringAt is the JSON string body[from:to] (quotes included), unescaped.
func StringAt(body []byte, from, to int) string {
	raw := body[from+1 : to-1]
	if bytes.IndexByte(raw, '\\') >= 0 {
		return gjson.ParseBytes(body[from:to]).Str
	}
	if len(raw) == 0 {
		return ""
	}
	return unsafe.String(&raw[0], len(raw))
}

// scanner walks one body. Each method takes the index where its element
// starts and returns the index just past it, or -1 when the body is not
// valid JSON there. rec, when set, gets the spans of the body's blobs.
// It is copied into every call, so it holds no more than these two:
// a third field cost the scan of small-item histories 10-15%.
type scanner struct {
	b   []byte
	rec *Scanned
}

func (p scanner) space(i int) int {
	for i < len(p.b) {
		switch p.b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func (p scanner) value(i, depth int) int {
	if i >= len(p.b) {
		return -1
	}
	switch c := p.b[i]; {
	case c == '"':
		return p.str(i)
	case c == '{':
		return p.object(i, depth, nil)
	case c == '[':
		return p.array(i, depth, nil)
	case c == 't':
		return p.literal(i, "true")
	case c == 'f':
		return p.literal(i, "false")
	case c == 'n':
		return p.literal(i, "null")
	case c == '-' || c >= '0' && c <= '9':
		return p.number(i)
	}
	return -1
}

// object scans the object at i; with s set it is the top level, and its
// members are recorded there.
func (p scanner) object(i, depth int, s *Scanned) int {
	if depth++; depth > maxDepth {
		return -1
	}
	i = p.space(i + 1)
	if i < len(p.b) && p.b[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(p.b) || p.b[i] != '"' {
			return -1
		}
		start := i
		if i = p.str(i); i < 0 {
			return -1
		}
		keyEnd := i
		if i = p.space(i); i >= len(p.b) || p.b[i] != ':' {
			return -1
		}
		valStart := p.space(i + 1)
		if s != nil && s.Conversation.End == 0 && valStart < len(p.b) && p.b[valStart] == '[' && IsConversationKey(p.b[start:keyEnd]) {
			i = p.array(valStart, depth, s)
			s.Conversation = Span{valStart, i}
		} else {
			i = p.value(valStart, depth)
		}
		if i < 0 {
			return -1
		}
		if s != nil {
			s.Members = append(s.Members, Member{Start: start, KeyEnd: keyEnd, ValStart: valStart, End: i})
		}
		// Keys are short, so comparing each costs next to nothing beside
		// the scan itself; it saves a search of the whole body per attempt.
		if p.rec != nil && keyEnd-start == len(BlobKey) && string(p.b[start:keyEnd]) == BlobKey {
			p.rec.Blobs = append(p.rec.Blobs, Span{valStart, i})
		}
		if i = p.space(i); i >= len(p.b) {
			return -1
		}
		switch p.b[i] {
		case '}':
			return i + 1
		case ',':
			i = p.space(i + 1)
		default:
			return -1
		}
	}
}

// array scans the array at i; with s set it is the conversation, and
// the spans of its first elements are noted there.
func (p scanner) array(i, depth int, s *Scanned) int {
	if depth++; depth > maxDepth {
		return -1
	}
	i = p.space(i + 1)
	if i < len(p.b) && p.b[i] == ']' {
		if s != nil {
			s.AllTurns = true
		}
		return i + 1
	}
	for n := 0; ; n++ {
		start := i
		if i = p.value(i, depth); i < 0 {
			return -1
		}
		if s != nil && n < HeadTurns {
			s.Turns[n], s.NTurns = Span{start, i}, n+1
		}
		if i = p.space(i); i >= len(p.b) {
			return -1
		}
		switch p.b[i] {
		case ']':
			if s != nil {
				s.AllTurns = n < HeadTurns
			}
			return i + 1
		case ',':
			i = p.space(i + 1)
		default:
			return -1
		}
	}
}

// str scans the string at i. Only quotes and backslashes matter in its
// text, and it is read in one of three ways, switching as the text goes:
// 8 bytes at a time while a special byte keeps turning up soon (keys,
// short values); a chunk at a time with bytes.IndexByte across text with
// no escapes (memory speed); and, from the first escape on, 64 bytes at
// a time from their marks (see marks), which is how text dense with
// escapes (pasted code, tool output: one every 10–20 bytes) is read.
// Escapes are validated, never decoded. Raw control characters inside a
// string are the one thing JSON forbids that this does not check:
// finding them costs a look at every byte, and the upstream refuses such
// a body itself, as a client error that no account is blamed for.
func (p scanner) str(i int) int {
	b := p.b
	i++
	for n := min(i+shortString, len(b)); ; {
		if i+8 > n {
			if i+8 > len(b) {
				return p.strTail(i)
			}
			break // shortString bytes with no special byte: a long text
		}
		m := specials(binary.LittleEndian.Uint64(b[i:]))
		if m == 0 {
			i += 8
			continue
		}
		i += bits.TrailingZeros64(m) >> 3
		if b[i] == '"' {
			return i + 1
		}
		goto dense // a backslash
	}
long:
	// A long string is read a chunk at a time, each chunk twice (for a
	// backslash, then for a quote before it) while it is still in the
	// cache: two passes over a whole 2 MiB string would read it from
	// memory twice. Each search stops at what it finds, so text with an
	// escape now and then costs the distance to it, not a chunk. An
	// escape soon after the last turns to the dense reading.
	for last := i; i < len(b); {
		end := min(i+strChunk, len(b))
		bs := end // the first backslash in the chunk
		if j := bytes.IndexByte(b[i:end], '\\'); j >= 0 {
			bs = i + j
		}
		if q := bytes.IndexByte(b[i:bs], '"'); q >= 0 {
			return i + q + 1
		}
		if bs == end {
			i = end
			continue
		}
		if bs-last < 64 {
			i = bs
			goto dense
		}
		if i = p.escape(bs); i < 0 {
			return -1
		}
		last = i
	}
	return -1
dense:
	// i is at a backslash that escapes: each block of 64 bytes from i has
	// its quotes and backslashes marked, which bytes the backslashes
	// escape is worked out from the marks alone, and only the escaped
	// bytes are looked at. A block without a backslash turns back to the
	// chunked reading. This loop is what costs on pasted files and tool
	// output, so where there is assembly for it, dense reads the blocks
	// it would, up to the first that needs Go: an invalid escape, a \u
	// escape whose digits cross into the next block, or no backslash.
	for i+64 <= len(b) {
		if haveDense && (p.rec == nil || !p.rec.plain) {
			var found bool
			if i, found = dense(b, i); found {
				return i
			}
			if i+64 > len(b) {
				break
			}
		}
		q, bs := marks((*[64]byte)(b[i:]))
		if bs == 0 {
			if q != 0 {
				return i + bits.TrailingZeros64(q) + 1
			}
			i += 64
			goto long
		}
		esc, pending := escaped(bs)
		if q &^= esc; q != 0 {
			k := bits.TrailingZeros64(q)
			if !p.escapes(i, esc&(1<<k-1)) {
				return -1
			}
			return i + k + 1
		}
		if !p.escapes(i, esc) {
			return -1
		}
		// A backslash that ends the block and escapes starts the next one.
		i += 64 - int(pending)
	}
	return p.strTail(i)
}

// strTail scans the rest of a string from i, at most 64 bytes before the
// body's end, a byte at a time.
func (p scanner) strTail(i int) int {
	b := p.b
	for i < len(b) {
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			if i = p.escape(i); i < 0 {
				return -1
			}
		default:
			i++
		}
	}
	return -1
}

// escaped is the bytes of a block (bit k for its byte k) that the
// backslashes bs escape, and pending is 1 when the block's last byte is a
// backslash that escapes the byte after the block. The block starts with
// no escape pending from before it. A run of backslashes escapes the
// byte after it when its length is odd; simdjson's way of telling which
// runs are odd: adding a run's first bit to the run carries to the bit
// just past it, and a run's length is odd when its start and that bit
// differ in parity.
func escaped(bs uint64) (esc, pending uint64) {
	const even = 0x5555555555555555
	starts := bs &^ (bs << 1)
	evenEnds := (bs + starts&even) &^ bs
	oddEnds, pending := bits.Add64(bs, starts&^even, 0)
	oddEnds &^= bs
	return evenEnds&^even | oddEnds&even, pending
}

// escapes reports whether the escapes in the block at i are valid:
// esc marks the bytes escaped (bit k for b[i+k]), each the byte after a
// backslash that escapes. Only those bytes are looked at.
func (p scanner) escapes(i int, esc uint64) bool {
	blk := (*[64]byte)(p.b[i:])
	for ; esc != 0; esc &= esc - 1 {
		k := bits.TrailingZeros64(esc) & 63
		if kind := escapeKind[blk[k]]; kind != escapeOne && (kind == escapeBad || p.escape(i+k-1) < 0) {
			return false
		}
	}
	return true
}

const (
	escapeBad = iota
	escapeOne
	escapeHex
)

// escapeKind is what may follow a backslash in a JSON string: a byte
// that ends a two-byte escape, u, which four hex digits follow, or
// anything else, which is invalid.
var escapeKind = [256]uint8{
	'"': escapeOne, '\\': escapeOne, '/': escapeOne, 'b': escapeOne, 'f': escapeOne,
	'n': escapeOne, 'r': escapeOne, 't': escapeOne, 'u': escapeHex,
}

// marksGeneric is marks a word at a time: the bytes of each 8 equal to a
// quote or a backslash get their high bit set, exactly, and the 8 high
// bits are gathered into one byte by a multiplication.
func marksGeneric(blk *[64]byte) (quotes, backslashes uint64) {
	for k := 0; k < 64; k += 8 {
		x := binary.LittleEndian.Uint64(blk[k:])
		quotes |= gather(equal(x, '"')) << k
		backslashes |= gather(equal(x, '\\')) << k
	}
	return quotes, backslashes
}

// equal sets the high bit of each byte of x equal to c, and no other bit.
func equal(x uint64, c byte) uint64 {
	const lows, highs = 0x7f7f7f7f7f7f7f7f, 0x8080808080808080
	t := x ^ (0x0101010101010101 * uint64(c))
	return ^((t&lows + lows) | t) & highs
}

// gather moves the high bits of m's bytes into its lowest byte, byte k's
// to bit k.
func gather(m uint64) uint64 {
	return (m >> 7) * 0x0102040810204080 >> 56
}

// specials marks the bytes of x (8 bytes of a string, first byte lowest)
// that are a quote or a backslash: the lowest set bit is in the first
// such byte. Bits above it may be false positives (a borrow), so only the
// lowest counts.
func specials(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q, bs := x^(ones*'"'), x^(ones*'\\')
	return ((q-ones)&^q | (bs-ones)&^bs) & highs
}

// shortString is how far str looks 8 bytes at a time past the string's
// start before it turns to IndexByte, which costs more to call than to
// run on a short string.
const shortString = 64

// strChunk is how much of a long string str reads at a time: well
// within a core's L1 and L2 caches.
const strChunk = 16 << 10

// escape scans the escape sequence at i.
func (p scanner) escape(i int) int {
	b := p.b
	if i+1 >= len(b) {
		return -1
	}
	switch b[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 2
	case 'u':
		if i+6 > len(b) {
			return -1
		}
		for _, h := range b[i+2 : i+6] {
			if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
				return -1
			}
		}
		return i + 6
	}
	return -1
}

func (p scanner) literal(i int, lit string) int {
	if len(p.b)-i < len(lit) || string(p.b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p scanner) number(i int) int {
	b := p.b
	digits := func(i int) int {
		j := i
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	default:
		if i = digits(i); i < 0 {
			return -1
		}
	}
	if i < len(b) && b[i] == '.' {
		if i = digits(i + 1); i < 0 {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i = digits(i); i < 0 {
			return -1
		}
	}
	return i
}
