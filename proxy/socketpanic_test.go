package proxy

import (
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/secrets"
)

// armedSecrets is a SecretSource that stands for a bug on the request
// path once armed: the next read panics, once.
type armedSecrets struct {
	src   SecretSource
	armed atomic.Bool
}

func (a *armedSecrets) Get(id string) (secrets.Secret, error) {
	if a.armed.CompareAndSwap(true, false) {
		panic("boom: sk-secret-in-panic")
	}
	return a.src.Get(id)
}

// A panic reached through a socket's request closes that socket with 1011,
// naming the request id its log line has, and nothing else: the panic is
// logged once, the request finished, and the other sockets and HTTP
// requests go on.
func TestSocketPanicClosesThatSocketOnly(t *testing.T) {
	t.Parallel()
	bug := &armedSecrets{}
	var log syncBuffer
	e := newEnvWith(t, []acct{{accounts.KindAPIKey, "k1"}}, peerConfig{seed: 1, log: &log,
		secrets: func(src SecretSource) SecretSource { bug.src = src; return bug }})
	hit, other := e.openSocket(), e.openSocket()

	bug.armed.Store(true)
	e.sel.Runtime().TokensChanged(e.id(1)) // the secret is read again, by the next request
	if err := hit.WriteMessage(websocket.TextMessage, []byte(createFrame)); err != nil {
		t.Fatal(err)
	}
	hit.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, got, err := hit.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseInternalServerErr {
		t.Fatalf("the socket got %q, %v; want a close with 1011", got, err)
	}
	if strings.Contains(ce.Text, "sk-secret") || strings.Contains(ce.Text, "boom") || strings.Contains(ce.Text, "goroutine") {
		t.Errorf("the close reason leaks the panic: %q", ce.Text)
	}
	id := ce.Text[strings.LastIndex(ce.Text, " ")+1:]
	if !strings.HasPrefix(id, "rotor_") {
		t.Errorf("the close reason %q names no request id", ce.Text)
	}

	// The rest of serve goes on: the other socket, and HTTP.
	if ts := types(turn(t, other, createFrame)); ts[len(ts)-1] != "response.completed" {
		t.Errorf("the other socket's turn: %v", ts)
	}
	if resp := e.do("POST", "/v1/responses", streamBody); resp.StatusCode != 200 {
		t.Errorf("an HTTP request after the panic: %d %s", resp.StatusCode, readAll(t, resp))
	} else {
		readAll(t, resp)
	}

	var panics, ends []map[string]any
	for l := range strings.SplitSeq(log.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["request_id"] != id {
			continue
		}
		switch m["message"] {
		case "websocket request panic":
			panics = append(panics, m)
		case "request":
			ends = append(ends, m)
		}
	}
	if len(panics) != 1 || !strings.Contains(panics[0]["panic"].(string), "boom") || panics[0]["stack"] == nil {
		t.Errorf("panic log lines for %s: %v, want one with the panic and its stack", id, panics)
	}
	if len(ends) != 1 || ends[0]["status"] != float64(500) || ends[0]["code"] != "codex_runtime_rotation_proxy_error" {
		t.Errorf("request log lines for %s: %v, want one, 500", id, ends)
	}
}
