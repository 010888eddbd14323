package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// serve refuses any host that is not loopback, naming it, before it binds
// or writes anything.
func TestServeRefusesNonLoopbackHost(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.addKey("a", "sk-a")
	for _, host := range []string{"0.0.0.0", "192.168.1.10", "::", "example.com"} {
		r := h.run("", "serve", "--host", host, "--port", "0")
		if r.code != 1 || !strings.Contains(r.stderr, host) {
			t.Errorf("--host %s: %v", host, r)
		}
		if _, err := os.Stat(h.path(home.InfoFile)); !os.IsNotExist(err) {
			t.Errorf("--host %s wrote proxy.json", host)
		}
	}
}

// SIGTERM lets an in-flight stream finish, then serve exits 0, removes
// proxy.json and has saved what it learned; rotor env works while it runs.
func TestServeDrainsOnSIGTERM(t *testing.T) {
	t.Parallel()
	up := upstreamtest.New("../../testdata")
	if err := up.Start(""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	up.SetDefault(upstreamtest.Behavior{EventDelay: 150 * time.Millisecond})
	h := newHome(t)
	h.setenv("ROTOR_OPENAI_BASE_URL", up.OpenAIBase())
	h.addKey("a", "sk-a")

	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd, stdout, stderr := h.command(ctx, "", "serve", "--port", "0", "--log-format", "json")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var info home.Info
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if info, err = home.ReadInfo(h.dir); err == nil && info.PID == cmd.Process.Pid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no proxy.json within 10s; stderr: %s", stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.HasPrefix(info.URL, "http://127.0.0.1:") || len(info.ClientKey) < 32 {
		t.Fatalf("proxy.json %+v", info)
	}
	if fi, _ := os.Stat(h.path(home.InfoFile)); fi.Mode().Perm() != 0o600 {
		t.Errorf("proxy.json mode %v", fi.Mode().Perm())
	}
	env := h.ok("", "env")
	if env.stdout != "export OPENAI_BASE_URL="+info.URL+"\nexport OPENAI_API_KEY="+info.ClientKey+"\n" {
		t.Errorf("rotor env printed %q", env.stdout)
	}

	req, _ := http.NewRequest("POST", info.URL+"/responses", strings.NewReader(`{"model":"gpt-5","stream":true,"input":"hi"}`))
	req.Header.Set("Authorization", "Bearer "+info.ClientKey)
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "event: ") {
		t.Fatalf("first line %q, %v", line, err)
	}
	// Mid-stream: ask the proxy to stop.
	cmd.Process.Signal(syscall.SIGTERM)
	rest, err := io.ReadAll(br)
	resp.Body.Close()
	if err != nil || !strings.Contains(string(rest), "event: response.completed") {
		t.Fatalf("the in-flight stream was cut by the shutdown: %v\n%s", err, rest)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("serve exited with %v; stderr: %s", err, stderr)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not exit within 15s of SIGTERM")
	}
	if !strings.Contains(stdout.String(), "rotor proxy listening on "+info.URL) ||
		!strings.Contains(stdout.String(), "dashboard: "+strings.TrimSuffix(info.URL, "/v1")+"/ (run: rotor dashboard --open)") {
		t.Errorf("stdout %q", stdout)
	}
	if _, err := os.Stat(h.path(home.InfoFile)); !os.IsNotExist(err) {
		t.Error("proxy.json left behind after a clean shutdown")
	}
	// Its request was logged as one JSON line, without the key.
	if !strings.Contains(stderr.String(), `"message":"request"`) || strings.Contains(stderr.String(), info.ClientKey) || strings.Contains(stderr.String(), "sk-a") {
		t.Errorf("log: %s", stderr)
	}
	// What it learned was saved: account 1 was used.
	rs := h.ok("", "rotation", "status", "--json")
	if !strings.Contains(rs.stdout, `"last_used": "`) {
		t.Errorf("state not saved: %s", rs.stdout)
	}
	if c, err := net.DialTimeout("tcp", strings.TrimSuffix(strings.TrimPrefix(info.URL, "http://"), "/v1"), time.Second); err == nil {
		c.Close()
		t.Error("the port still accepts connections")
	}
}
