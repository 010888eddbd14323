package main

import (
	"fmt"
	"net/url"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/netproxy"
	"github.com/rotorproxy/rotor/accounts/oauth"
	"github.com/rotorproxy/rotor/accounts/secrets"
	rerr "github.com/rotorproxy/rotor/errors"
)

// Outbound proxies (docs/behind-a-proxy.md): the environment's rule, read through this
// run's getenv, and the --proxy flag of the commands that add accounts and
// of "rotor set".

// envProxy is the environment's proxy rule (HTTPS_PROXY, HTTP_PROXY,
// NO_PROXY); nil when no proxy is set.
func (a *app) envProxy() netproxy.Func { return netproxy.FromEnv(a.getenv) }

// proxyFlagHelp is the --proxy flag's help, the same on every command.
const proxyFlagHelp = "send this account's requests, sign-in and token refresh through proxy `URL` " +
	"(http, https, socks5 or socks5h://[user[:password]@]host:port; a password left out comes from " +
	"$ROTOR_PROXY_PASSWORD or a prompt)"

// proxyArg completes the --proxy value raw ("" for none) with its
// password. A password on the command line is taken, but other local
// users can read argv, so a URL that names only a user gets its password
// from ROTOR_PROXY_PASSWORD, else, on a terminal, from a prompt that does
// not echo.
func (a *app) proxyArg(raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	u, err := netproxy.Parse(raw)
	if err != nil {
		return "", rerr.Validation("proxy", "Invalid --proxy: "+err.Error())
	}
	if u.User == nil {
		return raw, nil
	}
	if _, ok := u.User.Password(); ok {
		return raw, nil
	}
	pw := a.getenv("ROTOR_PROXY_PASSWORD")
	if pw == "" && a.stdinTTY && a.readHidden != nil {
		fmt.Fprintf(a.stderr, "Password for proxy %s (it is not shown; empty for none): ", netproxy.Display(u))
		pw, err = a.readHidden()
		fmt.Fprintln(a.stderr)
		if err != nil {
			return "", rerr.Validation("proxy", "cannot read the proxy password: "+err.Error())
		}
	}
	if pw != "" {
		u.User = url.UserPassword(u.User.Username(), pw)
	}
	return u.String(), nil
}

// signInClient is the sign-in client for an account whose own proxy is
// raw ("" for none): its sign-in goes out the way its requests will.
func (a *app) signInClient(raw string) *oauth.Client {
	var own *url.URL
	if raw != "" {
		own, _ = netproxy.Parse(raw) // proxyArg checked it
	}
	return oauth.NewClient(a.getenv("ROTOR_AUTH_BASE_URL")).Through(netproxy.Choose(own, a.envProxy()))
}

// giveProxy gives the account id, just added or updated, its own proxy
// raw; "" leaves the account as it is.
func (a *app) giveProxy(st *accounts.Store, sec secrets.Store, id, raw string) error {
	if raw == "" {
		return nil
	}
	p, err := accounts.SetProxy(st, sec, id, raw)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "It goes out through proxy %s.\n", p.At(p.IndexOf(id)).ProxyURL)
	return nil
}

func cmdSet(a *app, args []string) error {
	fs := a.flags()
	proxy := fs.String("proxy", "", proxyFlagHelp)
	noProxy := fs.Bool("no-proxy", false, "take the account's own proxy away: the environment's (HTTPS_PROXY, NO_PROXY) applies again")
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	usage := "Usage: rotor " + commands["set"].usage
	switch {
	case len(pos) == 0:
		return rerr.Validation("index", "Missing index. "+usage)
	case len(pos) > 1:
		return rerr.Validation("index", "Too many arguments. "+usage)
	case *proxy == "" && !*noProxy:
		return rerr.Validation("proxy", "Nothing to set. "+usage)
	case *proxy != "" && *noProxy:
		return rerr.Validation("proxy", "--proxy and --no-proxy exclude each other. "+usage)
	}
	raw, err := a.proxyArg(*proxy)
	if err != nil {
		return err
	}
	st, sec, err := a.storeAndSecrets()
	if err != nil {
		return err
	}
	pool, err := st.Load()
	if err != nil {
		return err
	}
	i, err := pool.ParseIndex(pos[0])
	if err != nil {
		return err
	}
	id := pool.At(i).ID
	if pool, err = accounts.SetProxy(st, sec, id, raw); err != nil {
		return err
	}
	acct := pool.At(pool.IndexOf(id))
	if acct.ProxyURL == "" {
		fmt.Fprintf(a.stdout, "Account %d (%s) has no proxy of its own: it connects as HTTPS_PROXY, HTTP_PROXY and NO_PROXY say.\n", i, acct.Label)
		return nil
	}
	fmt.Fprintf(a.stdout, "Account %d (%s) goes out through proxy %s.\n", i, acct.Label, acct.ProxyURL)
	return nil
}
