package proxy

import (
	"cmp"
	"time"

	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy/metrics"
	"github.com/rotorproxy/rotor/rotation"
	"github.com/rotorproxy/rotor/rotation/usage"
)

// ending is how a request ended, for its usage record and log line.
type ending struct {
	status int
	code   string
	choice *rotation.Choice // the account that answered; nil: the last attempted
	tokens *usage.Tokens
	ttfb   time.Duration
	err    error // why an answer broke after it started
	warn   bool  // an answer that did not complete
	// answered: an upstream answered the request, if with an error rotor
	// passed on or answered for; choice set says so too (a relay).
	answered bool
}

// statusClientClosed and codeClientClosed record a client that left.
const (
	statusClientClosed = 499
	codeClientClosed   = "client_closed"
)

// finish ends r: one usage record (failed requests count too: "rotor
// report" shows errors by code) and one log line, never a token or body.
// A request refused before it was read (guard, route, size) is logged
// but not recorded.
func (s *Server) finish(r *request, e ending) {
	r.finished = true
	now := s.deps.Clock.Now()
	dur := now.Sub(r.start)
	id, index := "", r.lastIndex
	if e.choice != nil {
		id, index = e.choice.Account.ID, e.choice.Index
	} else if n := len(r.attempted); n > 0 {
		id = r.attempted[n-1]
	}
	// The account's meter as the answer left it (its headers or
	// codex.rate_limits events): a full window with credits held means
	// the backend spent them on this request (docs/selection.md).
	onCredits := false
	if ch := e.choice; ch != nil && r.counted {
		onCredits = e.status < 300 && s.runtime().OnCredits(id, ch.Family, now)
	}
	if r.counted && s.deps.Usage != nil {
		rec := usage.Record{Time: now.UTC(), RequestID: r.id, AccountID: id, Model: r.model,
			Status: e.status, Code: e.code, Tokens: e.tokens, TTFBMS: e.ttfb.Milliseconds(), DurMS: dur.Milliseconds(),
			Affinity: affinityOf(r, e.choice), Context: contextOf(r), Tier: r.tier}
		if ch := e.choice; ch != nil {
			if ch.Family != rotation.MainFamily {
				rec.Limit = ch.Family
			}
		}
		rec.Credits = onCredits
		s.deps.Usage.Append(rec)
	}
	s.metrics.Finished(metrics.Request{AccountID: id, Index: index, Model: r.model, Status: e.status, Code: e.code,
		Tokens: e.tokens, TTFB: e.ttfb, Dur: dur, Answered: e.choice != nil || e.answered,
		Counted: r.counted, Streamed: r.streaming, OnCredits: onCredits})
	for _, v := range r.verdicts {
		s.metrics.Failover(int(v))
	}
	s.costs.Count(r.model, e.tokens, e.choice, id, index)
	ev := s.deps.Log.Info()
	if e.warn {
		ev = s.deps.Log.Warn()
		if e.err != nil {
			ev = ev.AnErr("upstream_error", e.err)
		}
	}
	ev = ev.Str("request_id", r.id).Str("transport", cmp.Or(r.transport, "http"))
	if index > 0 {
		ev = ev.Int("account", index)
	}
	if r.counted {
		ev = ev.Str("model", r.model)
	}
	ev = ev.Int("status", e.status)
	if r.counted {
		ev = ev.Int("attempts", len(r.attempted))
		if e.choice != nil {
			ev = ev.Int64("ttfb_ms", e.ttfb.Milliseconds())
		}
		ev = ev.Int64("duration_ms", dur.Milliseconds())
	}
	if e.code != "" {
		ev = ev.Str("code", e.code)
	}
	switch {
	case r.contextCut:
		ev = ev.Str("context", usage.ContextCut)
	case r.recompacted:
		ev = ev.Str("context", "recompacted")
	}
	if e.tokens != nil {
		ev = ev.Int64("input_tokens", e.tokens.Input).Int64("output_tokens", e.tokens.Output)
	}
	ev.Msg("request")
}

// affinityOf is what session affinity did for r, answered by the account
// of ch (nil: none answered), for its usage record: whether it kept the
// conversation on its account, where the prompt cache is, or moved it.
func affinityOf(r *request, ch *rotation.Choice) string {
	switch {
	case ch == nil || r.affinityKey == "" || ch.PinSource != "":
		return ""
	case r.adopted:
		return usage.AffinityNew // bound for it a moment ago, not kept
	case ch.Why == rotation.WhyAffinity:
		return usage.AffinityKept
	case ch.Moved:
		return usage.AffinityMoved
	}
	return usage.AffinityNew
}

// contextOf is the usage record's Context for r.
func contextOf(r *request) string {
	if r.contextCut {
		return usage.ContextCut
	}
	return ""
}

// refuse answers r with a rotor-made error and finishes it.
func (s *Server) refuse(w responder, r *request, spec rerr.Spec, headers func(HeaderSetter)) {
	spec.RequestID = r.id
	resp := rerr.Build(spec)
	w.refuse(resp, headers)
	s.finish(r, ending{status: resp.Status, code: spec.Code, answered: r.upstreamAnswered})
}
