package checkup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
)

// Verification results.
const (
	VerifyRestored     = "restored"
	VerifyStillFlagged = "still-flagged"
	VerifyWould        = "would-verify" // dry run
)

// Refresh outcomes in a VerifyReport.
const (
	RefreshOK      = "ok"
	RefreshFailed  = "failed"
	RefreshSkipped = "skipped" // API keys have nothing to refresh; dry runs refresh nothing
)

// VerifyReport is what verify-flagged did with one flagged account.
type VerifyReport struct {
	Index         int    `json:"index"`
	ID            string `json:"id"`
	Label         string `json:"label"`
	Kind          string `json:"kind"`
	FlaggedReason string `json:"flagged_reason"`
	Refresh       string `json:"refresh"`
	// ProbeStatus is the HTTP status of the probe, nil when none was sent.
	ProbeStatus *int   `json:"probe_status"`
	Result      string `json:"result"`
	Detail      string `json:"detail"`
}

// VerifyResult is one verify-flagged run.
type VerifyResult struct {
	DryRun  bool
	Reports []VerifyReport
}

// Count returns how many flagged accounts there were, how many were
// restored, and how many are still flagged.
func (r VerifyResult) Count() (total, restored, still int) {
	for _, rep := range r.Reports {
		switch rep.Result {
		case VerifyRestored:
			restored++
		case VerifyStillFlagged:
			still++
		}
	}
	return len(r.Reports), restored, still
}

// probeURL is the URL of an account's probe, for messages.
func (c *Checkup) probeURL(a *accounts.Account) string {
	req, err := c.adapter(a).ProbeRequest(context.Background(), a, nil)
	if err != nil {
		return "(invalid base URL)"
	}
	return req.URL.String()
}

// VerifyFlagged re-checks every flagged account: for one whose kind has
// tokens to renew (ChatGPT) a token refresh, then (when it worked) a probe
// of the upstream with the account's headers; for one with a long-lived
// key (API key) the probe alone. An account whose probe answers 2xx gets
// its flag cleared and is enabled again. With dryRun it only says what it
// would try: no refresh, since refresh tokens are single-use, and no
// probe.
//
// An error is returned only when the store cannot be read or written.
func (c *Checkup) VerifyFlagged(ctx context.Context, dryRun bool) (VerifyResult, error) {
	res := VerifyResult{DryRun: dryRun}
	pr := c.readPool()
	if pr.err != nil {
		return res, pr.err
	}
	var st *accounts.Store
	refreshed := false
	for i := range pr.pool.Accounts {
		a := pr.pool.Accounts[i]
		why, flagged := a.Flagged()
		if !flagged {
			continue
		}
		rep := VerifyReport{Index: i + 1, ID: a.ID, Label: a.Label, Kind: string(a.Kind), FlaggedReason: why,
			Refresh: RefreshSkipped, Result: VerifyStillFlagged}
		if dryRun {
			rep.Result = VerifyWould
			rep.Detail = "would send GET " + c.probeURL(&a) + " and restore the account on a 2xx answer"
			if c.adapter(&a).Refreshes() {
				rep.Detail = "would refresh its token, then " + rep.Detail
			}
			res.Reports = append(res.Reports, rep)
			continue
		}
		ok := c.verifyOne(ctx, &a, &rep)
		if rep.Refresh == RefreshOK {
			refreshed = true
		}
		if ok {
			if st == nil {
				var err error
				if st, err = accounts.Open(c.d.Dir); err != nil {
					return res, err
				}
			}
			if err := restore(st, a.ID, why); err != nil {
				rep.Detail += "; but restoring it failed: " + errText(err)
			} else {
				rep.Result = VerifyRestored
				rep.Detail += "; flag cleared and account enabled"
				if c.d.Runtime != nil {
					// The cooldown that came with the flag (a 5-minute
					// token-invalidated one) ends too.
					c.d.Runtime.Clear(a.ID)
					refreshed = true // sync below
				}
			}
		}
		res.Reports = append(res.Reports, rep)
	}
	if refreshed && c.d.Runtime != nil {
		c.d.Runtime.Sync(nil) // running proxies see new tokens and cleared cooldowns; best effort
	}
	return res, nil
}

// verifyOne refreshes (when its kind has tokens to renew) and probes one
// account, filling rep; it reports whether the account works.
func (c *Checkup) verifyOne(ctx context.Context, a *accounts.Account, rep *VerifyReport) bool {
	if c.d.Secrets == nil {
		rep.Detail = "no secrets backend: " + errText(c.secretsUnavailable())
		return false
	}
	sec, err := c.d.Secrets.Get(a.ID)
	if err != nil {
		rep.Detail = "no usable secret (" + errText(err) + "); sign in again"
		if errors.Is(err, secrets.ErrNotFound) {
			rep.Detail = "no secret stored; sign in again with \"rotor login\" or \"rotor add-key\""
		}
		return false
	}
	if c.adapter(a).Refreshes() {
		if c.d.Refresher == nil {
			rep.Detail = "no token refresher configured"
			return false
		}
		rctx, cancel := context.WithTimeout(ctx, c.d.RefreshTimeout)
		fresh, err := c.d.Refresher.Refresh(rctx, *a, sec)
		cancel()
		if err != nil {
			rep.Refresh = RefreshFailed
			if rerr.CodeOf(err) == rerr.CodeAuthRefreshFailed && !rerr.IsRetryable(err) {
				rep.Detail = "the auth server refused the refresh token (" + errText(err) + "); sign in again with \"rotor login\""
			} else {
				rep.Detail = "token refresh failed, try again later: " + errText(err)
			}
			return false
		}
		rep.Refresh = RefreshOK
		sec = fresh
		if c.d.Runtime != nil {
			c.d.Runtime.TokensChanged(a.ID)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, c.d.ProbeTimeout)
	defer cancel()
	status, msg, err := c.probe(pctx, a, sec)
	prefix := ""
	if rep.Refresh == RefreshOK {
		prefix = "token refreshed; "
	}
	if err != nil {
		rep.Detail = prefix + "probe failed: " + err.Error()
		return false
	}
	rep.ProbeStatus = &status
	rep.Detail = fmt.Sprintf("%sGET %s answered %d", prefix, c.probeURL(a), status)
	if msg != "" {
		rep.Detail += ": " + msg
	}
	return status/100 == 2
}

// probe sends the account's models request with the headers the proxy's
// adapter sends and returns the status and, for
// an error, the upstream's message. The secret goes only into headers.
func (c *Checkup) probe(ctx context.Context, a *accounts.Account, sec secrets.Secret) (int, string, error) {
	req, err := c.adapter(a).ProbeRequest(ctx, a, &sec)
	if err != nil {
		return 0, "", fmt.Errorf("invalid base URL: %v", err)
	}
	resp, err := c.d.HTTP.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is in the detail already
		}
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
	if resp.StatusCode/100 == 2 {
		return resp.StatusCode, "", nil
	}
	return resp.StatusCode, upstreamMessage(body), nil
}

// upstreamMessage is the readable part of an error body, on one short line.
func upstreamMessage(body []byte) string {
	msg := ""
	for _, p := range []string{"error.message", "message", "detail", "error"} {
		if r := gjson.GetBytes(body, p); r.Type == gjson.String && r.String() != "" {
			msg = r.String()
			break
		}
	}
	msg = strings.Join(strings.Fields(msg), " ")
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return msg
}

// restore clears the flag of account id and enables it, if it still has
// the flag the verification was about.
func restore(st *accounts.Store, id, reason string) error {
	_, err := st.Update(func(p *accounts.Pool) error {
		i := p.IndexOf(id)
		if i == 0 {
			return rerr.NotFound("the account was removed meanwhile")
		}
		a := p.At(i)
		if r, ok := a.Flagged(); ok && r != reason {
			return fmt.Errorf("it was flagged %s meanwhile", r)
		}
		a.SetFlag("")
		a.Enabled = true
		return nil
	})
	return err
}
