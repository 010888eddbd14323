package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/proxy"
	"github.com/rotorproxy/rotor/rotation/view"
)

func cmdRotation(a *app, args []string) error {
	fs := a.flags()
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "status" {
		return rerr.Validation("subcommand", "Usage: rotor rotation status [--json]")
	}
	pool, sel, err := a.selector()
	if err != nil {
		return err
	}
	rows := sel.Status()
	st := view.StatusOf(sel, rows)
	next := a.nextPick(pool, st.Next)
	if *asJSON {
		// The serve's decision replaces the one worked out here.
		return a.exportJSON("rotation status", struct {
			view.Status
			Next nextPick `json:"next"`
		}{st, next})
	}
	pinned := pool.Pinned()
	if pinned > 0 {
		fmt.Fprintf(a.stdout, "Pinned: account %d (manual, \"rotor unpin\" to rotate)\n", pinned)
	} else {
		fmt.Fprintln(a.stdout, "Pinned: no (rotating)")
	}
	if next.Index != nil {
		fmt.Fprintf(a.stdout, "Next:   account %d (%s)\n", *next.Index, next.Reason)
	} else {
		fmt.Fprintf(a.stdout, "Next:   none: %s\n", next.Reason)
	}
	if next.ServePID != nil {
		fmt.Fprintf(a.stdout, "        as rotor serve (pid %d) will choose for a new conversation\n\n", *next.ServePID)
	} else {
		fmt.Fprintf(a.stdout, "        worked out here: %s; a serve may choose otherwise\n\n", next.Why)
	}
	if len(rows) == 0 {
		fmt.Fprintln(a.stdout, "No accounts yet.")
		return nil
	}
	pal := a.palette()
	now := a.now()
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  #\t%s\tLABEL\tHEALTH\t%s\t%s\tLAST USED\tCREDITS\n", pal.header("STATE"), pal.header("PRIMARY QUOTA"), pal.header("SECONDARY QUOTA"))
	for _, r := range rows {
		p, s := pal.quotaCells(r.Quota, now)
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Index, pal.state(stateText(r, now)), r.Account.Label, r.Health,
			p, s, ago(r.LastUsed, now), creditsCell(r.Quota))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printMeterNotes(a.stdout, rows, now)
	return nil
}

// nextPick is the `next` of `rotation status`: the account the next new
// conversation goes to, and why. Source is "serve" when the running serve
// said so (ServePID is its pid): the pick is that process's own, made
// from what it knows in memory. It is "local" when no serve answered and
// this command worked it out from the shared state: Why says why, and a
// serve started now could choose otherwise (its tie-breaker is its own).
type nextPick struct {
	Index    *int   `json:"index"`
	Reason   string `json:"reason"`
	Source   string `json:"source"`
	ServePID *int   `json:"serve_pid"`
	Why      string `json:"local_because,omitempty"`
}

// serveNextTimeout bounds how long `rotation status` waits for the serve's
// answer before it works the pick out itself.
const serveNextTimeout = 3 * time.Second

// nextPick asks the running serve which account its next new conversation
// goes to, named by its index in pool (the serve's own index when pool no
// longer has it); when no serve answers, it is local, worked out here.
func (a *app) nextPick(pool *accounts.Pool, local view.Pick) nextPick {
	n, err := a.askServeNext()
	if err != nil {
		return nextPick{Index: local.Index, Reason: local.Reason, Source: "local", Why: err.Error()}
	}
	p := nextPick{Reason: n.Reason, Source: "serve", ServePID: &n.PID}
	if n.Index > 0 {
		i := n.Index
		if j := pool.IndexOf(n.AccountID); j > 0 {
			i = j
		}
		p.Index = &i
	}
	return p
}

// askServeNext asks the serve clients use (proxy.json) for proxy.NextPath,
// with its client key as every client sends it.
func (a *app) askServeNext() (proxy.Next, error) {
	var n proxy.Next
	_, in, err := a.liveServe()
	if err != nil {
		return n, errors.New("no rotor serve runs")
	}
	ctx, cancel := context.WithTimeout(context.Background(), serveNextTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(strings.TrimRight(in.URL, "/"), "/v1")+proxy.NextPath, nil)
	if err != nil {
		return n, fmt.Errorf("rotor serve (pid %d) has no usable url in proxy.json", in.PID)
	}
	req.Header.Set("Authorization", "Bearer "+in.ClientKey)
	resp, err := a.client().Do(req)
	if err != nil {
		return n, fmt.Errorf("rotor serve (pid %d) does not answer", in.PID)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// An older serve has no such route (404).
		return n, fmt.Errorf("rotor serve (pid %d) does not say (HTTP %d; restart it to let it)", in.PID, resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&n); err != nil {
		return n, fmt.Errorf("rotor serve (pid %d) answered what is not its pick", in.PID)
	}
	return n, nil
}

func ago(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return accounts.HumanDuration(now.Sub(t)) + " ago"
}
