package rotation

// Outcome is what one upstream attempt means for the account that made it.
// The proxy decides which outcome an answer is (whose fault it was);
// Record decides what the account gets for it: the "account gets" column
// of docs/selection.md's failover table, in one place, beside the cooldowns.
type Outcome int

const (
	// Unjudged: nothing the account did (entitlement, a challenge page,
	// rotor's own limits, an endpoint that cannot be reached).
	Unjudged Outcome = iota
	// Served: the account answered; its health rises.
	Served
	// Answered: the account answered, but the answer says nothing about
	// it (a client error, a client that left): last use only.
	Answered
	// Limited: at its usage limit until the reset given to Record.
	Limited
	// AuthRejected: a 401 that a token refresh did not cure.
	AuthRejected
	// TokenRevoked: the upstream says the token was invalidated.
	TokenRevoked
	// ServerFault: a 5xx, or a stream that failed before any output.
	ServerFault
	// NetworkFault: a reset or stall, before the answer or mid-stream.
	NetworkFault
	outcomeCount
)

// accountGets is what each outcome does to the account's state.
var accountGets = [outcomeCount]func(r *Runtime, id string, status int, l Limit){
	Unjudged: func(*Runtime, string, int, Limit) {},
	Served:   func(r *Runtime, id string, status int, _ Limit) { r.Success(id, status) },
	Answered: func(r *Runtime, id string, status int, _ Limit) { r.Used(id, status) },
	Limited:  func(r *Runtime, id string, _ int, l Limit) { r.Limit(id, l) },
	AuthRejected: func(r *Runtime, id string, _ int, _ Limit) {
		r.Cooldown(id, CooldownAuthFailure, AuthFailureCooldown)
	},
	TokenRevoked: func(r *Runtime, id string, _ int, _ Limit) {
		r.Cooldown(id, CooldownTokenInvalidated, InvalidatedCooldown)
	},
	ServerFault: func(r *Runtime, id string, _ int, _ Limit) {
		r.Failure(id, CooldownServerError, ServerErrorCooldown)
	},
	NetworkFault: func(r *Runtime, id string, _ int, _ Limit) {
		r.Failure(id, CooldownNetworkError, NetworkErrorCooldown)
	},
}

// Record gives account id what outcome o earns it. status is the
// upstream's answer (for Served and Answered), l the usage limit (for
// Limited: its family, reason and end; a zero end takes DefaultRateLimit).
func (r *Runtime) Record(id string, o Outcome, status int, l Limit) {
	accountGets[o](r, id, status, l)
}
