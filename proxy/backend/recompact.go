package backend

import (
	"sync"

	"github.com/tidwall/gjson"

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

// compactions remembers the requests behind the compactions rotor
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

// Keep remembers src as the request behind the compaction blob.
func (c *Compactions) Keep(blob string, src CompactSource) {
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
		c.Keep(item.Get("encrypted_content").Str, src)
	}
}

// Source is the request behind the compaction blob, if rotor keeps it.
func (c *Compactions) Source(blob string) (CompactSource, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	src, ok := c.src[mintKeyOf(blob)]
	return src, ok
}

// Redone is the compaction item made again from blob for account, if it
// was.
func (c *Compactions) Redone(blob, account string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	item, ok := c.redo[redoKey{mintKeyOf(blob), account}]
	return item, ok
}

// KeepRedone remembers item as the compaction made again from blob for
// account.
func (c *Compactions) KeepRedone(blob, account string, item []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.redo == nil || len(c.redo) >= maxRecompacted {
		c.redo = make(map[redoKey][]byte) // bounded: a forgotten one is made again
	}
	c.redo[redoKey{mintKeyOf(blob), account}] = item
}

// MaxRecompactDepth bounds compactions made again to make one again: the
// request behind a compaction may itself carry an older one.
const MaxRecompactDepth = 2

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
