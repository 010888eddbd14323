// Package netproxy reads the outbound proxies rotor connects through
// (docs/behind-a-proxy.md): the environment's rule, as Go's http.ProxyFromEnvironment
// reads it, and an account's own proxy URL, checked, and kept apart from
// its password, which is a secret (docs/files.md): the password goes to the secrets
// store, the rest of the URL may be stored and shown.
package netproxy

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpproxy"
)

// Func picks the proxy for a request to target; nil means none.
type Func = func(target *url.URL) (*url.URL, error)

// FromEnv returns the rule of HTTPS_PROXY, HTTP_PROXY and NO_PROXY (each
// also in lower case, the upper case winning) as getenv reads them, with
// httpproxy's rules: loopback targets and NO_PROXY matches go direct. It
// returns nil when no proxy is set, so a caller tells "never a proxy" with
// one comparison.
func FromEnv(getenv func(string) string) Func {
	cfg := httpproxy.Config{
		HTTPProxy:  envOf(getenv, "HTTP_PROXY"),
		HTTPSProxy: envOf(getenv, "HTTPS_PROXY"),
		NoProxy:    envOf(getenv, "NO_PROXY"),
	}
	if cfg.HTTPProxy == "" && cfg.HTTPSProxy == "" {
		return nil
	}
	return cfg.ProxyFunc()
}

// EnvProblems checks the proxy variables getenv reads as FromEnv uses
// them, and returns one error per variable that cannot be used: httpproxy
// skips such a proxy and connects straight, which a user behind a proxy
// should hear about at start rather than find out from a timeout. The
// errors name the variable, never its value, which may carry a password.
func EnvProblems(getenv func(string) string) []error {
	var out []error
	for _, name := range []string{"HTTPS_PROXY", "HTTP_PROXY"} {
		v := envOf(getenv, name)
		if v == "" {
			continue
		}
		if !strings.Contains(v, "://") {
			v = "http://" + v // as httpproxy reads a bare host:port
		}
		if _, err := Parse(v); err != nil {
			out = append(out, fmt.Errorf("%s is set but cannot be used (%v): rotor connects straight", name, err))
		}
	}
	return out
}

func envOf(getenv func(string) string, upper string) string {
	if v := getenv(upper); v != "" {
		return v
	}
	return getenv(strings.ToLower(upper))
}

// Schemes are the proxy URL schemes rotor dials: HTTP proxies (CONNECT),
// over TCP or TLS, and SOCKS5 (socks5h: the proxy resolves names, which
// rotor's SOCKS5 does anyway).
var Schemes = []string{"http", "https", "socks5", "socks5h"}

// Parse checks raw as a proxy URL, scheme://[user[:password]@]host:port
// with one of Schemes and nothing after the port. Its errors never repeat
// the URL, which may carry a password.
func Parse(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error would quote the URL, password and all
		}
		return nil, fmt.Errorf("proxy URL cannot be read: %v; want scheme://[user[:password]@]host:port", err)
	}
	if !slices.Contains(Schemes, u.Scheme) {
		return nil, fmt.Errorf("proxy URL scheme %q is not one of http, https, socks5, socks5h", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, errors.New("proxy URL names no host; want scheme://[user[:password]@]host:port")
	}
	if n, err := strconv.Atoi(u.Port()); err != nil || n < 1 || n > 65535 {
		return nil, fmt.Errorf("proxy URL for %s names no port (1-65535); want scheme://[user[:password]@]host:port", u.Hostname())
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("proxy URL for %s has a path, query or fragment; want scheme://[user[:password]@]host:port", u.Host)
	}
	return u, nil
}

// Split parses raw (see Parse) into what may be stored and shown, the URL
// without its password (see Display), and the password, a secret.
func Split(raw string) (shown, password string, err error) {
	u, err := Parse(raw)
	if err != nil {
		return "", "", err
	}
	password, _ = u.User.Password()
	return Display(u), password, nil
}

// Display is u as rotor shows and stores it: scheme://[user@]host:port,
// never the password.
func Display(u *url.URL) string {
	d := url.URL{Scheme: u.Scheme, Host: u.Host}
	if u.User != nil {
		d.User = url.User(u.User.Username())
	}
	return d.String()
}

// Join puts password back into shown (a Display form) for dialing. An
// empty shown is no proxy: nil.
func Join(shown, password string) (*url.URL, error) {
	if shown == "" {
		return nil, nil
	}
	u, err := Parse(shown)
	if err != nil {
		return nil, err
	}
	if password != "" {
		u.User = url.UserPassword(u.User.Username(), password)
	}
	return u, nil
}

// HostPort is the address to dial for u, its scheme's port when it names
// none (a proxy from the environment may leave it out).
func HostPort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return u.Host
	}
	port := map[string]string{"http": "80", "https": "443", "socks5": "1080", "socks5h": "1080"}[u.Scheme]
	return net.JoinHostPort(u.Hostname(), port)
}

// Choose is the rule of an account: its own proxy own for every request
// when it has one, else the environment's rule env.
func Choose(own *url.URL, env Func) Func {
	if own == nil {
		return env
	}
	return func(*url.URL) (*url.URL, error) { return own, nil }
}
