package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/backend"
	"github.com/rotorproxy/rotor/proxy/headerrules"
	"github.com/rotorproxy/rotor/proxy/jsonscan"
	"github.com/rotorproxy/rotor/proxy/upstream"
	"github.com/rotorproxy/rotor/proxy/websocket"
	"github.com/rotorproxy/rotor/rotation"
)

// The request path's side of the ChatGPT backend's rules (package
// backend): what of a request, an answer and the pool each rule needs,
// and what it gives back, set where the request path keeps it.

// unbind is body as account may send it (backend.Mints.Unbind): what
// another account minted taken out, or made again by redo. r.contextCut
// says whether a compaction had to go, for this attempt's account.
func (s *Server) unbind(r *request, account string, body []byte, redo func(blob string) []byte) []byte {
	if r.encoded || r.socket == nil && len(r.scan.Blobs) == 0 {
		// Unbind's first answer, without making its view of r: a body
		// over HTTP where the scan noted no blob (an API-key pool's, a
		// generic client's) costs one inlined check per attempt.
		r.contextCut = false
		return body
	}
	src := backend.Sent{Body: r.body, Scan: &r.scan, Socket: r.socket != nil, Encoded: r.encoded, All: r.unbindAll}
	body, r.contextCut = s.mints.Unbind(src, account, body, redo)
	return body
}

// disown marks every blob of r that rotor knows no owner of as unreadable
// by any account: account has just refused one of them.
func (s *Server) disown(r *request) {
	if r.encoded {
		return
	}
	var parts [][]byte
	if r.prior != nil {
		parts = r.prior.Parts()
	}
	s.mints.Disown(r.body, parts)
}

// compactionSource is the request r stands for, when r asks for a
// compaction, whole, as it would go over HTTP; ok is false for any other
// request, and for one whose conversation rotor does not hold whole.
func compactionSource(r *request) (src backend.CompactSource, ok bool) {
	switch {
	case r.encoded:
		return src, false
	case r.op == opCompact:
		return backend.SourceOf(true, r.body)
	case r.op != opResponses || !backend.CompactionAsked(r.inputArray()):
		return src, false
	}
	body := r.body
	if r.socket != nil && !r.httpForm {
		if r.prior == nil && gjson.GetBytes(r.frame, "previous_response_id").Str != "" {
			return src, false // the socket's upstream had the rest
		}
		var sc jsonscan.Scanned
		jsonscan.Scan(r.frame, &sc)
		body = rewriteFrame(r.frame, sc.Members, r.prior.With(r.frameInput), new(fasthttp.RequestHeader))
	}
	return backend.SourceOf(false, body)
}

// recompact makes the compaction whose blob another account minted again
// on the account of ad, a and sec (backend.Compactions.Redo): the request
// rotor kept behind it sent as r's remake, one level deeper.
func (s *Server) recompact(r *request, ad Adapter, a *accounts.Account, sec *secrets.Secret, blob string) []byte {
	return s.compactions.Redo(&s.mints, a.ID, blob, r.recompactDepth, func(src backend.CompactSource) gjson.Result {
		op := opResponses
		if src.Compact {
			op = opCompact
		}
		cr := &request{id: r.id, op: op, header: new(fasthttp.RequestHeader), body: src.Body, start: r.start,
			recompactDepth: r.recompactDepth + 1}
		r.header.CopyTo(cr.header)
		if m := gjson.GetBytes(src.Body, "client_metadata"); m.IsObject() {
			websocket.MetadataHeaders([]byte(m.Raw), cr.header) // a socket's Lite marker, as a header
		}
		jsonscan.Scan(src.Body, &cr.scan)
		ans, f := s.send(cr, ad, a, sec)
		log := s.deps.Log.Info().Str("request_id", r.id).Str("account_id", a.ID)
		if f != nil {
			log.Int("upstream_status", f.status).Msg("could not make the compaction again on the new account")
			return gjson.Result{}
		}
		body := append(ans.pending[:len(ans.pending):len(ans.pending)], upstream.ReadBodyUpTo(ans.resp, maxJSONUsage)...)
		item := backend.CompactionItem(body, sseAnswer(ans.resp))
		releaseHeld(ans.pending)
		fasthttp.ReleaseResponse(ans.resp)
		if item.Raw == "" {
			log.Msg("the new account's compaction has no compaction item")
			return item
		}
		r.recompacted = true
		log.Msg("compaction made again on the new account")
		return item
	})
}

// installation is the installation id the client sent with r, read once
// (backend.Installation).
func (r *request) installation() string {
	if !r.installationRead {
		r.installationRead = true
		var meta []byte
		v := r.header.Peek(backend.InstallationHeader)
		if len(v) == 0 {
			meta = r.member("client_metadata")
		}
		r.installationID = backend.Installation(v, meta)
	}
	return r.installationID
}

// ownIdentity is body with the client's installation id replaced by the
// one account is shown.
func (s *Server) ownIdentity(r *request, account string, body []byte) []byte {
	return s.identities.Own(r.installation(), account, body)
}

// ownIdentityHeaders rewrites the installation id in the headers that
// carry it, as set by set.
func (s *Server) ownIdentityHeaders(r *request, account string, get func(string) []byte, set func(k, v string)) {
	s.identities.OwnHeaders(r.installation(), account, get, set)
}

// answerUsageLimits answers Codex's usage-limits request from the pool.
// It never asks an upstream: /status must answer even when every account
// waits, and the quota every answer carried is already in the runtime state.
func (s *Server) answerUsageLimits(ctx *fasthttp.RequestCtx) {
	u, _ := backend.LimitsOf(s.deps.Selector, s.deps.Clock.Now())
	ctx.SetContentType("application/json")
	ctx.SetBody(u.Body())
}

// showPoolLimits rewrites what the answer ans of the account of ch tells
// of the limits to the pool's (backend.ShowPool). learned says the
// held-back events' own quota is already recorded for the account, so the
// relay need not read it again.
func (s *Server) showPoolLimits(ch *rotation.Choice, ans *answer) (learned bool) {
	held := ans.pending
	pending, rewritten, learned := backend.ShowPool(s.deps.Selector, s.deps.Clock, ch, &ans.resp.Header, held)
	if rewritten {
		ans.pending = pending
		releaseHeld(held)
	}
	return learned
}

// ReadUsage runs the usage reader (backend.Reader) until ctx ends: a pass
// at once, then one every few seconds, each under the home's lock file
// lock (no pass while another serve holds it). sync exchanges state.json
// with the other serves, before a pass and after it.
func (s *Server) ReadUsage(ctx context.Context, lock string, sync func()) {
	s.usageReader(lock).Run(ctx, sync)
}

// usageReader is a usage reader of the pool that takes turns on lock.
func (s *Server) usageReader(lock string) *backend.Reader {
	d := backend.ReaderDeps{Lock: lock, Selector: s.deps.Selector, Clock: s.deps.Clock, Log: s.deps.Log,
		SignsIn: func(a *accounts.Account) bool { return s.adapters.For(a.Kind).signsIn() },
		Get: func(ctx context.Context, a *accounts.Account) ([]byte, int, error) {
			return s.fetchUsage(ctx, a, false)
		}}
	if s.deps.Refresher != nil {
		d.Renew = s.renewIdle
	}
	return backend.NewReader(d)
}

// fetchUsage asks a's backend for its usage (backend.ReaderDeps.Get).
// refreshed says a 401 was already answered with a refresh.
func (s *Server) fetchUsage(ctx context.Context, a *accounts.Account, refreshed bool) ([]byte, int, error) {
	sec, err := s.secrets.get(a.ID, s.runtime().TokensAt(a.ID))
	if err != nil {
		return nil, 0, err
	}
	ad := s.adapters.For(a.Kind)
	base := ad.base(a.BaseURL)
	way := s.endpoints.Way(base, a.ProxyURL)
	rt, err := s.exits.Of(&way, sec.ProxyPassword)
	if err != nil {
		return nil, 0, err
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	backend.UsageRequest(req, base, sec.AccessToken, a.ChatGPTAccountID)
	if err := rt.Client.DoTimeout(req, resp, backend.UsageReadWait); err != nil {
		return nil, 0, err
	}
	status := resp.StatusCode()
	if status == fasthttp.StatusUnauthorized && !refreshed && s.deps.Refresher != nil {
		if _, ok := s.renew(ctx, a, sec, s.deps.Log.Warn().Str("account_id", a.ID)); ok {
			return s.fetchUsage(ctx, a, true)
		}
	}
	return upstream.ReadBodyUpTo(resp, upstream.MaxErrorBody), status, nil
}

// renewIdle refreshes a's tokens, last refreshed at tokensAt, when it
// holds a refresh token, so an idle login does not lapse. The refresh is
// the one requests use: single-flight across processes, written back to a
// linked Codex auth.json.
func (s *Server) renewIdle(ctx context.Context, a *accounts.Account, tokensAt time.Time) bool {
	sec, err := s.secrets.get(a.ID, tokensAt)
	if err != nil || sec.RefreshToken == "" {
		return false
	}
	_, ok := s.renew(ctx, a, sec, s.deps.Log.Warn().Str("account_id", a.ID))
	return ok
}

// Adopter takes over the tokens Codex wrote to an account's linked
// auth.json when they are newer than the store's (oauth.Refresher.Adopt),
// without refreshing anything itself.
type Adopter interface {
	Adopt(a accounts.Account) (secrets.Secret, bool)
}

// signers is the pool as backend.Tokens reads it: one pointer, so handing
// it over boxes nothing.
type signers struct{ s *Server }

func (p signers) Now() time.Time                   { return p.s.deps.Clock.Now() }
func (p signers) Pool() *accounts.Pool             { return p.s.deps.Selector.Pool() }
func (p signers) SignsIn(a *accounts.Account) bool { return p.s.adapters.For(a.Kind).signsIn() }

func (p signers) Secret(a *accounts.Account) (secrets.Secret, error) {
	return p.s.secrets.get(a.ID, p.s.runtime().TokensAt(a.ID))
}

func (p signers) Adopt(a *accounts.Account) bool {
	if p.s.deps.Adopter == nil {
		return false
	}
	sec, ok := p.s.deps.Adopter.Adopt(*a)
	if ok {
		p.s.secrets.put(a.ID, sec)
		p.s.runtime().TokensChanged(a.ID)
	}
	return ok
}

// tokenAccount is the id of the ChatGPT account in the pool whose access
// token bearer is (backend.Tokens), "" when there is none.
func (s *Server) tokenAccount(bearer []byte) string { return s.tokens.Account(bearer, signers{s}) }

// bearerOf is the token of an Authorization: Bearer header, nil if none.
func bearerOf(h *fasthttp.RequestHeader) []byte {
	auth := h.Peek("Authorization")
	const prefix = "Bearer "
	if len(auth) > len(prefix) && bytes.EqualFold(auth[:len(prefix)], []byte(prefix)) {
		return auth[len(prefix):]
	}
	return nil
}

// passThrough sends a call under /backend-api/ that carries the access
// token of account id to that account's ChatGPT base, unchanged (method,
// the request target as the client sent it, body), as that account and
// through its outbound proxy, and relays the answer. A target
// backend.Target refuses gets 400 and goes nowhere. Only its path and
// status are logged.
func (s *Server) passThrough(ctx *fasthttp.RequestCtx, r *request, id string) {
	w := httpResponder{ctx}
	pool := s.deps.Selector.Pool()
	a := pool.At(pool.IndexOf(id))
	if a == nil {
		s.refuse(w, r, rerr.Spec{Code: rerr.ProxyUnauthorized, Message: guardMessages[rerr.ProxyUnauthorized]}, nil)
		return
	}
	rest, ok := backend.Target(ctx.Request.Header.RequestURI())
	if !ok {
		s.refuse(w, r, rerr.Spec{Code: rerr.ProxyBadRequest,
			Message: "rotor does not pass this target through: under " + backend.Prefix + " a path must name no . or .. segment, in any encoding"}, nil)
		closeAfterAnswer(ctx) // its body is not read
		return
	}
	body, held, spec := s.readBody(ctx)
	defer held.release()
	if spec != nil {
		s.refuse(w, r, *spec, nil)
		closeAfterAnswer(ctx) // as on every route: what is left of it is not read
		return
	}
	ad := s.adapters.For(a.Kind)
	base := ad.base(a.BaseURL)
	way := s.endpoints.Way(base, a.ProxyURL)
	sec, err := s.secrets.get(a.ID, s.runtime().TokensAt(a.ID))
	var rt *upstream.Exit
	if err == nil {
		rt, err = s.exits.Of(&way, sec.ProxyPassword)
	}
	if err != nil {
		s.passFailed(w, r, way.Endpoint, err)
		return
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	backend.PassRequest(req, &ctx.Request, base, rest, sec.AccessToken, a.ChatGPTAccountID)
	req.SetBodyRaw(body)
	resp := fasthttp.AcquireResponse()
	if err := rt.Client.Do(req, resp); err != nil {
		fasthttp.ReleaseResponse(resp)
		s.passFailed(w, r, way.Endpoint, err)
		return
	}
	ctx.SetStatusCode(resp.StatusCode())
	headerrules.RelayResponse(&ctx.Response.Header, &resp.Header)
	headerrules.RedactHeaders(&ctx.Response.Header, &sec)
	// Redacting may change the body's length: it goes chunked, whose end
	// the client sees, so an answer cut upstream is cut for it too.
	ctx.Response.Header.Del("Content-Length")
	pb := &passBody{resp: resp, s: s, id: r.id, path: backend.Prefix + backend.RawPath(rest), account: pool.IndexOf(id)}
	src := resp.BodyStream()
	pb.Reset(src, sec)
	if pb.streamed = src != nil; !pb.streamed {
		ctx.SetBody(headerrules.Redact(resp.Body(), &sec)) // no body, or a HEAD's
		pb.CloseWithError(nil)
		return
	}
	ctx.SetBodyStream(pb, -1)
}

// passBody is a passed-through answer's body, read by fasthttp's server
// after the handler returned: the upstream's bytes, redacted, as they
// arrive, so an answer of any size streams in bounded memory. fasthttp
// closes it once the answer is written or the client has gone; it then
// lets go of the upstream answer and logs the call.
type passBody struct {
	headerrules.RedactingReader
	streamed bool // the upstream's answer has a body stream
	resp     *fasthttp.Response
	s        *Server
	id       string // the request's: the request itself is released by then
	path     string
	account  int
}

// Read runs outside the handler's recover: a bug met here is logged and
// cuts the answer (errPanicked), rather than end the process.
func (b *passBody) Read(p []byte) (n int, err error) {
	defer func() {
		if v := recover(); v != nil {
			b.s.panicLog(b.id, v).Msg("pass-through panic")
			b.Fail(errPanicked)
			n, err = 0, errPanicked
		}
	}()
	return b.RedactingReader.Read(p)
}

// CloseWithError releases the upstream answer, closing its connection
// unless it was read to its end, and logs the call's path and status.
func (b *passBody) CloseWithError(error) error {
	complete := !b.streamed || errors.Is(b.Err(), io.EOF)
	switch {
	case complete:
		b.resp.CloseBodyStream()
	case b.Err() != nil: // the upstream's failure, or errPanicked
		upstream.CloseStream(b.resp, b.Err())
	default:
		upstream.CloseStream(b.resp, errClientGone)
	}
	status := b.resp.StatusCode()
	fasthttp.ReleaseResponse(b.resp)
	b.resp = nil
	b.s.deps.Log.Info().Str("request_id", b.id).Str("path", b.path).Int("account", b.account).
		Int("status", status).Bool("complete", complete).Msg("backend call passed through")
	return nil
}

// passFailed answers a backend call whose account's endpoint could not
// be reached, as a model request that finds no endpoint would be.
func (s *Server) passFailed(w responder, r *request, endpoint string, err error) {
	s.refuse(w, r, rerr.Spec{Code: rerr.PoolExhausted, Status: 503,
		Message: "cannot reach " + endpoint + " for this account's backend call: " + err.Error(),
		Extra:   []rerr.Field{{Key: "reason", Value: "network-error"}}}, nil)
}
