package upstreamtest

import (
	"crypto/sha256"
	"encoding/json"
)

// The prompt cache of Behavior.PromptCache: per account, the digests of
// every run of leading turns it was sent, so a request's cached tokens
// are those of the longest run the same account saw before, as the
// backend's cache, which lives with the account, would serve them.

// maxCachedRuns bounds one account's runs; past it the account's cache
// starts empty again, as an evicted cache does.
const maxCachedRuns = 4096

// promptCache is the runs each account was sent.
type promptCache map[string]map[[sha256.Size]byte]bool

// caching returns the eventEdit that reports the usage of b's prompt
// cache for req sent by owner, nil without PromptCache. The request's
// runs are remembered at once, so the next request finds them.
func (s *Server) caching(b Behavior, owner string, req *requestBody) eventEdit {
	if !b.PromptCache {
		return nil
	}
	var body struct {
		Input    json.RawMessage   `json:"input"`
		Messages []json.RawMessage `json:"messages"`
	}
	_ = json.Unmarshal(req.raw, &body)
	turns := body.Messages
	if len(turns) == 0 {
		_ = json.Unmarshal(body.Input, &turns)
	}
	input, cached := s.cacheRuns(owner, turns)
	return func(typ string, data []byte) []byte {
		switch typ {
		case "response.completed", "response.incomplete":
			return setUsage(data, "response", "input_tokens", "input_tokens_details", input, cached)
		case "":
			return setUsage(data, "", "prompt_tokens", "prompt_tokens_details", input, cached)
		}
		return data
	}
}

// cacheRuns counts turns' tokens, and those of the longest leading run
// owner was sent before; then remembers every leading run of turns.
func (s *Server) cacheRuns(owner string, turns []json.RawMessage) (input, cached int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cache == nil {
		s.cache = promptCache{}
	}
	seen := s.cache[owner]
	if seen == nil || len(seen)+len(turns) > maxCachedRuns {
		seen = make(map[[sha256.Size]byte]bool)
		s.cache[owner] = seen
	}
	h := sha256.New()
	for _, t := range turns {
		h.Write(t)
		h.Write([]byte{0})
		input += (len(t) + 3) / 4
		var run [sha256.Size]byte
		h.Sum(run[:0])
		if seen[run] {
			cached = input
		}
		seen[run] = true
	}
	return input, cached
}

// setUsage sets the input and cached tokens of the usage object under
// parent ("" for the top level) of an event that carries one, and its
// total; other events, and every other member, are left as they were.
func setUsage(data []byte, parent, inputKey, detailsKey string, input, cached int) []byte {
	var ev map[string]json.RawMessage
	if json.Unmarshal(data, &ev) != nil {
		return data
	}
	holder := ev
	if parent != "" {
		if json.Unmarshal(ev[parent], &holder) != nil {
			return data
		}
	}
	var usage map[string]any
	if json.Unmarshal(holder["usage"], &usage) != nil || usage == nil {
		return data
	}
	usage[inputKey] = input
	usage[detailsKey] = map[string]int{"cached_tokens": cached}
	if out, ok := usage["output_tokens"].(float64); ok {
		usage["total_tokens"] = input + int(out)
	} else if out, ok := usage["completion_tokens"].(float64); ok {
		usage["total_tokens"] = input + int(out)
	}
	holder["usage"], _ = json.Marshal(usage)
	if parent != "" {
		ev[parent], _ = json.Marshal(holder)
	}
	out, err := json.Marshal(ev)
	if err != nil {
		return data
	}
	return out
}

// chain is the eventEdit that applies each of edits in turn (nil ones
// skipped); nil when there are none.
func chain(edits ...eventEdit) eventEdit {
	var live []eventEdit
	for _, e := range edits {
		if e != nil {
			live = append(live, e)
		}
	}
	switch len(live) {
	case 0:
		return nil
	case 1:
		return live[0]
	}
	return func(typ string, data []byte) []byte {
		for _, e := range live {
			data = e(typ, data)
		}
		return data
	}
}
