package proxy

import (
	"sync"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/proxy/sse"
)

// A compaction another account made is carried over by making it again
// (docs/codex.md): rotor keeps the request of each compaction it relayed
// (compactions), and when the conversation moves sends that request to the
// new account and puts the new account's compaction item in place of the
// old one (Server.recompact). Each is made once per account: the
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

// compactSource is the request behind a compaction: its op (opCompact,
// or opResponses for v2) and its body, whole.
type compactSource struct {
	op   op
	body []byte
}

// compactions remembers the requests behind the compactions rotor
// relayed, and the items made again from them. It is safe for concurrent
// use and, like mints, kept per serve.
type compactions struct {
	mu    sync.Mutex
	src   map[mintKey]compactSource // a compaction's blob → the request behind it
	order []mintKey                 // src's keys, oldest first
	size  int
	redo  map[redoKey][]byte // a compaction made again for an account
}

type redoKey struct {
	blob    mintKey
	account string
}

// keep remembers src as the request behind the compaction blob.
func (c *compactions) keep(blob string, src compactSource) {
	if len(src.body) > maxCompactionSources || blob == "" {
		return
	}
	k := mintKeyOf(blob)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.src == nil {
		c.src = make(map[mintKey]compactSource)
	}
	if _, ok := c.src[k]; ok {
		return
	}
	for c.size+len(src.body) > maxCompactionSources && len(c.order) > 0 {
		c.size -= len(c.src[c.order[0]].body)
		delete(c.src, c.order[0])
		c.order = c.order[1:]
	}
	c.src[k], c.size = src, c.size+len(src.body)
	c.order = append(c.order, k)
}

// keepItem remembers src behind item, when item is a compaction.
func (c *compactions) keepItem(item gjson.Result, src compactSource) {
	if compactionTypes[item.Get("type").Str] {
		c.keep(item.Get("encrypted_content").Str, src)
	}
}

// source is the request behind the compaction blob, if rotor keeps it.
func (c *compactions) source(blob string) (compactSource, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	src, ok := c.src[mintKeyOf(blob)]
	return src, ok
}

// redone is the compaction item made again from blob for account, if it
// was.
func (c *compactions) redone(blob, account string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	item, ok := c.redo[redoKey{mintKeyOf(blob), account}]
	return item, ok
}

func (c *compactions) keepRedone(blob, account string, item []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.redo == nil || len(c.redo) >= maxRecompacted {
		c.redo = make(map[redoKey][]byte) // bounded: a forgotten one is made again
	}
	c.redo[redoKey{mintKeyOf(blob), account}] = item
}

// maxRecompactDepth bounds compactions made again to make one again: the
// request behind a compaction may itself carry an older one.
const maxRecompactDepth = 2

// compactionItem reads the compaction item of a compaction's answer: the
// JSON object's output, or a stream's output_item.done events.
func compactionItem(ans *answer) gjson.Result {
	body := append(ans.pending[:len(ans.pending):len(ans.pending)], readBodyUpTo(ans.resp, maxJSONUsage)...)
	var item gjson.Result
	find := func(it gjson.Result) {
		if item.Raw == "" && compactionTypes[it.Get("type").Str] && it.Get("encrypted_content").Str != "" {
			item = it
		}
	}
	if !sseAnswer(ans.resp) {
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
