package oauth

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	rerr "github.com/rotorproxy/rotor/errors"
)

// ErrTimeout is returned when the user did not finish signing in in time.
var ErrTimeout = errors.New("sign-in timed out after 5 minutes; run \"rotor login\" again (or try --no-browser or --device)")

// LoginCallback signs in through the browser: it serves the redirect on
// addr (127.0.0.1:1455 in use; tests pick a port), shows the authorize URL
// through open (a browser opener; when it fails the URL is printed to out),
// checks the returned state, and exchanges the code. It gives up when ctx
// ends (5 minutes in rotor login).
func (c *Client) LoginCallback(ctx context.Context, addr string, open func(string) error, out io.Writer) (Tokens, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return Tokens{}, fmt.Errorf("cannot listen on %s for the sign-in callback (%v); is another login running? Try --no-browser or --device", addr, err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	redirect := fmt.Sprintf("http://localhost:%d/auth/callback", port)
	p, state := NewPKCE(), NewState()

	type result struct {
		t   Tokens
		err error
	}
	done := make(chan result, 1)
	finish := func(r result) {
		select {
		case done <- r:
		default:
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/auth/callback", func(w http.ResponseWriter, r *http.Request) {
		code, err := callbackCode(r.URL.Query(), state)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			finish(result{err: err})
			return
		}
		t, err := c.Exchange(r.Context(), code, p.Verifier, redirect)
		if err != nil {
			http.Error(w, "Sign-in failed: "+html.EscapeString(err.Error()), http.StatusBadGateway)
			finish(result{err: err})
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, "<!doctype html><title>rotor</title><p>Signed in. You can close this tab and return to the terminal.</p>")
		finish(result{t: t})
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	// Shutdown, not Close: the callback hands over the tokens before its
	// page has left for the browser, and Close would cut it, leaving the
	// user looking at a broken page after a sign-in that worked.
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
	}()

	u := c.AuthorizeURL(p, state, redirect)
	if open == nil || open(u) != nil {
		fmt.Fprintf(out, "Open this URL in a browser to sign in:\n\n  %s\n\n", u)
	} else {
		fmt.Fprintf(out, "A browser window opened to sign in. If it did not, open:\n\n  %s\n\n", u)
	}
	select {
	case r := <-done:
		return r.t, r.err
	case <-ctx.Done():
		return Tokens{}, ErrTimeout
	}
}

// callbackCode checks a callback's query against the expected state and
// returns its code.
func callbackCode(q url.Values, state string) (string, error) {
	if e := q.Get("error"); e != "" {
		return "", fmt.Errorf("sign-in refused: %s %s", e, q.Get("error_description"))
	}
	if q.Get("state") != state {
		return "", errors.New("sign-in rejected: the state does not match this login (a stale or forged callback)")
	}
	code := q.Get("code")
	if code == "" {
		return "", errors.New("sign-in rejected: the callback carries no code")
	}
	return code, nil
}

// LoginPaste signs in without a callback server: it prints the authorize
// URL and reads the redirect URL the user pastes back from in.
func (c *Client) LoginPaste(ctx context.Context, in io.Reader, out io.Writer) (Tokens, error) {
	p, state := NewPKCE(), NewState()
	fmt.Fprintf(out, "Open this URL in a browser and sign in:\n\n  %s\n\n", c.AuthorizeURL(p, state, RedirectURI))
	fmt.Fprintln(out, "The browser then fails to load a localhost page; copy that page's full URL and paste it here:")
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(in).ReadString('\n')
		lines <- strings.TrimSpace(line)
	}()
	var pasted string
	select {
	case pasted = <-lines:
	case <-ctx.Done():
		return Tokens{}, ErrTimeout
	}
	u, err := url.Parse(pasted)
	if err != nil || pasted == "" {
		return Tokens{}, rerr.Validation("redirect", "That is not the redirect URL (want http://localhost:1455/auth/callback?code=…&state=…)")
	}
	code, err := callbackCode(u.Query(), state)
	if err != nil {
		return Tokens{}, err
	}
	return c.Exchange(ctx, code, p.Verifier, RedirectURI)
}

// LoginDevice signs in with the device-code flow: it shows a code to enter
// at the verification page and polls until the user has, then exchanges the
// authorization code it gets.
func (c *Client) LoginDevice(ctx context.Context, out io.Writer) (Tokens, error) {
	body, status, err := c.postJSON(ctx, "/api/accounts/deviceauth/usercode", map[string]string{"client_id": ClientID})
	if err != nil {
		return Tokens{}, err
	}
	if status/100 != 2 {
		return Tokens{}, fmt.Errorf("device sign-in is not available (HTTP %d); use rotor login without --device", status)
	}
	id := gjson.GetBytes(body, "device_auth_id").String()
	code := gjson.GetBytes(body, "user_code").String()
	if code == "" {
		code = gjson.GetBytes(body, "usercode").String()
	}
	if id == "" || code == "" {
		return Tokens{}, errors.New("device sign-in: the server returned no code")
	}
	interval := time.Duration(gjson.GetBytes(body, "interval").Float() * float64(time.Second))
	if interval <= 0 {
		interval = 5 * time.Second
	}
	fmt.Fprintf(out, "Open %s/codex/device and enter the code:\n\n  %s\n\n", c.Base, code)
	for {
		select {
		case <-ctx.Done():
			return Tokens{}, ErrTimeout
		case <-time.After(interval):
		}
		body, status, err := c.postJSON(ctx, "/api/accounts/deviceauth/token", map[string]string{"device_auth_id": id, "user_code": code})
		if err != nil {
			if ctx.Err() != nil {
				return Tokens{}, ErrTimeout
			}
			return Tokens{}, err
		}
		switch {
		case status == http.StatusForbidden || status == http.StatusNotFound:
			continue // not entered yet
		case status/100 != 2:
			return Tokens{}, fmt.Errorf("device sign-in failed (HTTP %d)", status)
		}
		authCode := gjson.GetBytes(body, "authorization_code").String()
		verifier := gjson.GetBytes(body, "code_verifier").String()
		if authCode == "" || verifier == "" {
			return Tokens{}, errors.New("device sign-in: the server returned no authorization code")
		}
		return c.Exchange(ctx, authCode, verifier, c.Base+"/deviceauth/callback")
	}
}

func (c *Client) postJSON(ctx context.Context, path string, v any) ([]byte, int, error) {
	data, _ := json.Marshal(v)
	req, err := http.NewRequestWithContext(ctx, "POST", c.Base+path, strings.NewReader(string(data)))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, 0, rerr.Network(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return body, resp.StatusCode, err
}
