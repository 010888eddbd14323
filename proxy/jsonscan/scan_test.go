package jsonscan

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/proxy/jsonscan/jsonscantest"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// scanSeeds are jsonscantest.Seeds: bodies of every shape a scan meets.
var scanSeeds = jsonscantest.Seeds

// FuzzScanBody holds Scan to encoding/json's verdict on every input
// (a raw control character in a string aside),
// and its members to gjson's view of the same object.
func FuzzScanBody(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkScan(t, body)
	})
}

func TestScanBody(t *testing.T) {
	t.Parallel()
	for _, s := range scanSeeds {
		checkScan(t, []byte(s))
	}
	deep := strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1)
	if Scan([]byte(deep), new(Scanned)) {
		t.Errorf("nesting deeper than %d accepted", maxDepth)
	}
	ok := strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)
	if !Scan([]byte(ok), new(Scanned)) {
		t.Errorf("nesting of %d refused", maxDepth)
	}
	// More members than the scan keeps in place still all get recorded.
	var b strings.Builder
	b.WriteString("{")
	for i := range 3 * TopMembers {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"k` + strings.Repeat("x", i) + `":` + `"v"`)
	}
	b.WriteString("}")
	checkScan(t, []byte(b.String()))
}

func checkScan(t *testing.T, body []byte) {
	t.Helper()
	var s Scanned
	got := Scan(body, &s)
	checkPlain(t, body, got, &s)
	// encoding/json's verdict, but for the one laxity Scan allows:
	// raw control characters inside strings.
	if want := json.Valid(body); got != want && (want || !bytes.ContainsFunc(body, func(r rune) bool { return r < 0x20 })) {
		t.Fatalf("Scan(%q) = %v, encoding/json says %v", body, got, want)
	}
	if !got {
		return
	}
	root := gjson.ParseBytes(body)
	if s.Object != root.IsObject() {
		t.Fatalf("Scan(%q): object %v", body, s.Object)
	}
	if !s.Object {
		return
	}
	i := 0
	root.ForEach(func(k, v gjson.Result) bool {
		if i >= len(s.Members) {
			t.Fatalf("Scan(%q): %d members, gjson sees more", body, len(s.Members))
		}
		m := s.Members[i]
		if key := m.Key(body); key != k.Str {
			t.Errorf("Member %d key %q, want %q", i, key, k.Str)
		}
		if raw := string(body[m.ValStart:m.End]); raw != v.Raw {
			t.Errorf("Member %d value %q, want %q", i, raw, v.Raw)
		}
		if str, ok := m.Str(body); ok != (v.Type == gjson.String) || str != v.Str && ok {
			t.Errorf("Member %d string %q %v, want %q", i, str, ok, v.Str)
		}
		i++
		return true
	})
	if i != len(s.Members) {
		t.Errorf("Scan(%q): %d members, gjson sees %d", body, len(s.Members), i)
	}
	checkTurns(t, body, &s)
}

// checkTurns holds the conversation's first elements, as Scan noted
// them, to gjson's elements of the first "input" or "messages" array.
func checkTurns(t *testing.T, body []byte, s *Scanned) {
	t.Helper()
	var conv *Member
	for k := range s.Members {
		m := &s.Members[k]
		if IsConversationKey(body[m.Start:m.KeyEnd]) && body[m.ValStart] == '[' {
			conv = m
			break
		}
	}
	if conv == nil {
		if s.NTurns != 0 || s.Conversation != (Span{}) {
			t.Fatalf("Scan(%q): turns noted with no conversation", body)
		}
		return
	}
	if s.Conversation != (Span{conv.ValStart, conv.End}) {
		t.Fatalf("Scan(%q): conversation at %v, its Member at %d-%d", body, s.Conversation, conv.ValStart, conv.End)
	}
	items := gjson.ParseBytes(body[conv.ValStart:conv.End]).Array()
	if want := min(len(items), HeadTurns); s.NTurns != want || s.AllTurns != (len(items) <= HeadTurns) {
		t.Fatalf("Scan(%q): %d turns noted (all %v), gjson sees %d", body, s.NTurns, s.AllTurns, len(items))
	}
	for k, sp := range s.Turns[:s.NTurns] {
		if got := string(body[sp.Start:sp.End]); got != items[k].Raw {
			t.Fatalf("Scan(%q): turn %d is %q, gjson sees %q", body, k, got, items[k].Raw)
		}
	}
	var walked []string
	EachItem(body[conv.ValStart:conv.End], 0, func(item []byte) bool { walked = append(walked, string(item)); return true })
	for k := range items {
		if k >= len(walked) || walked[k] != items[k].Raw {
			t.Fatalf("EachItem(%q) = %q, gjson sees %v", body[conv.ValStart:conv.End], walked, items)
		}
	}
	for _, it := range items {
		if got, want := RoleOf([]byte(it.Raw)), it.Get("role"); want.Type == gjson.String && got != want.Str || want.Type != gjson.String && got != "" {
			t.Fatalf("RoleOf(%q) = %q, gjson sees %s", it.Raw, got, want.Raw)
		}
	}
}

// checkPlain holds Scan's result on body, got and s, to the plain-Go
// reading's (no assembly for dense text), field by field: the assembly
// must change nothing but the time.
func checkPlain(t *testing.T, body []byte, got bool, s *Scanned) {
	t.Helper()
	var w Scanned
	if want := scan(body, &w, true); got != want || s.Object != w.Object || !slices.Equal(s.Members, w.Members) ||
		!slices.Equal(s.Blobs, w.Blobs) || s.Turns != w.Turns || s.NTurns != w.NTurns ||
		s.Conversation != w.Conversation || s.AllTurns != w.AllTurns {
		t.Fatalf("Scan(%q) = %v %+v, the plain reading %v %+v", body, got, s, want, &w)
	}
}

// checkStr holds str, with and without the assembly, on the string at
// body[0] to each other, and its verdict to encoding/json's.
func checkStr(t *testing.T, body []byte) {
	t.Helper()
	got, want := scanner{b: body}.str(0), scanner{b: body, rec: &Scanned{plain: true}}.str(0)
	if got != want {
		t.Fatalf("str(%q) = %d, the plain reading %d", body, got, want)
	}
	if got >= 0 && !json.Valid(body[:got]) && !bytes.ContainsFunc(body[:got], func(r rune) bool { return r < 0x20 }) {
		t.Fatalf("str(%q) = %d, encoding/json refuses %q", body, got, body[:got])
	}
}

// denseText turns fuzz input into the text of a long string dense with
// escapes, each input byte one piece of it: what dense is fast on, and
// every piece that makes it stop.
func denseText(data []byte) []byte {
	pieces := []string{`\`, `"`, `n`, `\`, `
`, `"`, `u`, `0`, `a`, `G`, `/`, `x`, "\u00e9", "¢", "Ü", `xxxxxxxxxxxxxxx`}
	b := []byte{'"'}
	for _, c := range data {
		b = append(b, pieces[c%uint8(len(pieces))]...)
		if c >= 240 {
			b = append(b, bytes.Repeat([]byte{'y'}, int(c-240)*8)...)
		}
	}
	return b
}

// FuzzDenseStrings holds the assembly reading of long, escape-dense
// strings to the plain-Go reading, directly (str) and through Scan.
func FuzzDenseStrings(f *testing.F) {
	f.Add([]byte("\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x01"))
	f.Add(bytes.Repeat([]byte{0, 3, 11, 4, 12, 11, 5, 255}, 20))
	f.Add(bytes.Repeat([]byte{3, 3, 3, 0, 11, 11, 11, 11, 11}, 20))
	f.Fuzz(func(t *testing.T, data []byte) {
		text := denseText(data)
		checkStr(t, text)
		checkScan(t, append(append([]byte(`{"a":`), text...), `,"b":[1]}`...))
	})
}

// The assembly stops wherever the text needs Go, and its blocks start
// 64 bytes apart where Go's start a byte back after a pending escape:
// every byte after a backslash, at every place around blocks' ends,
// and random dense text, read as the plain reading reads them.
func TestDenseMatchesPlain(t *testing.T) {
	t.Parallel()
	for c := range 256 {
		for at := 0; at <= 140; at++ {
			for _, lead := range []string{`\n`, `\\`, `\\\"`} {
				checkStr(t, []byte(`"`+lead+strings.Repeat("x", at)+`\`+string([]byte{byte(c)})+"0e9A"+strings.Repeat(`y\t`, 30)+`"`))
			}
		}
	}
	rng := uint64(7)
	for range 20000 {
		data := make([]byte, 10+rng>>40%200)
		for k := range data {
			rng = rng*6364136223846793005 + 1442695040888963407
			data[k] = byte(rng >> 56)
			if data[k] >= 240 {
				data[k] = 3 // few long runs: keep the text dense
			}
		}
		checkStr(t, denseText(data))
	}
}

// Scan notes every encrypted_content value, at any depth, and nothing
// else: what unbind looks at instead of searching the body again.
func TestScanBodyNotesBlobs(t *testing.T) {
	t.Parallel()
	body := []byte(`{"include":["reasoning.encrypted_content"],"input":[{"type":"reasoning","encrypted_content":"gAAA1"},` +
		`{"type":"message","content":[{"encrypted_content":"gAAA2"}],"text":"\"encrypted_content\": no"},{"encrypted_content":null}]}`)
	var s Scanned
	if !Scan(body, &s) {
		t.Fatal("not JSON")
	}
	var got []string
	for _, b := range s.Blobs {
		got = append(got, string(body[b.Start:b.End]))
	}
	if want := []string{`"gAAA1"`, `"gAAA2"`, `null`}; !slices.Equal(got, want) {
		t.Errorf("blobs %q, want %q", got, want)
	}
	if Scan([]byte(`{"input":[{"type":"message","content":"hi"}]}`), &s); len(s.Blobs) != 0 {
		t.Errorf("a body without blobs kept %d of the last one's", len(s.Blobs))
	}
}

// BenchmarkScanBody is the one read of a long session's body: 2 MiB of
// plain text, of prose (a newline escape every 200 bytes, no quote), 2 MiB of history as Codex sends it (code, with a quote
// or newline escape every 30 bytes or so, in many small items), and the
// escape-heavy shapes of make bench-load (issue 45): a pasted file, an
// escape every 20 bytes or so, in a Responses and a Chat Completions
// body, and Codex's history with its tool output, one every 10–20.
func BenchmarkScanBody(b *testing.B) {
	const shapeSize = 2 << 20 // as proxy's stage benchmarks
	item := `{"type":"message","role":"assistant","content":[{"type":"output_text","text":"func main() {\n\tfmt.Println(\"hello\")\n}\n\u00e9 done"}]},`
	for name, body := range map[string]string{
		"text":          `{"model":"gpt-5","input":[{"role":"user","content":"` + strings.Repeat("history ", 1<<18) + `"}],"stream":true}`,
		"history":       `{"model":"gpt-5","input":[` + strings.Repeat(item, (2<<20)/len(item)) + `{}],"stream":true}`,
		"prose":         `{"model":"gpt-5","input":[{"role":"user","content":"` + strings.Repeat(strings.Repeat("history ", 25)+`\n`, 1<<18/25) + `"}],"stream":true}`,
		"pasted-file":   string(upstreamtest.PastedFileResponses(shapeSize, false)),
		"pasted-chat":   string(upstreamtest.PastedFileChat(shapeSize, false)),
		"codex-history": string(upstreamtest.CodexHistory(shapeSize, func() string { return "gAAAAABo-blob" + strings.Repeat("x", 700) })),
	} {
		b.Run(name, func(b *testing.B) {
			body := []byte(body)
			b.SetBytes(int64(len(body)))
			var s Scanned
			for b.Loop() {
				if !Scan(body, &s) {
					b.Fatal("invalid")
				}
			}
		})
	}
}

// Long strings are read in chunks: quotes, escapes and escapes that take
// a quote, right at and around a chunk's end, scan as encoding/json says.
func TestScanLongStringsAcrossChunks(t *testing.T) {
	t.Parallel()
	for _, piece := range []string{`\"`, `\\`, `\u00e9`, `\n`, `"`, `\`, `\u00`, `\\\"`} {
		for at := strChunk - 8; at <= strChunk+8; at++ {
			for _, tail := range []string{`"`, `"}`, ``, `\"`} {
				s := `{"a":"` + strings.Repeat("x", at) + piece + strings.Repeat("y", 40) + tail
				checkScan(t, []byte(s))
			}
		}
	}
}

// Text dense with escapes is read 64 bytes at a time from the first
// escape: runs of backslashes of every length, ending anywhere around a
// block's end, before a quote, a letter or a \u escape, scan as
// encoding/json says.
func TestScanEscapesAcrossBlocks(t *testing.T) {
	t.Parallel()
	for _, lead := range []string{``, `\n`, `\\`, `\"x`} {
		for at := 0; at <= 140; at++ {
			for run := 1; run <= 5; run++ {
				for _, next := range []string{`"`, `n`, `u00e9`, `u00"`, `x`, `/`} {
					s := `{"a":"` + lead + strings.Repeat("y", at) + strings.Repeat(`\`, run) + next + strings.Repeat(`z\t`, 30) + `","b":1}`
					checkScan(t, []byte(s))
				}
			}
		}
	}
}

// marks, in assembly where there is some, marks what marksGeneric marks,
// and escaped finds what a byte-at-a-time reading finds.
func TestMarksAndEscaped(t *testing.T) {
	t.Parallel()
	alphabet := []byte{'"', '\\', 'a', 0x80 | '"', 0x80 | '\\', 0, 0xff, '"' + 1, '\\' - 1}
	rng := uint64(1)
	for range 20000 {
		var blk [64]byte
		for k := range blk {
			rng = rng*6364136223846793005 + 1442695040888963407
			blk[k] = alphabet[rng>>33%uint64(len(alphabet))]
		}
		q, bs := marks(&blk)
		if gq, gbs := marksGeneric(&blk); q != gq || bs != gbs {
			t.Fatalf("marks(%q) = %x %x, marksGeneric %x %x", blk, q, bs, gq, gbs)
		}
		var wq, wbs, wesc, wpending uint64
		escaping := false
		for k, c := range blk {
			switch {
			case escaping:
				escaping = false
				if c != '\\' {
					wesc |= 1 << k
				}
			case c == '\\':
				escaping = true
			}
			if c == '"' {
				wq |= 1 << k
			}
			if c == '\\' {
				wbs |= 1 << k
			}
		}
		if escaping {
			wpending = 1
		}
		if q != wq || bs != wbs {
			t.Fatalf("marks(%q) = %x %x, want %x %x", blk, q, bs, wq, wbs)
		}
		if esc, pending := escaped(bs); esc != wesc || pending != wpending {
			t.Fatalf("escaped(%q) = %x %d, want %x %d", blk, esc, pending, wesc, wpending)
		}
	}
}

// A Scanned used again says what the latest body is: an array after an
// object is not an object.
func TestScanForgetsTheLastBody(t *testing.T) {
	var s Scanned
	if !Scan([]byte(`{"a":1}`), &s) || !s.Object || len(s.Members) != 1 {
		t.Fatalf("object: %+v", s)
	}
	if !Scan([]byte(`[1,2]`), &s) || s.Object || len(s.Members) != 0 {
		t.Fatalf("array after an object: object %v, %d members", s.Object, len(s.Members))
	}
}
