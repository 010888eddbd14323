package rotation

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// What the backend meters beyond one pair of windows (docs/selection.md): limit
// families that meter some models on their own, credits an account spends
// once a window is full, and workspace accounts that have no windows.

// MainFamily is the id of the limit family that meters every request no
// other family claims: the x-codex-primary-* / x-codex-secondary-* windows.
const MainFamily = "codex"

// Family is the windows of one limit family other than the main one: the
// backend meters the model LimitName (a request whose model it is) against
// them instead of the account's main windows.
type Family struct {
	// ID is the family's limit id as Codex normalizes it: lower case, "_"
	// for "-" (x-codex-bengalfox-* is codex_bengalfox).
	ID string `json:"id"`
	// LimitName is the model the family meters, when the backend named it.
	LimitName string  `json:"limit_name,omitempty"`
	Primary   *Window `json:"primary,omitempty"`
	Secondary *Window `json:"secondary,omitempty"`
}

// Credits is what the backend says of an account's credits: bought, or a
// workspace's, spent once a window's included quota is used up.
type Credits struct {
	HasCredits bool `json:"has_credits"`
	Unlimited  bool `json:"unlimited,omitempty"`
	// Balance is the backend's decimal string, "" when it gave none.
	Balance string `json:"balance,omitempty"`
}

// Holds reports whether c says the account can spend credits now:
// unlimited, or has_credits with a balance that is not zero or below.
func (c *Credits) Holds() bool {
	if c == nil {
		return false
	}
	if c.Unlimited {
		return true
	}
	if amt, ok := c.Amount(); ok {
		return c.HasCredits && amt > 0
	}
	return c.HasCredits
}

// Amount is the balance as a number, and whether there is one.
func (c *Credits) Amount() (float64, bool) {
	if c == nil || c.Balance == "" {
		return 0, false
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(c.Balance), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}

// maxBalance is the largest balance rotor believes; a backend that says
// more is read as saying this much (docs/selection.md keeps hostile numbers out).
const maxBalance = 1e9

// keepableCredits is c as far as it can be believed: a balance that is
// not a number is dropped, one below zero is zero, one above maxBalance
// is maxBalance.
func keepableCredits(c *Credits) *Credits {
	if c == nil || c.Balance == "" {
		return c
	}
	out := *c
	amt, ok := c.Amount()
	switch {
	case !ok:
		out.Balance = ""
	case amt < 0:
		out.Balance = "0"
	case amt > maxBalance:
		out.Balance = strconv.FormatFloat(maxBalance, 'f', -1, 64)
	}
	return &out
}

// NormalizeFamily is a limit id as Codex compares them: trimmed, lower
// case, "-" read as "_". "" is the main family.
func NormalizeFamily(id string) string {
	id = strings.ReplaceAll(strings.ToLower(strings.TrimSpace(id)), "-", "_")
	if id == "" {
		return MainFamily
	}
	return id
}

// Workspace reached types (docs/selection.md): usage limits that only a
// workspace's owner lifts, so the account waits for a usage read that
// says it can serve, not for a time.
var workspaceReached = []string{
	"workspace_owner_credits_depleted",
	"workspace_member_credits_depleted",
	"workspace_owner_usage_limit_reached",
	"workspace_member_usage_limit_reached",
}

// WorkspaceLimit reports whether reached is a reached type only a
// workspace's owner lifts.
func WorkspaceLimit(reached string) bool { return slices.Contains(workspaceReached, reached) }

// Limit is what a usage limit says: until when, for which family, and
// the backend's reached type.
type Limit struct {
	// Until is the reset; zero takes DefaultRateLimit, and a workspace
	// limit waits MaxRateLimit unless a usage read lifts it first.
	Until time.Time
	// Family is the family that metered the request ("" is the main one).
	Family string
	// Reason is the backend's reached type, "" when it gave none.
	Reason string
}

// CreditsPolicy is when a request may go to an account on credits (docs/selection.md): rotor serve --credits.
type CreditsPolicy string

// The credits policies.
const (
	// CreditsLastResort: only when no usable account has included quota
	// left for the request. The default.
	CreditsLastResort CreditsPolicy = "last-resort"
	// CreditsNever: never; the request gets the usage limit it would get
	// with no credits.
	CreditsNever CreditsPolicy = "never"
	// CreditsSpend: credits count as quota.
	CreditsSpend CreditsPolicy = "spend"
)

// ParseCreditsPolicy reads a --credits value ("" is the default).
func ParseCreditsPolicy(s string) (CreditsPolicy, error) {
	switch p := CreditsPolicy(strings.TrimSpace(s)); p {
	case "":
		return CreditsLastResort, nil
	case CreditsLastResort, CreditsNever, CreditsSpend:
		return p, nil
	}
	return "", fmt.Errorf("unknown credits policy %q (want last-resort, never or spend)", s)
}

// FamilyFor is the family of q that meters model: the one whose limit
// name is model, else nil (the main windows).
func (q *Quota) FamilyFor(model string) *Family {
	if q == nil || model == "" {
		return nil
	}
	for i := range q.Families {
		if q.Families[i].LimitName != "" && strings.EqualFold(q.Families[i].LimitName, model) {
			return &q.Families[i]
		}
	}
	return nil
}

// Family is the family of q with id, nil when q has none (or id is the
// main family's).
func (q *Quota) Family(id string) *Family {
	if q == nil {
		return nil
	}
	for i := range q.Families {
		if q.Families[i].ID == id {
			return &q.Families[i]
		}
	}
	return nil
}

// windowsOf is the windows of family id in q (the main ones for
// MainFamily).
func (q *Quota) windowsOf(id string) (p, s *Window) {
	if q == nil {
		return nil, nil
	}
	if id == MainFamily {
		return q.Primary, q.Secondary
	}
	if f := q.Family(id); f != nil {
		return f.Primary, f.Secondary
	}
	return nil, nil
}

// FullUntil is when the last full window of family id ends: a window at
// 100% not yet reset at now. Zero when none is full.
func (q *Quota) FullUntil(id string, now time.Time) time.Time {
	p, s := q.windowsOf(id)
	var until time.Time
	for _, w := range [2]*Window{p, s} {
		if w != nil && w.UsedPercent >= 100 && (w.ResetsAt.IsZero() || w.ResetsAt.After(now)) {
			at := w.ResetsAt
			if at.IsZero() {
				at = now.Add(DefaultRateLimit) // full, reset unknown: as a 429 with no reset
			}
			until = later(until, at)
		}
	}
	return until
}

// OnCredits reports whether the account of q spends credits for family
// id at now: a window of it is full and not yet reset, and it holds
// credits.
func (q *Quota) OnCredits(id string, now time.Time) bool {
	return q != nil && q.Credits.Holds() && !q.FullUntil(id, now).IsZero()
}

// mergeQuota is the snapshot q applied over prev (either may say only
// part of what the backend meters): the main windows when q tells any
// (or is Whole), each family q tells, credits, plan and reset credits
// when q tells them; the rest as prev had it. A Whole q (a usage read)
// drops the families it leaves out.
func mergeQuota(prev *Quota, q Quota) Quota {
	if prev == nil {
		return q
	}
	if q.Primary == nil && q.Secondary == nil && !q.Whole {
		q.Primary, q.Secondary = prev.Primary, prev.Secondary
	}
	if len(prev.Families) > 0 {
		fams := slices.Clone(q.Families)
		for i := range fams {
			// A codex.rate_limits event names the family, not its model:
			// the model stays as a header or a read named it.
			if old := prev.Family(fams[i].ID); old != nil && fams[i].LimitName == "" {
				fams[i].LimitName = old.LimitName
			}
		}
		for _, f := range prev.Families {
			if !q.Whole && q.Family(f.ID) == nil {
				fams = append(fams, f)
			}
		}
		q.Families = fams
	}
	if q.Credits == nil {
		q.Credits = prev.Credits
	}
	if q.PlanType == "" {
		q.PlanType = prev.PlanType
	}
	if q.ResetCredits == nil {
		q.ResetCredits = prev.ResetCredits
	}
	if !q.Whole {
		q.Workspace = prev.Workspace && q.Primary == nil && q.Secondary == nil
	}
	return q
}

// maxFamilies bounds the families kept per account: the backend names a
// handful; a hostile one must not grow state.json without bound.
const maxFamilies = 16

// keepableFamilies is fams as far as they can be kept (see keepable),
// at most maxFamilies, the main family's id never among them.
func keepableFamilies(fams []Family, now time.Time) []Family {
	if len(fams) == 0 {
		return nil
	}
	out := make([]Family, 0, min(len(fams), maxFamilies))
	for _, f := range fams {
		f.ID = NormalizeFamily(f.ID)
		if f.ID == MainFamily || slices.ContainsFunc(out, func(o Family) bool { return o.ID == f.ID }) {
			continue
		}
		if len(out) == maxFamilies {
			break
		}
		f.Primary, f.Secondary = keepable(f.Primary, now), keepable(f.Secondary, now)
		out = append(out, f)
	}
	return out
}
