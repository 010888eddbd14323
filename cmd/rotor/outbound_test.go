package main

import (
	"os"
	"strings"
	"testing"
)

// docs/behind-a-proxy.md: an account's own proxy is set with --proxy on add-key and
// with "rotor set", shown without its password, and its password lives in
// the secrets store only.
func TestProxyFlagKeepsThePasswordASecret(t *testing.T) {
	h := newHome(t)
	h.ok("sk-proxied", "add-key", "--label", "work", "--proxy", "http://me:hunter2@proxy.corp:3128")
	h.setenv("ROTOR_PROXY_PASSWORD", "from-env-pw")
	h.addKey("other", "sk-other")
	set := h.ok("", "set", "2", "--proxy", "socks5://sock@10.0.0.1:1080")

	a1, a2 := h.pool().At(1), h.pool().At(2)
	if a1.ProxyURL != "http://me@proxy.corp:3128" || a2.ProxyURL != "socks5://sock@10.0.0.1:1080" {
		t.Fatalf("proxy_url %q, %q", a1.ProxyURL, a2.ProxyURL)
	}
	sec := h.secretsFile()
	if sec[a1.ID]["proxy_password"] != "hunter2" || sec[a2.ID]["proxy_password"] != "from-env-pw" {
		t.Errorf("secrets hold proxy passwords %v, %v", sec[a1.ID]["proxy_password"], sec[a2.ID]["proxy_password"])
	}
	stored, err := os.ReadFile(h.path("accounts.json"))
	if err != nil {
		t.Fatal(err)
	}
	list := h.ok("", "list", "--json")
	for what, text := range map[string]string{"accounts.json": string(stored), "list --json": list.stdout, "set": set.stdout + set.stderr} {
		if strings.Contains(text, "hunter2") || strings.Contains(text, "from-env-pw") {
			t.Errorf("a proxy password is in %s:\n%s", what, text)
		}
	}
	if !strings.Contains(list.stdout, `"proxy_url": "http://me@proxy.corp:3128"`) {
		t.Errorf("list --json does not show the proxy:\n%s", list.stdout)
	}

	h.ok("", "set", "1", "--no-proxy")
	if a := h.pool().At(1); a.ProxyURL != "" || h.secretsFile()[a.ID]["proxy_password"] != nil {
		t.Errorf("--no-proxy left %q and its password", a.ProxyURL)
	}
	if h.secretsFile()[a1.ID]["api_key"] != "sk-proxied" {
		t.Error("setting the proxy lost the key")
	}
}

func TestProxyFlagRefusesABadURLWithoutRepeatingIt(t *testing.T) {
	h := newHome(t)
	h.addKey("a", "sk-a")
	for _, bad := range []string{"ftp://u:hunter2@h:1", "http://u:hunter2@h", "http://u:hunter2@:8080"} {
		r := h.run("", "set", "1", "--proxy", bad)
		if r.code != 1 || !strings.Contains(r.stderr, "proxy") || strings.Contains(r.stdout+r.stderr, "hunter2") {
			t.Errorf("set --proxy %s: %v", bad, r)
		}
	}
	if r := h.run("", "set", "1"); r.code != 1 || !strings.Contains(r.stderr, "Nothing to set") {
		t.Errorf("set without a change: %v", r)
	}
}
