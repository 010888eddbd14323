package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts/home"
	rerr "github.com/rotorproxy/rotor/errors"
)

// rotor key makes the stable key once and then prints the same one, 256
// bits in hex, kept 0600 in a 0700 home; rotate replaces it.
func TestKeyIsStableUntilRotated(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	first := h.ok("", "key").stdout
	if again := h.ok("", "key").stdout; again != first {
		t.Fatalf("rotor key printed %q, then %q", first, again)
	}
	key := strings.TrimSuffix(first, "\n")
	if len(key) != 64 || strings.Trim(key, "0123456789abcdef") != "" {
		t.Fatalf("key %q is not 256 bits in hex", key)
	}
	checkMode(t, h.dir, 0o700)
	checkMode(t, h.path(home.ClientKeyFile), 0o600)
	rotated := h.ok("", "key", "rotate")
	if rotated.stdout == first || len(rotated.stdout) != 65 || !strings.Contains(rotated.stderr, "within 1s") {
		t.Fatalf("rotate: %v", rotated)
	}
	if now := h.ok("", "key").stdout; now != rotated.stdout {
		t.Errorf("after rotate, rotor key prints %q, want %q", now, rotated.stdout)
	}
	if r := h.run("", "key", "show"); r.code != 1 || !strings.Contains(r.stderr, "Usage: rotor key [rotate]") {
		t.Errorf("rotor key show: %v", r)
	}
	// Two lasting keys at once are one too many.
	h.setenv("ROTOR_CLIENT_KEY", raceClientKey)
	if r := h.run("", "serve", "--stable-key", "--port", "0"); r.code != 1 || !strings.Contains(r.stderr, "ROTOR_CLIENT_KEY") {
		t.Errorf("serve --stable-key with ROTOR_CLIENT_KEY: %v", r)
	}
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != want {
		t.Errorf("%s is %04o, want %04o", path, fi.Mode().Perm(), want)
	}
}

// A real serve on the stable key follows "rotor key rotate" within 1s:
// from then on the old key gets the usual 401 payload, the new one is
// served, and "rotor env" hands out the new one. No key reaches its log.
func TestServeStableKeyFollowsRotation(t *testing.T) {
	t.Parallel()
	h, _ := newServedHome(t)
	old := strings.TrimSpace(h.ok("", "key").stdout)

	cmd := exec.Command(rotorBin, "serve", "--port", "0", "--log-format", "json", "--stable-key")
	cmd.Env = h.env
	p := startServeCmd(t, cmd, "stable")
	if status, _ := stableGet(t, p.url, old); status != 200 {
		t.Fatalf("the stable key before rotation: %d", status)
	}
	fresh := strings.TrimSpace(h.ok("", "key", "rotate").stdout)
	rotated := time.Now()
	for {
		oldStatus, body := stableGet(t, p.url, old)
		newStatus, _ := stableGet(t, p.url, fresh)
		env := h.ok("", "env").stdout
		if oldStatus == 401 && newStatus == 200 && strings.Contains(env, "OPENAI_API_KEY="+fresh+"\n") {
			var payload struct{ Error struct{ Code string } }
			if json.Unmarshal([]byte(body), &payload); payload.Error.Code != rerr.ProxyUnauthorized {
				t.Errorf("old key's 401 body: %s", body)
			}
			break
		}
		if time.Since(rotated) > time.Second {
			t.Fatalf("1s after rotation: old key %d, new key %d, rotor env %q", oldStatus, newStatus, env)
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.stop(t)
	for _, k := range []string{old, fresh} {
		if strings.Contains(p.stderr.String(), k) {
			t.Errorf("serve's log holds a client key:\n%s", p.stderr.String())
		}
	}
	if !strings.Contains(p.stderr.String(), "client key rotated") {
		t.Errorf("the rotation was not logged:\n%s", p.stderr.String())
	}
}

// stableGet asks serve at base for the model list with key.
func stableGet(t *testing.T, base, key string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/models", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := raceHTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
