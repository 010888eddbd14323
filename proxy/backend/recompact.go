package backend

import (
	"bytes"
	"sync"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/proxy/jsonscan"
	"github.com/rotorproxy/rotor/proxy/sse"
)

// A compaction another account made is carried over by making it again
// (docs/codex.md): rotor keeps the request of each compaction it relayed
// (compactions), and when the conversation moves sends that request to the
// new account and puts the new account's compaction item in place of the
// old one (the redo Unbind is given). Each is made once per account: the
// conversation's later requests carry the same old item, and get the same
// new one. Codex asks for a compaction two ways: POST /responses/compact,
// answered with one JSON object, and (remote compaction v2) an ordinary
// streamed Responses request whose input ends in a compaction_trigger
// item, answered with a stream of one compaction item.

// Bounds of what compactions keeps: the requests behind compactions up to
// maxCompactionSources bytes in all (the oldest forgotten first; one
// larger than that is not kept), and maxRecompacted items made again.
const (
	maxCompactionSources = 32 << 20
	maxRecompacted       = 256
)

// CompactSource is the request behind a compaction: POST
// /responses/compact (Compact) or a streamed Responses request (v2), and
// its body, whole.
type CompactSource struct {
	Compact bool
	Body    []byte
}

// Compactions remembers the requests behind the compactions rotor
// relayed, and the items made again from them. It is safe for concurrent
// use; the zero value is empty. Like Mints, it is kept per serve.
type Compactions struct {
	mu    sync.Mutex
	src   map[mintKey]CompactSource // a compaction's blob → the request behind it
	order []mintKey                 // src's keys, oldest first
	size  int
	redo  map[redoKey][]byte // a compaction made again for an account
}

type redoKey struct {
	blob    mintKey
	account string
}

// keep remembers src as the request behind the compaction blob.
func (c *Compactions) keep(blob string, src CompactSource) {
	if len(src.Body) > maxCompactionSources || blob == "" {
		return
	}
	k := mintKeyOf(blob)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.src == nil {
		c.src = make(map[mintKey]CompactSource)
	}
	if _, ok := c.src[k]; ok {
		return
	}
	for c.size+len(src.Body) > maxCompactionSources && len(c.order) > 0 {
		c.size -= len(c.src[c.order[0]].Body)
		delete(c.src, c.order[0])
		c.order = c.order[1:]
	}
	c.src[k], c.size = src, c.size+len(src.Body)
	c.order = append(c.order, k)
}

// KeepItem remembers src behind item, when item is a compaction.
func (c *Compactions) KeepItem(item gjson.Result, src CompactSource) {
	if compactionTypes[item.Get("type").Str] {
		c.keep(item.Get("encrypted_content").Str, src)
	}
}

// source is the request behind the compaction blob, if rotor keeps it.
func (c *Compactions) source(blob string) (CompactSource, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	src, ok := c.src[mintKeyOf(blob)]
	return src, ok
}

// redone is the compaction item made again from blob for account, if it
// was.
func (c *Compactions) redone(blob, account string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	item, ok := c.redo[redoKey{mintKeyOf(blob), account}]
	return item, ok
}

func (c *Compactions) keepRedone(blob, account string, item []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.redo == nil || len(c.redo) >= maxRecompacted {
		c.redo = make(map[redoKey][]byte) // bounded: a forgotten one is made again
	}
	c.redo[redoKey{mintKeyOf(blob), account}] = item
}

// CompactionAsked reports whether the input array in ends in a
// compaction_trigger item: only its tail is looked at, not a history of
// megabytes.
func CompactionAsked(in []byte) bool {
	return bytes.Contains(in[max(0, len(in)-128):], []byte("compaction_trigger"))
}

// SourceOf is the request behind the compaction a request asks for, body
// whole as it would go over HTTP: POST /responses/compact (compact), or a
// Responses request whose input ends in a compaction_trigger item; ok is
// false for any other request.
func SourceOf(compact bool, body []byte) (src CompactSource, ok bool) {
	if compact {
		return CompactSource{true, bytes.Clone(body)}, true
	}
	input := jsonscan.Get(body, "input").Array()
	if len(input) == 0 || input[len(input)-1].Get("type").Str != "compaction_trigger" {
		return src, false
	}
	return CompactSource{false, bytes.Clone(body)}, true
}

// maxRecompactDepth bounds compactions made again to make one again: the
// request behind a compaction may itself carry an older one.
const maxRecompactDepth = 2

// Redo makes the compaction whose blob another account minted again on
// account, from the request rotor kept behind it, and returns the new
// compaction item; nil when rotor kept no such request or the account
// could not make it. send sends that request as account and reads its
// answer's compaction item (CompactionItem); depth is how deep in such
// remakes the request asking is. Each is made once per account.
func (c *Compactions) Redo(m *Mints, account, blob string, depth int, send func(src CompactSource) gjson.Result) []byte {
	if item, ok := c.redone(blob, account); ok {
		return item
	}
	src, ok := c.source(blob)
	if !ok || depth >= maxRecompactDepth {
		return nil
	}
	item := send(src)
	if item.Raw == "" {
		return nil
	}
	m.LearnItem(item, account)
	c.keepRedone(blob, account, []byte(item.Raw))
	return []byte(item.Raw)
}

// CompactionItem reads the compaction item of a compaction's answer body:
// the JSON object's output, or a stream's (sent) output_item.done events.
func CompactionItem(body []byte, stream bool) gjson.Result {
	var item gjson.Result
	find := func(it gjson.Result) {
		if item.Raw == "" && compactionTypes[it.Get("type").Str] && it.Get("encrypted_content").Str != "" {
			item = it
		}
	}
	if !stream {
		gjson.GetBytes(body, "output").ForEach(func(_, it gjson.Result) bool { find(it); return true })
		return item
	}
	var sc sse.Scanner
	sc.OnEvent = func(e sse.Event) {
		if e.Type == "response.output_item.done" {
			find(gjson.Parse(e.Field("item").Raw)) // a copy: the scanner reuses e.Data
		}
	}
	sc.Feed(body)
	return item
}
