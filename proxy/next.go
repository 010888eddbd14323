package proxy

import (
	"encoding/json"
	"os"

	"github.com/valyala/fasthttp"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/rotation"
)

// NextPath is where a serve says which account its next new conversation
// goes to, and why (docs/commands.md "rotation status"). Only this process can
// say: the pick reads what it knows in memory (its own tie-breaker, the
// accounts it picked last, what it learned since state.json was last
// written), so `rotor rotation status` asks it rather than guessing.
const NextPath = "/rotor/next"

// Next is the answer of NextPath: the account (1-based index in the
// serve's pool, and its id) a new conversation would get now, and why;
// Index 0 and AccountID "" when none can serve. PID is the serve's.
type Next struct {
	Index     int    `json:"index"`
	AccountID string `json:"account_id"`
	Reason    string `json:"reason"`
	PID       int    `json:"pid"`
}

// answerNext answers NextPath with the pick the forward loop would make
// for a new conversation on /v1/responses, without making it: the same
// selector, and the same accounts left out (those behind an upstream
// endpoint that failed lately).
func (s *Server) answerNext(ctx *fasthttp.RequestCtx) {
	sel := s.deps.Selector
	r := &request{op: opResponses}
	pick := rotation.Request{}
	if s.endpoints.AnyDown() {
		pick.Skip = func(a *accounts.Account) string { return s.skip(r, a) }
	}
	i, why := sel.NextFor(&pick)
	n := Next{Index: i, Reason: why, PID: os.Getpid()}
	if p := sel.Pool(); i > 0 && i <= len(p.Accounts) {
		n.AccountID = p.Accounts[i-1].ID
	}
	body, _ := json.Marshal(n)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}
