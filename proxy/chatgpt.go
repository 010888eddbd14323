package proxy

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/secrets"
	"github.com/rotorproxy/rotor/proxy/chat"
	"github.com/rotorproxy/rotor/proxy/jsonscan"
	"github.com/rotorproxy/rotor/proxy/metrics"
)

// chatgptAdapter serves ChatGPT accounts through the Codex backend (docs/selection.md, docs/accounts.md): it only streams, does not store, rejects a few parameters
// generic clients send, and speaks Responses only, so Chat Completions are
// translated (docs/clients.md) and a non-streaming client's answer is assembled.
type chatgptAdapter struct{ upstreamBase }

// chatgptPaths are the Codex backend's paths, by op.
var chatgptPaths = [opCount]string{opResponses: "/codex/responses", opCompact: "/codex/responses/compact",
	opChat: "/codex/responses", opModels: "/codex/models"}

// codexClientVersion is the Codex CLI version rotor names when it lists a
// ChatGPT account's models for a client that is not Codex.
const codexClientVersion = "0.169.0"

func (chatgptAdapter) Refreshes() bool    { return true }
func (chatgptAdapter) AddCommand() string { return `"rotor login" or "rotor import codex"` }
func (chatgptAdapter) meter() string      { return metrics.MeterValue }
func (chatgptAdapter) listsCatalog() bool { return true }

func (ad chatgptAdapter) ProbeRequest(ctx context.Context, a *accounts.Account, sec *secrets.Secret) (*http.Request, error) {
	return probeRequest(ctx, ad, upstreamURL(ad.base(a.BaseURL), chatgptPaths[opModels], nil), a, sec)
}

func (chatgptAdapter) appendURL(dst []byte, base string, r *request) []byte {
	q := r.query
	if r.op == opModels && !r.codexClient {
		// The Codex backend lists models for a Codex version; a generic
		// client names none.
		q = append([]byte("client_version="+codexClientVersion+"&"), q...)
	}
	return appendUpstreamURL(dst, base, chatgptPaths[r.op], q)
}

func (chatgptAdapter) setHeaders(h HeaderSetter, chatgptAccountID string, sec secrets.Secret) {
	setBearer(h, sec.AccessToken)
	if chatgptAccountID != "" {
		h.Set("chatgpt-account-id", chatgptAccountID)
	}
	h.Set("OpenAI-Beta", "responses=experimental")
	h.Set("originator", "codex_cli_rs")
}

// refuses keeps ChatGPT accounts away from a Chat Completions request that
// asks for what only an API-key account can serve.
func (chatgptAdapter) refuses(r *request) string {
	if r.chat.Unsupported != "" {
		return skipUnsupported
	}
	return ""
}

// skipUnsupported is the skip reason of a ChatGPT account for a Chat
// Completions request only an API-key account can serve.
const skipUnsupported = "unsupported-parameter"

// signsIn: a ChatGPT account is signed in to the backend.
func (chatgptAdapter) signsIn() bool { return true }

// body adapts r for the Codex backend once per request, whichever ChatGPT
// account it goes to: Responses bodies for generic clients (chatgptBody),
// Chat Completions translated to Responses.
func (ad chatgptAdapter) body(r *request) ([]byte, answerForm, error) {
	switch {
	case r.op == opModels:
		if r.codexClient {
			return nil, formAsIs, nil
		}
		return nil, formModelList, nil
	case r.encoded:
		return r.body, formAsIs, nil
	}
	if e := &r.edited; !e.made {
		e.body, e.answerForm, e.err = ad.edit(r)
		e.made = true
	}
	return r.edited.body, r.edited.answerForm, r.edited.err
}

func (chatgptAdapter) edit(r *request) ([]byte, answerForm, error) {
	switch {
	case r.op == opResponses && lite(r):
		// Codex's own request for a Lite model: nothing of docs/accounts.md's edit
		// applies to it, and the backend reads it as it is.
		return r.body, formAsIs, nil
	case r.op == opResponses:
		body, asm, err := chatgptBody(r.body, &r.scan)
		if asm {
			return body, formResponse, err
		}
		return body, formAsIs, err
	case r.op == opChat:
		body, err := chat.ToResponses(r.body)
		if !r.chat.Stream {
			return body, formChatCompletion, err
		}
		return body, formChatStream, err
	}
	return r.body, formAsIs, nil
}

// liteHeader says a request is Responses Lite (docs/codex.md); on a socket
// the frame's client_metadata carries it instead (metadataHeaders).
const liteHeader = "X-OpenAI-Internal-Codex-Responses-Lite"

// lite reports whether r is a Responses Lite request: marked so, or
// shaped so (an additional_tools item first, reasoning over all turns).
func lite(r *request) bool {
	if bytes.EqualFold(r.header.Peek(liteHeader), []byte("true")) {
		return true
	}
	in := r.inputArray()
	if head := in[:min(len(in), 256)]; bytes.Contains(head, []byte("additional_tools")) &&
		jsonscan.Get(in, "0.type").Str == "additional_tools" {
		return true
	}
	return jsonscan.Get(r.member("reasoning"), "context").Str == "all_turns"
}

// DroppedForChatGPT are the request parameters the ChatGPT Codex backend
// rejects ("Unsupported parameter: …"); rotor drops them when a generic
// client's request goes to a ChatGPT account (docs/accounts.md). The backend manages
// output budgets and sampling itself.
var DroppedForChatGPT = []string{
	"max_output_tokens", "max_completion_tokens", "max_tokens",
	"temperature", "top_p", "frequency_penalty", "presence_penalty",
}

// chatgptBody adapts a Responses request body for the Codex backend, which
// only streams and does not store: it forces "stream":true and
// "store":false, supplies "instructions":"" when missing and drops the
// parameters the backend rejects. assemble reports that the client did not
// ask for a stream, so the proxy must answer with one Response object. A
// body that needs nothing (Codex CLI's) is returned as is, byte for byte;
// any other is edited in one pass over its top-level members, keeping
// every byte of the members it does not touch as the client sent them.
func chatgptBody(body []byte, s *jsonscan.Scanned) (out []byte, assemble bool, err error) {
	if !s.Object {
		return nil, false, errNotObject
	}
	var stream, store, instr bool
	changed := false
	var buf [jsonscan.TopMembers]edit
	edits := editsFor(&buf, len(s.Members))
	for i, m := range s.Members {
		switch k, v := m.Key(body), body[m.ValStart:m.End]; {
		case k == "stream":
			stream = string(v) == "true"
			if !stream {
				edits[i] = setTrue
			}
		case k == "store":
			store = true
			if string(v) != "false" {
				edits[i] = setFalse
			}
		case k == "instructions":
			// "instructions":null is as missing: the backend wants a string.
			instr = true
			if string(v) == "null" {
				edits[i] = setEmptyString
			}
		case slices.Contains(DroppedForChatGPT, k):
			edits[i] = drop
		}
		changed = changed || edits[i] != keep
	}
	var add []byte
	if !stream && !slices.Contains(edits, setTrue) {
		add = append(add, `"stream":true,`...)
	}
	if !store {
		add = append(add, `"store":false,`...)
	}
	if !instr {
		add = append(add, `"instructions":"",`...)
	}
	if !changed && len(add) == 0 {
		return body, false, nil
	}
	return splice(body, s.Members, edits, bytes.TrimSuffix(add, []byte(","))), !stream, nil
}

var errNotObject = errors.New("request body is not a JSON object")

// edit is a change the ChatGPT rewrite (or a frame's, rewriteFrame)
// makes to a member. It is a small number rather than the new bytes
// themselves: every request carries a table of members, and the few
// values the rewrite writes are constants.
type edit uint8

const (
	keep edit = iota
	drop
	setTrue
	setFalse
	setEmptyString
)

// editValues are the values the set edits write.
var editValues = [...]string{setTrue: "true", setFalse: "false", setEmptyString: `""`}

// editsFor is a table of n edits, one for each member of a scan by its
// index, all keep: buf, a zero array on the caller's stack, when the
// members are as few as a scan keeps without allocating.
func editsFor(buf *[jsonscan.TopMembers]edit, n int) []edit {
	if n > len(buf) {
		return make([]edit, n)
	}
	return buf[:n]
}

// splice writes the object at obj in body with its members ms edited as
// edits says (one for each, in order) and add (encoded members,
// comma-separated) appended. Between two members that stay neighbours,
// and around the object, the client's bytes are kept.
func splice(body []byte, ms []jsonscan.Member, edits []edit, add []byte) []byte {
	obj := bytes.IndexByte(body, '{')
	out := make([]byte, 0, len(body)+len(add)+16)
	out = append(out, '{')
	last, wrote := obj+1, false // last: end of the last member written, or the object's start
	adjacent := true            // nothing dropped since last
	for i, m := range ms {
		if edits[i] == drop {
			adjacent = false
			continue
		}
		switch {
		case adjacent:
			out = append(out, body[last:m.Start]...) // the client's separator, comma and all
		case wrote:
			out = append(out, ',')
		}
		out = append(out, body[m.Start:m.ValStart]...)
		if edits[i] != keep {
			out = append(out, editValues[edits[i]]...)
		} else {
			out = append(out, body[m.ValStart:m.End]...)
		}
		last, wrote, adjacent = m.End, true, true
	}
	if len(add) > 0 {
		if wrote {
			out = append(out, ',')
		}
		out = append(out, add...)
	}
	end := bytes.LastIndexByte(body, '}')
	if adjacent && end >= last {
		return append(out, body[last:end+1]...) // trailing space, then '}'
	}
	return append(out, '}')
}

// modelList turns the Codex backend's model catalog
// ({"models":[{"slug":...},...]}) into OpenAI's list shape. An answer
// that is already a list passes as it is.
func modelList(catalog []byte, now time.Time) []byte {
	if gjson.GetBytes(catalog, "object").Str == "list" {
		return catalog
	}
	b := append(make([]byte, 0, 256), `{"object":"list","data":[`...)
	n := 0
	for _, m := range gjson.GetBytes(catalog, "models").Array() {
		id := m.Get("slug")
		if id.Type != gjson.String {
			id = m.Get("id")
		}
		if id.Type != gjson.String || id.Str == "" {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = appendModel(b, []byte(id.Raw), now)
	}
	return append(b, "]}"...)
}

// appendModel appends one entry of an OpenAI model list, for the model
// whose id is the JSON string idRaw.
func appendModel(b, idRaw []byte, now time.Time) []byte {
	b = append(b, `{"id":`...)
	b = append(b, idRaw...)
	b = append(b, `,"object":"model","created":`...)
	b = strconv.AppendInt(b, now.Unix(), 10)
	return append(b, `,"owned_by":"openai"}`...)
}
