package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
)

// serve on a port in use names the port, the rotor serve holding it (from
// its record) and --port 0; a port held by another program says so.
func TestServeOnABusyPort(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.addKey("a", "sk-busy-port-a")
	first := raceServe(t, rotorBin, h.env, "first serve")
	u, err := url.Parse(first.url)
	if err != nil {
		t.Fatal(err)
	}
	r := h.run("", "serve", "--port", u.Port())
	want := fmt.Sprintf("Port %s on 127.0.0.1 is already in use by rotor serve (pid %d", u.Port(), first.cmd.Process.Pid)
	if r.code != 1 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "--port 0") {
		t.Errorf("second serve on the same port: want exit 1, %q and --port 0: %v", want, r)
	}
	if _, err := os.Stat(h.path(fmt.Sprintf("proxy-%d.json", first.cmd.Process.Pid))); err != nil {
		t.Errorf("the failed serve touched the first one's record: %v", err)
	}
	first.stop(t)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	r = h.run("", "serve", "--port", fmt.Sprint(port))
	want = fmt.Sprintf("Port %d on 127.0.0.1 is already in use by another program", port)
	if r.code != 1 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "--port 0") {
		t.Errorf("serve on a port another program holds: want exit 1, %q and --port 0: %v", want, r)
	}
}
