package proxy

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/netproxy"
	"github.com/rotorproxy/rotor/accounts/secrets"
	"github.com/rotorproxy/rotor/proxy/upstream"
)

// An Adapter is everything that differs between account kinds (docs/selection.md
// Upstream adapters): where the kind's upstream is, the headers it needs,
// how a client's body is edited for it, how its answer becomes the
// client's, what it refuses, and whether its credential is renewed. Each
// kind has one, in a file of its own; nothing else in proxy tells kinds
// apart.
type Adapter interface {
	// Refreshes reports whether the kind's credential is an expiring
	// token that rotor renews (true) or a long-lived key (false).
	Refreshes() bool
	// AddCommand names the command(s) that add an account of this kind,
	// quoted as a user types them.
	AddCommand() string
	// ProbeRequest is a's cheapest authenticated upstream request, its
	// models list, with the headers a request through rotor carries and
	// sec only in them; with sec nil, the request without credentials.
	// `rotor verify-flagged` sends it, so a probe passes exactly when a
	// request through rotor would.
	ProbeRequest(ctx context.Context, a *accounts.Account, sec *secrets.Secret) (*http.Request, error)

	// base is the upstream base of an account whose own base_url is
	// accountBase ("" for the kind's configured one).
	base(accountBase string) string
	// appendURL appends to dst where r goes upstream on base, query
	// included.
	appendURL(dst []byte, base string, r *request) []byte
	// setHeaders writes the kind's own headers and credentials. It takes
	// values: the compiler assumes a method called through an interface
	// keeps any pointer it is given, which would move every request's
	// secret to the heap.
	setHeaders(h HeaderSetter, chatgptAccountID string, sec secrets.Secret)
	// body is what the upstream gets for r, and how its answer becomes
	// the client's; an error is the client's fault (400).
	body(r *request) ([]byte, answerForm, error)
	// refuses is the skip reason of an account of this kind for r, ""
	// when it can serve it.
	refuses(r *request) string
	// listsCatalog reports whether the kind's models list is Codex's
	// catalog (docs/codex.md): while an account of such a kind can answer
	// Codex's models request, no other kind is asked it.
	listsCatalog() bool
	// meter is which meter the kind's usage counts in, in /metrics'
	// dollars (docs/cost.md): metrics.MeterCost for what it cost,
	// metrics.MeterValue for what it would have cost at API prices.
	meter() string
	// signsIn reports whether an account of this kind signs in to the
	// ChatGPT backend: its usage can be read there, and its access token
	// is a credential Codex signed in may send (package backend).
	signsIn() bool
}

// HeaderSetter is the part of a request header an adapter writes; both
// fasthttp's and net/http's request headers have it.
type HeaderSetter interface{ Set(key, value string) }

// setBearer sets Authorization to "Bearer " and token. fasthttp's header
// copies the value, so for it the value is put together on the stack:
// an API key fits, and costs no allocation per request; a longer token
// (a ChatGPT access token) spills to the heap, as the concatenation did.
func setBearer(h HeaderSetter, token string) {
	if rh, ok := h.(*fasthttp.RequestHeader); ok {
		var buf [256]byte
		rh.SetBytesV("Authorization", append(append(buf[:0], "Bearer "...), token...))
		return
	}
	h.Set("Authorization", "Bearer "+token)
}

// Adapters holds the adapter of each account kind over one pair of
// upstream bases. It is the one place in proxy that maps a kind to its
// adapter.
type Adapters struct {
	byKind   map[accounts.Kind]Adapter
	envProxy netproxy.Func // for Endpoint; nil: no proxy in the environment
}

// NewAdapters returns the adapters with the kinds' configured upstream
// bases; empty ones default as in Config.
func NewAdapters(chatgptBase, openaiBase string) *Adapters {
	return &Adapters{byKind: map[accounts.Kind]Adapter{
		accounts.KindChatGPT: chatgptAdapter{upstreamBase{cmp.Or(chatgptBase, DefaultChatGPTBase)}},
		accounts.KindAPIKey:  apiKeyAdapter{upstreamBase{cmp.Or(openaiBase, DefaultOpenAIBase)}},
	}}
}

// For is the adapter of kind k. The store only holds known kinds; an
// unknown one gets the API-key adapter, which sends what the client sent.
func (as *Adapters) For(k accounts.Kind) Adapter {
	if ad, ok := as.byKind[k]; ok {
		return ad
	}
	return as.byKind[accounts.KindAPIKey]
}

// Endpoint is the upstream endpoint (scheme://host:port, and the proxy in
// between when there is one) account a is served from: where a connect
// failure puts it out of reach (docs/selection.md, docs/service.md).
// rotation.Selector.SetEndpointOf takes it.
func (as *Adapters) Endpoint(a *accounts.Account) string {
	return upstream.WayOf(as.For(a.Kind).base(a.BaseURL), a.ProxyURL, as.envProxy).Endpoint
}

// WithEnvProxy returns adapters like as whose Endpoint knows the
// environment's proxy rule env, as a Server with Config.EnvProxy env
// records it.
func (as *Adapters) WithEnvProxy(env netproxy.Func) *Adapters {
	c := *as
	c.envProxy = env
	return &c
}

// upstreamBase is a kind's configured upstream base, which an account's own
// base_url overrides; adapters embed it.
type upstreamBase struct{ configBase string }

func (u upstreamBase) base(accountBase string) string { return cmp.Or(accountBase, u.configBase) }

// upstreamURL joins base, path and the query a request carries on.
func upstreamURL(base, path string, query []byte) string {
	return string(appendUpstreamURL(nil, base, path, query))
}

// appendUpstreamURL is upstreamURL appended to dst.
func appendUpstreamURL(dst []byte, base, path string, query []byte) []byte {
	dst = append(append(dst, strings.TrimRight(base, "/")...), path...)
	if q := bytes.TrimSuffix(query, []byte("&")); len(q) > 0 {
		dst = append(append(dst, '?'), q...)
	}
	return dst
}

// uriOf is where r goes upstream through ad on base, in r's own buffer,
// which the request pool keeps: fasthttp copies it, so an attempt makes
// no string of it.
func (r *request) uriOf(ad Adapter, base string) []byte {
	r.uri = ad.appendURL(r.uri[:0], base, r)
	return r.uri
}

// probeRequest is the models-list probe on url with the headers ad sets.
func probeRequest(ctx context.Context, ad Adapter, url string, a *accounts.Account, sec *secrets.Secret) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if sec != nil {
		ad.setHeaders(req.Header, a.ChatGPTAccountID, *sec)
	}
	req.Header.Set("Accept", "application/json")
	return req, nil
}

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
