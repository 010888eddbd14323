package netproxy

import (
	"net/url"
	"strings"
	"testing"
)

func TestParseChecksAndNeverRepeatsThePassword(t *testing.T) {
	for _, raw := range []string{"ftp://u:hunter2@h:1", "http://u:hunter2@:3128", "http://u:hunter2@h", "http://u:hunter2@h:99999",
		"http://u:hunter2@h:1/path", "http://u:hunter2@h:1?q", "http://u:hunter2@h:1\x7f", "://u:hunter2@h"} {
		_, err := Parse(raw)
		if err == nil {
			t.Errorf("%q: accepted", raw)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: the error shows the password: %v", raw, err)
		}
	}
	for _, raw := range []string{"http://h:3128", "https://u:p@h:443", "socks5://h:1080", "socks5h://u@[::1]:1080/"} {
		if _, err := Parse(raw); err != nil {
			t.Errorf("%q: %v", raw, err)
		}
	}
}

func TestSplitKeepsThePasswordApart(t *testing.T) {
	shown, pw, err := Split("http://me:p%40ss@proxy.corp:3128")
	if err != nil || shown != "http://me@proxy.corp:3128" || pw != "p@ss" {
		t.Fatalf("Split = %q, %q, %v", shown, pw, err)
	}
	u, err := Join(shown, pw)
	if err != nil || u.User.String() != "me:p%40ss" {
		t.Fatalf("Join = %v, %v", u, err)
	}
}

func TestFromEnvFollowsGosRules(t *testing.T) {
	env := map[string]string{"https_proxy": "http://lower:1", "HTTPS_PROXY": "http://upper:1", "NO_PROXY": "direct.example"}
	f := FromEnv(func(k string) string { return env[k] })
	for target, want := range map[string]string{"https://api.example": "upper:1", "https://direct.example": "", "https://127.0.0.1:8": "", "http://api.example": ""} {
		u, _ := url.Parse(target)
		p, err := f(u)
		got := ""
		if p != nil {
			got = p.Host
		}
		if err != nil || got != want {
			t.Errorf("%s: proxy %q (%v), want %q", target, got, err, want)
		}
	}
	if FromEnv(func(string) string { return "" }) != nil {
		t.Error("no proxy set, yet a rule")
	}
}

// A proxy variable that cannot be used is named, without its value.
func TestEnvProblemsNameTheVariableNotTheValue(t *testing.T) {
	env := map[string]string{"HTTPS_PROXY": "http://user:s3cret@proxy.corp", "http_proxy": "proxy.corp:3128"}
	errs := EnvProblems(func(k string) string { return env[k] })
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "HTTPS_PROXY") || strings.Contains(errs[0].Error(), "s3cret") {
		t.Fatalf("problems %v, want one naming HTTPS_PROXY (no port) and not its password", errs)
	}
	if errs := EnvProblems(func(string) string { return "" }); len(errs) != 0 {
		t.Errorf("no proxy set: %v", errs)
	}
}
