package proxy

import (
	"encoding/json"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/rotorproxy/rotor/accounts"
)

// Model aliases (docs/aliases.md): a request for an alias's From goes out as its
// To on accounts of the alias's kind. They are applied per attempt, as
// the last edit of the body, because failover may move a request to an
// account of another kind, where the alias may not apply. The client's
// request keeps the model it asked for: its usage record and log line
// name that one.

// aliasOpts finds "model" with one lookup and splices the new value into
// a copy, leaving every other byte of the body as it was.
var aliasOpts = &sjson.Options{Optimistic: true}

// aliased is body with its model renamed for an account of kind k when an
// alias says so, else body itself. Without aliases it costs one atomic
// load. The copy is made per attempt: body may be the request's own or an
// adapter's cached edit, which other attempts reuse as they are.
func (s *Server) aliased(r *request, k accounts.Kind, body []byte) []byte {
	to, ok := s.deps.Aliases.Table().To(r.model, k)
	if !ok {
		return body
	}
	out, err := sjson.SetBytesOptions(body, "model", to, aliasOpts)
	if err != nil {
		return body // not an object with a model: nothing an alias can name
	}
	return out
}

// listsAliases makes r's models list from an account of kind k show the
// aliases that apply there: it notes their names in r and returns the
// answer form that adds them (formModelList), or form itself when there
// is nothing to add. Codex CLI's catalog passes as it is: its entries
// describe real models, which an alias's name is not.
func (s *Server) listsAliases(r *request, k accounts.Kind, form answerForm) answerForm {
	r.listAliases = nil
	if r.op != opModels || r.codexClient {
		return form
	}
	if r.listAliases = s.deps.Aliases.Table().Names(k); len(r.listAliases) == 0 {
		return form
	}
	return formModelList
}

// withModels appends to an OpenAI model list an entry for each name it
// does not hold yet, after the list's own entries.
func withModels(list []byte, names []string, now time.Time) []byte {
	if len(names) == 0 {
		return list
	}
	have := map[string]bool{}
	for _, id := range gjson.GetBytes(list, "data.#.id").Array() {
		have[id.Str] = true
	}
	for _, name := range names {
		if have[name] {
			continue
		}
		id, _ := json.Marshal(name) // a string always encodes
		if out, err := sjson.SetRawBytes(list, "data.-1", appendModel(nil, id, now)); err == nil {
			list = out
		}
	}
	return list
}
