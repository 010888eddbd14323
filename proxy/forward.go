package proxy

import (
	"io"
	"slices"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/secrets"
	"github.com/rotorproxy/rotor/proxy/backend"
	"github.com/rotorproxy/rotor/proxy/headerrules"
	"github.com/rotorproxy/rotor/proxy/upstream"
	"github.com/rotorproxy/rotor/rotation"
)

// serve reads r's body and forwards it. Every request that reaches it,
// whichever way it came in, ends in finish.
func (s *Server) serve(w responder, r *request) {
	defer r.free()
	if s.admit(w, r) {
		s.forward(w, r)
	}
}

// admit counts r in and reads its body, and reports whether it goes on to
// forward; if not, r has been refused. A function of its own, so that its
// frame is not under the forward loop's (see send).
//
//go:noinline
func (s *Server) admit(w responder, r *request) bool {
	r.start, r.counted = s.deps.Clock.Now(), true
	s.metrics.Started()
	if spec := r.read(s.cfg.MaxBody); spec != nil {
		s.refuse(w, r, *spec, nil)
		return false
	}
	return true
}

// forward is the failover loop: pick an account, attempt it, and apply
// docs/selection.md's failover table to what came back, until an answer is
// committed or the request is refused.
func (s *Server) forward(w responder, r *request) {
	sel := s.deps.Selector
	pick := rotation.Request{AffinityKey: r.affinityKey, Model: r.model}
	r.codexCatalog = r.op == opModels && r.codexClient && s.anyCodexAccount()
	if r.keyDerived && r.socket != nil && r.socket.Up != nil && !sel.Bound(r.affinityKey) {
		// A conversation the socket has not carried yet goes where the
		// socket already is, unless that account cannot take it; its
		// later turns, on this socket or another, follow it there.
		sel.Bind(r.affinityKey, r.socket.Up.AccountID)
		r.adopted = true
	}
	for {
		pick.Attempted, pick.Skip = r.attempted, nil
		if r.chat.Unsupported != "" || r.codexCatalog || len(r.unreachable) > 0 || s.endpoints.AnyDown() {
			pick.Skip = func(a *accounts.Account) string { return s.skip(r, a) }
		}
		// At most min(usable accounts, MaxAttempts) attempts: every pick is
		// a usable account not attempted yet, so Pick itself refuses once
		// the usable ones are spent; only the cap needs counting here.
		if len(r.attempted) >= s.cfg.MaxAttempts {
			s.exhausted(w, r, sel.Explain(&pick))
			return
		}
		var choice rotation.Choice
		ref := s.pick(&pick, &choice)
		if ref != nil {
			if !r.probing && s.endpoints.AnyDown() {
				// Only accounts behind an endpoint that failed lately are
				// left: try one of them rather than refuse, so the first
				// request after the network is back succeeds.
				r.probing = true
				continue
			}
			s.exhausted(w, r, ref)
			return
		}
		r.attempted = append(r.attempted, choice.Account.ID)
		r.lastIndex = choice.Index
		ans, f := s.watchedAttempt(w, r, &choice)
		if ans == nil && f == nil {
			return // the client left as its answer started
		}
		if f == nil {
			r.verdicts = append(r.verdicts, verdictOK)
			sel.Bind(r.affinityKey, choice.Account.ID)
			s.commit(w, r, &choice, ans)
			return
		}
		if !s.failedOver(w, r, &choice, f) {
			return
		}
	}
}

// anyCodexAccount reports whether the pool has an account enabled and not
// flagged whose kind lists Codex's catalog (a ChatGPT account).
//
//go:noinline
func (s *Server) anyCodexAccount() bool {
	return slices.ContainsFunc(s.deps.Selector.Pool().Accounts, func(a accounts.Account) bool {
		_, flagged := a.Flagged()
		return a.Enabled && !flagged && s.adapters.For(a.Kind).listsCatalog()
	})
}

// pick is the selector's choice for p, written to choice: a function of
// its own, so that the copies Pick's result is made of are not part of
// forward's frame while the attempt runs (see send).
//
//go:noinline
func (s *Server) pick(p *rotation.Request, choice *rotation.Choice) *rotation.Refusal {
	c, ref := s.deps.Selector.Pick(p)
	*choice = c
	return ref
}

// watchedAttempt is attempt while the client is watched (upstream.ClientWatch):
// if it leaves, the upstream connection is closed, which ends the attempt
// as a failure failedOver finishes as a client gone. An answer that
// started as the client left has no one to go to: it is let go, the
// account is not blamed, the request finished, and both results are nil.
func (s *Server) watchedAttempt(w responder, r *request, ch *rotation.Choice) (*answer, *failure) {
	cw := w.watch()
	r.watch = cw
	defer cw.Stop() // also when attempt panics: no watch outlives its attempt
	ans, f := s.attempt(r, ch)
	left := cw.Stop()
	r.watch = nil
	if !left || ans == nil {
		return ans, f
	}
	s.runtime().Record(ch.Account.ID, rotation.Answered, ans.resp.StatusCode(), rotation.Limit{})
	releaseHeld(ans.pending)
	upstream.CloseStream(ans.resp, errClientGone)
	fasthttp.ReleaseResponse(ans.resp)
	r.verdicts = append(r.verdicts, verdictOK)
	s.finish(r, ending{status: statusClientClosed, code: codeClientClosed, answered: true})
	return nil, nil
}

// skip keeps out of r the accounts it must not use: those whose adapter
// refuses it, and those behind an endpoint that cannot be reached (see
// rotation.Request.Skip).
func (s *Server) skip(r *request, a *accounts.Account) string {
	ad := s.adapters.For(a.Kind)
	if why := ad.refuses(r); why != "" {
		return why
	}
	if len(r.unreachable) == 0 && !s.endpoints.AnyDown() {
		return ""
	}
	ep := s.endpoints.Way(ad.base(a.BaseURL), a.ProxyURL).Endpoint
	if slices.Contains(r.unreachable, ep) || !r.probing && s.endpoints.IsDown(ep) {
		return rotation.CoolingDown(rotation.CooldownNetworkError)
	}
	return ""
}

// failedOver applies the failover row of f to the account of ch and
// reports whether the loop tries another account; when it does not, the
// request has been answered.
func (s *Server) failedOver(w responder, r *request, ch *rotation.Choice, f *failure) bool {
	r.verdicts = append(r.verdicts, f.verdict)
	r.upstreamAnswered = r.upstreamAnswered || f.answered()
	row := &failover[f.verdict]
	gone := w.gone()
	if !gone {
		if f.verdict == verdictUsageLimit && f.limit.Family == "" {
			// The answer did not name the family that metered it: the one
			// that meters the request's model, as the account's quota
			// (this answer's included) names them, else the main one.
			f.limit.Family = rotation.MainFamily
			if st := s.runtime().Snapshot(ch.Account.ID); st.Quota != nil {
				if fam := st.Quota.FamilyFor(r.model); fam != nil {
					f.limit.Family = fam.ID
				}
			}
		}
		s.chargeAccount(row, ch, f)
	}
	if f.verdict == verdictUnreachable {
		if !gone {
			s.endpoints.MarkDown(f.endpoint, f.err)
		}
		r.unreachable = append(r.unreachable, f.endpoint)
		r.netErr = f.err
	}
	switch {
	case gone:
		// Nobody is waiting: no more attempts, and nobody is blamed for
		// an answer no one asked for any more.
		s.finish(r, ending{status: statusClientClosed, code: codeClientClosed, answered: r.upstreamAnswered})
		return false
	case !row.rotate:
		s.refuse(w, r, row.respond(ch.Index, f), nil)
		return false
	}
	ev := s.deps.Log.Info().Str("request_id", r.id).Int("account", ch.Index).
		Str("outcome", row.name).Int("upstream_status", f.status)
	if f.err != nil {
		ev = ev.AnErr("upstream_error", f.err)
	}
	ev.Msg("failover: trying another account")
	return true
}

// answer is an upstream's successful answer, settled: ready to commit.
type answer struct {
	resp       *fasthttp.Response // the caller owns it
	answerForm answerForm
	pending    []byte // stream bytes already read, to send first (holdBack's buffer)
	assembled  []byte // the one object built from a whole stream
	ended      bool   // pending holds the whole stream
}

// failure is an attempt that brought no answer: the failover row it
// falls in (out) and what the row needs to know.
type failure struct {
	verdict    verdict
	status     int
	err        error
	body       []byte         // a non-2xx answer's first upstream.MaxErrorBody bytes, redacted
	limit      rotation.Limit // a usage limit's end, family and reason
	upstreamID string
	endpoint   string // where the attempt went, scheme://host:port
	message    string // outBadRequest: why rotor could not make the upstream's body
	// own: rotor failed before asking the upstream (no usable secret, a
	// body it could not make), though the failure has a status.
	own bool
}

// answered reports whether f is an upstream's answer, if a failed one (a
// status it sent, or its stream's failure): not a failure to reach it,
// nor rotor's own.
func (f *failure) answered() bool { return f.status != 0 && !f.own }

// attempt sends r to the account of ch, refreshing a token that is about
// to expire first, and once more after a 401, trying again on the same
// account.
func (s *Server) attempt(r *request, ch *rotation.Choice) (*answer, *failure) {
	a := &ch.Account
	ad := s.adapters.For(a.Kind)
	now := ch.At // the pick's reading of the clock, µs old: the secret's cache and expiry go by it
	if now.IsZero() {
		now = s.deps.Clock.Now() // a choice Pick did not make
	}
	var sec secrets.Secret
	if f := s.secretOf(r, ch, now, &sec); f != nil {
		return nil, f
	}
	refresh := ad.Refreshes() && s.deps.Refresher != nil
	refreshed := false
	if refresh && !sec.ExpiresAt.IsZero() && sec.ExpiresAt.Sub(now) < 5*time.Minute {
		refreshed = true
		s.refreshInto(r, ch, &sec)
	}
	ans, f := s.sendVia(r, ad, a, &sec)
	if f != nil && f.verdict == verdictUnauthorized && refresh && !refreshed && s.refreshInto(r, ch, &sec) {
		ans, f = s.sendVia(r, ad, a, &sec)
	}
	if f != nil && f.verdict == verdictForeignContent && !r.unbindAll {
		// A blob rotor did not know to be foreign (docs/codex.md): once more,
		// on the same account, with every blob taken out. Those it sent
		// are then known to be unreadable here, so the conversation's
		// next request does not pay for the refusal again.
		s.deps.Log.Info().Str("request_id", r.id).Int("account", ch.Index).
			Msg("encrypted content refused; retrying without it")
		s.disown(r)
		r.unbindAll = true
		ans, f = s.sendVia(r, ad, a, &sec)
	}
	return ans, f
}

// sendVia sends r over an upstream socket when it came in on a socket and
// the account's endpoint takes one, else over HTTP.
func (s *Server) sendVia(r *request, ad Adapter, a *accounts.Account, sec *secrets.Secret) (*answer, *failure) {
	if r.socket != nil {
		if ans, f, ok := s.sendFrame(r, ad, a, sec); ok {
			return ans, f
		}
		r.asHTTP()
	}
	return s.send(r, ad, a, sec)
}

// send makes one upstream request through ad and classifies the answer.
//
// Its frame, and those of its callers down to the fasthttp handler, stay
// on the stack while the client writes the request and while readStart
// waits for the first output: making the request and classifying a
// failed answer are done in functions of their own, which have returned
// by then, so that a serving goroutine fits in 8 KiB of stack as the
// floor's does (docs/PERFORMANCE.md, "Issue 45: the stack a stream waits
// on").
func (s *Server) send(r *request, ad Adapter, a *accounts.Account, sec *secrets.Secret) (*answer, *failure) {
	req, rt, endpoint, sh, f := s.upstreamRequest(r, ad, a, sec)
	if f != nil {
		return nil, f
	}
	defer fasthttp.ReleaseRequest(req)
	resp := fasthttp.AcquireResponse()
	if err := rt.Client.Do(req, resp); err != nil {
		fasthttp.ReleaseResponse(resp)
		upstream.RaiseDialPanic(err)
		return nil, &failure{verdict: classifyTransport(err), err: err, endpoint: endpoint}
	}
	if !s.answered(resp, a.ID, endpoint) {
		return nil, s.failedAnswer(resp, sec, endpoint)
	}
	headerrules.RedactHeaders(&resp.Header, sec)
	return s.readStart(r, resp, sh)
}

// upstreamRequest makes the request send sends to account a, with the
// exit it goes through; a failure if it cannot be made.
//
//go:noinline
func (s *Server) upstreamRequest(r *request, ad Adapter, a *accounts.Account, sec *secrets.Secret) (*fasthttp.Request, *upstream.Exit, string, answerForm, *failure) {
	base := ad.base(a.BaseURL)
	w := s.endpoints.Way(base, a.ProxyURL)
	endpoint := w.Endpoint
	rt, err := s.exits.Of(&w, sec.ProxyPassword)
	if err != nil {
		return nil, nil, "", 0, &failure{verdict: verdictUnreachable, err: err, endpoint: endpoint}
	}
	body, sh, err := ad.body(r)
	if err != nil {
		return nil, nil, "", 0, &failure{verdict: verdictBadRequest, status: 400, endpoint: endpoint, message: err.Error(), own: true}
	}
	body = r.wire(s.forAccount(r, ad, a, sec, body))
	sh = s.listsAliases(r, a.Kind, sh)
	req := fasthttp.AcquireRequest()
	req.SetRequestURIBytes(r.uriOf(ad, base))
	req.Header.SetMethodBytes(r.header.Method())
	headerrules.CopyRequest(&req.Header, r.header)
	s.ownIdentityHeaders(r, a.ID, req.Header.Peek, req.Header.Set)
	if s.mints.ForeignTurnState(req.Header.Peek(backend.TurnStateHeader), a.ID) {
		req.Header.Del(backend.TurnStateHeader)
	}
	ad.setHeaders(&req.Header, a.ChatGPTAccountID, *sec)
	if r.op != opModels {
		req.SetBodyRaw(body)
	}
	upstream.SetWatch(req, r.watch) // the round trip attaches the connection to it
	return req, rt, endpoint, sh, nil
}

// answered notes what resp, account id's answer from endpoint, tells of
// the endpoint, the account's turn state and its quota, and reports
// whether it is a success (2xx).
//
//go:noinline
func (s *Server) answered(resp *fasthttp.Response, id, endpoint string) bool {
	s.endpoints.MarkUp(endpoint)
	s.mints.LearnTurnState(resp.Header.Peek(backend.TurnStateHeader), id)
	if q := backend.QuotaOf(s.deps.Clock, &resp.Header); q != nil {
		s.runtime().SetQuota(id, *q)
	}
	status := resp.StatusCode()
	return status >= 200 && status < 300
}

// failedAnswer is the failure of a non-2xx resp from endpoint, which it
// releases.
//
//go:noinline
func (s *Server) failedAnswer(resp *fasthttp.Response, sec *secrets.Secret, endpoint string) *failure {
	status := resp.StatusCode()
	f := &failure{status: status, endpoint: endpoint, upstreamID: string(resp.Header.Peek("x-request-id")),
		body: headerrules.Redact(upstream.ReadErrorBody(resp), sec)}
	f.verdict = classify(status, &resp.Header, f.body)
	if f.verdict == verdictUsageLimit {
		f.limit = backend.LimitOf(s.deps.Clock.Now(), &resp.Header, f.body)
	}
	fasthttp.ReleaseResponse(resp)
	return f
}

// forAccount is body as it goes to account a: without the blobs another
// account minted, with a's own installation id, and with the model a's
// kind's alias names. Each attempt makes it anew; body itself is never
// changed.
func (s *Server) forAccount(r *request, ad Adapter, a *accounts.Account, sec *secrets.Secret, body []byte) []byte {
	redo := func(blob string) []byte { return s.recompact(r, ad, a, sec, blob) }
	return s.aliased(r, a.Kind, s.ownIdentity(r, a.ID, s.unbind(r, a.ID, body, redo)))
}

// readStart reads the start of a successful answer before anything is sent:
// all of it when the client wants one object made from it, else a
// stream's first output event. A stream that fails before any output is
// a failed attempt, so the loop can still try another account.
func (s *Server) readStart(r *request, resp *fasthttp.Response, sh answerForm) (*answer, *failure) {
	ans := &r.answer // one attempt at a time: no other answer of r is live
	*ans = answer{resp: resp, answerForm: sh}
	if sh == formModelList {
		// Bounded like an error body: a catalog is small.
		now := s.deps.Clock.Now()
		ans.assembled = withModels(modelList(upstream.ReadErrorBody(resp), now), r.listAliases, now)
		return ans, nil
	}
	if !sseAnswer(resp) || resp.BodyStream() == nil {
		return ans, nil
	}
	var fail streamFailure
	var err error
	if asm := newAssembler(r, sh); asm != nil {
		ans.assembled, fail, err = assemble(resp.BodyStream(), asm)
	} else {
		ans.pending, fail, err = holdBack(resp.BodyStream())
		if err == io.EOF {
			// A short stream read to its end. The relay must not read the
			// body again: past its last chunk a keep-alive connection has
			// nothing more to say, and the read would wait for the stall.
			err, ans.ended = nil, true
		}
	}
	if err == nil && fail.code == "" {
		return ans, nil
	}
	v := failedStreamVerdict(fail.code)
	if err == nil && v == verdictClientError && sh == formAsIs {
		// A stream that failed for what the request itself asked (an
		// input over the context window): every account would fail it
		// alike, so the client gets the stream as the upstream sent it,
		// which is how its own client expects to learn it.
		return ans, nil
	}
	releaseHeld(ans.pending)
	upstream.CloseStream(resp, upstream.ErrCut)
	fasthttp.ReleaseResponse(resp)
	if err != nil {
		return nil, &failure{verdict: verdictNetworkError, status: 200, err: err}
	}
	switch v {
	case verdictForeignContent:
		// Relayed as the 400 it stands for, should the retry fail too.
		return nil, &failure{verdict: v, status: 400, body: errorBody("invalid_request_error", fail.code,
			"The encrypted content could not be verified by this account.")}
	case verdictClientError:
		// A client that wants one object, or chat chunks, gets the 400
		// the same refusal is over HTTP.
		return nil, &failure{verdict: v, status: 400, body: errorBody("invalid_request_error", fail.code, fail.message)}
	}
	return nil, &failure{verdict: v, status: 200, body: errorBody("", fail.code, fail.message)}
}
