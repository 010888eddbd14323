package main

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/home"
	rerr "github.com/rotorproxy/rotor/errors"
)

// cmdCodex points Codex CLI, signed in with ChatGPT as it is, at rotor
// (docs/codex.md): "rotor codex link" writes the two base URLs into its
// config.toml, "rotor codex unlink" takes them out.
func cmdCodex(a *app, args []string) error {
	fs := a.flags()
	root := fs.String("url", "", "point Codex at the serve at `URL` (default the running serve's, else the stable one's, http://127.0.0.1:8787)")
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	path := accounts.CodexConfigPath(a.getenv)
	switch {
	case len(pos) == 1 && pos[0] == "link":
		return a.codexLink(path, *root)
	case len(pos) == 1 && pos[0] == "unlink":
		changed, err := accounts.UnlinkCodexConfig(path)
		if err != nil {
			return err
		}
		if !changed {
			fmt.Fprintf(a.stdout, "Codex was not pointed at rotor in %s: nothing to do.\n", path)
			return nil
		}
		fmt.Fprintf(a.stdout, "Codex no longer goes through rotor: removed %s and %s from %s.\n",
			accounts.CodexOpenAIBaseKey, accounts.CodexChatGPTBaseKey, path)
		return nil
	}
	return rerr.Validation("args", "Usage: rotor "+commands["codex"].usage)
}

// codexLink writes the two settings, for the serve at root (a base URL
// without /v1) or, when root is empty, the running or stable serve. The
// link is written either way; when nothing listens at root, stderr says
// so and how to start a serve, since Codex would fail to connect.
func (a *app) codexLink(path, root string) error {
	if root == "" {
		root = fmt.Sprintf("http://127.0.0.1:%d", home.DefaultPort)
		if _, in, err := a.liveServe(); err == nil {
			root = strings.TrimSuffix(in.URL, "/v1")
		}
	}
	root = strings.TrimSuffix(strings.TrimSuffix(root, "/"), "/v1")
	openai, chatgpt := codexBases(root)
	changed, old, err := accounts.LinkCodexConfig(path, openai, chatgpt)
	if err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(old)) {
		fmt.Fprintf(a.stderr, "rotor: %s was %q; it now points at rotor (\"rotor codex unlink\" removes it, not the old value).\n", k, old[k])
	}
	if changed {
		fmt.Fprintf(a.stdout, "Codex goes through rotor at %s: %s = %q and %s = %q in %s.\n",
			root, accounts.CodexOpenAIBaseKey, openai, accounts.CodexChatGPTBaseKey, chatgpt, path)
	} else {
		fmt.Fprintf(a.stdout, "Codex already goes through rotor at %s (%s).\n", root, path)
	}
	a.checkServeListening(root)
	a.checkCodexLogin()
	return nil
}

// checkServeListening says, on stderr, when nothing listens at root (the
// serve's base URL): the link is right, but Codex cannot connect until a
// serve runs there. A listener that answers is taken for the serve; rotor
// does not hold the client key to ask it more.
func (a *app) checkServeListening(root string) {
	u, err := url.Parse(root)
	if err != nil || u.Host == "" {
		return // LinkCodexConfig took it; nothing to dial
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443"}[u.Scheme]
		if port == "" {
			port = "80"
		}
	}
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(u.Hostname(), port), 2*time.Second)
	if err == nil {
		conn.Close()
		return
	}
	fmt.Fprintf(a.stderr, "rotor: no rotor serve is listening at %s yet, so Codex cannot connect: ", root)
	if port == fmt.Sprint(home.DefaultPort) {
		fmt.Fprintln(a.stderr, "start one with \"rotor serve\" (and keep it running), or \"rotor service install\" to run it now and at every login.")
		return
	}
	// The service runs on the default port only: it needs a link of its own.
	fmt.Fprintf(a.stderr, "start one with \"rotor serve --port %s\" (and keep it running); or \"rotor service install\" runs one now "+
		"and at every login on port %d, and \"rotor codex link\" then points Codex at it.\n", port, home.DefaultPort)
}

// codexBases are the two base URLs of the serve at root.
func codexBases(root string) (openai, chatgpt string) {
	return root + "/v1", root + "/backend-api/"
}

// checkCodexLogin says, on stderr, what stands between a linked Codex and
// rotor: Codex must be signed in with ChatGPT, as an account of the pool.
func (a *app) checkCodexLogin() {
	login, inPool := a.codexLogin()
	switch {
	case login == nil:
		fmt.Fprintln(a.stderr, "rotor: Codex is not signed in with ChatGPT here: sign in (codex login), then \"rotor import codex\"; "+
			"with an API key use \"rotor exec -- codex\" instead.")
	case !inPool:
		fmt.Fprintln(a.stderr, "rotor: the ChatGPT account Codex is signed in with is not in rotor's pool, so rotor will refuse its requests: run \"rotor import codex\".")
	}
}

// codexLogin is the ChatGPT login of Codex's auth.json (nil when it has
// none), and whether that login is an account of the pool.
func (a *app) codexLogin() (login *accounts.Identity, inPool bool) {
	ct, err := accounts.ReadCodexAuth(accounts.CodexAuthPath(a.getenv))
	if err != nil {
		return nil, false
	}
	id := ct.Identity()
	st, err := a.store()
	if err != nil {
		return &id, false
	}
	p, err := st.Load()
	if err != nil {
		return &id, false
	}
	return &id, slices.ContainsFunc(p.Accounts, func(acct accounts.Account) bool { return acct.SameLogin(id) })
}
