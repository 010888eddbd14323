package main

import (
	"fmt"
	"html"
	"path/filepath"
	"strings"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/proxy/dashboard"
)

func cmdDashboard(a *app, args []string) error {
	fs := a.flags()
	open := fs.Bool("open", false, "open the link in the default browser")
	if _, err := a.parse(fs, args); err != nil {
		return err
	}
	dir, in, err := a.liveServe()
	if err != nil {
		return err
	}
	link := dashboard.LoginURL(strings.TrimSuffix(in.URL, "/v1"), in.ClientKey, a.now())
	fmt.Fprintf(a.stdout, "%s\n", link)
	fmt.Fprintf(a.stderr, "Open this link within %s; it works once. It logs this browser in to the dashboard of rotor serve (pid %d).\n",
		accounts.HumanDuration(dashboard.LoginTTL), in.PID)
	if *open {
		return a.openDashboard(dir, link)
	}
	return nil
}

// openDashboard opens link in the user's browser through a 0600 page in
// the home that redirects to it, as Jupyter does: the one-time token never
// appears in another process's argv.
func (a *app) openDashboard(dir, link string) error {
	page := filepath.Join(dir, home.DashboardOpenPage)
	esc := html.EscapeString(link)
	doc := "<!doctype html><meta charset=utf-8><meta http-equiv=refresh content=\"0;url=" + esc + "\"><title>rotor</title><a href=\"" + esc + "\">Open the rotor dashboard</a>\n"
	if err := home.WriteFile(page, []byte(doc)); err != nil {
		return err
	}
	if err := a.openBrowser(page); err != nil {
		return fmt.Errorf("cannot open a browser (%v); open the link above yourself", err)
	}
	return nil
}
