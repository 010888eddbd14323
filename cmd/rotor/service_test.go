package main

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/rotorproxy/rotor/accounts/home"
)

// testSpec names paths with a space, a quote, a percent sign and an
// ampersand: each file format must carry them through intact.
var testSpec = serviceSpec{
	Binary:  "/opt/rotor 1/bin/rotor",
	Home:    `/home/ann/my "rotor" 100%&co`,
	Secrets: "file",
	File:    "/home/ann/.config/systemd/user/rotor.service",
	LogDir:  "/home/ann/Library/Logs/rotor",
	Label:   serviceLabel,
	UID:     501,
}

func TestServiceSystemdUnitText(t *testing.T) {
	t.Parallel()
	got := systemdKind.render(testSpec)
	want := `[Unit]
Description=rotor: one OpenAI-compatible proxy over a pool of accounts, on loopback
Documentation=https://github.com/rotorproxy/rotor
After=network-online.target

[Service]
Type=simple
ExecStart="/opt/rotor 1/bin/rotor" serve --stable-key
Environment="ROTOR_HOME=/home/ann/my \"rotor\" 100%%&co"
Environment="ROTOR_SECRETS=file"
Restart=on-failure
RestartSec=5

[Install]
WantedBy=default.target
`
	if string(got) != want {
		t.Errorf("unit:\n%s\nwant:\n%s", got, want)
	}
	plain := testSpec
	plain.Secrets = ""
	if got := systemdKind.render(plain); strings.Contains(string(got), "ROTOR_SECRETS") {
		t.Errorf("ROTOR_SECRETS named though unset:\n%s", got)
	}
}

func TestServiceLaunchdPlistText(t *testing.T) {
	t.Parallel()
	got := launchdKind.render(testSpec)
	text := string(got)
	wellFormed(t, text)
	for _, want := range []string{
		"<key>Label</key>\n\t<string>com.github.rotorproxy.rotor</string>",
		"<array>\n\t\t<string>/opt/rotor 1/bin/rotor</string>\n\t\t<string>serve</string>\n\t\t<string>--stable-key</string>\n\t</array>",
		"<key>ROTOR_HOME</key>\n\t\t<string>/home/ann/my &#34;rotor&#34; 100%&amp;co</string>",
		"<key>RunAtLoad</key>\n\t<true/>",
		"<key>KeepAlive</key>\n\t<dict>\n\t\t<key>SuccessfulExit</key>\n\t\t<false/>\n\t</dict>",
		"<key>StandardOutPath</key>\n\t<string>/home/ann/Library/Logs/rotor/serve.log</string>",
		"<key>StandardErrorPath</key>\n\t<string>/home/ann/Library/Logs/rotor/serve.log</string>",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("plist lacks %q:\n%s", want, text)
		}
	}
}

func TestServiceWindowsTaskText(t *testing.T) {
	t.Parallel()
	spec := testSpec
	spec.Binary, spec.Home, spec.LogDir = `C:\Program Files\rotor\rotor.exe`, `C:\Users\ann\AppData\Roaming\rotor & co`, `C:\Users\ann\AppData\Local\rotor\logs`
	raw := schtasksKind.render(spec)
	if len(raw) < 2 || raw[0] != 0xff || raw[1] != 0xfe || len(raw)%2 != 0 {
		t.Fatalf("the task definition is not UTF-16LE with a BOM: % x", raw[:min(len(raw), 8)])
	}
	units := make([]uint16, 0, len(raw)/2-1)
	for i := 2; i < len(raw); i += 2 {
		units = append(units, uint16(raw[i])|uint16(raw[i+1])<<8)
	}
	text := string(utf16.Decode(units))
	wellFormed(t, text)
	for _, want := range []string{
		`<?xml version="1.0" encoding="UTF-16"?>`,
		"<LogonTrigger>\n      <Enabled>true</Enabled>\n    </LogonTrigger>",
		"<RestartOnFailure>\n      <Interval>PT1M</Interval>\n      <Count>999</Count>\n    </RestartOnFailure>",
		"<ExecutionTimeLimit>PT0S</ExecutionTimeLimit>",
		"<Command>cmd.exe</Command>",
		`<Arguments>/d /s /c &#34;set &#34;ROTOR_HOME=C:\Users\ann\AppData\Roaming\rotor &amp; co&#34; &amp;&amp; set &#34;ROTOR_SECRETS=file&#34; &amp;&amp; &#34;C:\Program Files\rotor\rotor.exe&#34; serve --stable-key &gt;&gt; &#34;` +
			filepath.Join(spec.LogDir, "serve.log") + `&#34; 2&gt;&amp;1&#34;</Arguments>`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("task lacks %q:\n%s", want, text)
		}
	}
}

// wellFormed fails the test unless text parses as XML to its end.
func wellFormed(t *testing.T, text string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(text))
	d.CharsetReader = func(_ string, r io.Reader) (io.Reader, error) { return r, nil } // already decoded
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, text)
		}
	}
}

// fakeHost poses as goos, with fixed answers from its tools, and keeps
// every tool call.
type fakeHost struct {
	calls   []string
	running bool
}

func (f *fakeHost) host(goos, bin string) *serviceHost {
	return &serviceHost{goos: goos, uid: 501, executable: func() (string, error) { return bin, nil },
		run: func(args []string) ([]byte, error) {
			f.calls = append(f.calls, strings.Join(args, " "))
			if !f.running && hasAny(args, "is-active", "print", "/Query") {
				return []byte("inactive"), errors.New("exit status 3")
			}
			if hasAny(args, "print") {
				return []byte("state = running"), nil
			}
			if hasAny(args, "/Query") {
				return []byte(`"rotor","N/A","Running"`), nil
			}
			return nil, nil
		}}
}

// hasAny reports whether args holds any of words.
func hasAny(args []string, words ...string) bool {
	for _, a := range args {
		for _, w := range words {
			if a == w {
				return true
			}
		}
	}
	return false
}

// Each OS's service, in-process against a fake of its tools: install
// writes the definition and runs the OS's calls, status reads them back,
// uninstall undoes both; no call names the key.
func TestServiceEachOS(t *testing.T) {
	t.Parallel()
	for goos, wantInstall := range map[string][]string{
		"linux": {"systemctl --user daemon-reload", "systemctl --user enable rotor.service", "systemctl --user restart rotor.service"},
		"darwin": {"launchctl bootout gui/501/com.github.rotorproxy.rotor", "launchctl enable gui/501/com.github.rotorproxy.rotor",
			"launchctl bootstrap gui/501 {file}"},
		"windows": {"schtasks /Create /TN rotor /XML {file} /F", "schtasks /End /TN rotor", "schtasks /Run /TN rotor"},
	} {
		t.Run(goos, func(t *testing.T) {
			t.Parallel()
			h := newHome(t)
			h.setenv("LOCALAPPDATA", filepath.Join(t.TempDir(), "local"))
			bin := filepath.Join(t.TempDir(), "rotor")
			os.WriteFile(bin, nil, 0o755)
			fake := &fakeHost{running: true}
			h.host = fake.host(goos, bin)
			h.ok("", "service", "install")
			key := strings.TrimSpace(h.ok("", "key").stdout)
			st := jsonObject(t, h.ok("", "service", "status", "--json").stdout)
			file, _ := st["file"].(string)
			for i := range wantInstall {
				wantInstall[i] = strings.ReplaceAll(wantInstall[i], "{file}", file)
			}
			if got := fake.calls[:len(wantInstall)]; fmt.Sprint(got) != fmt.Sprint(wantInstall) {
				t.Errorf("install ran %q, want %q", got, wantInstall)
			}
			data, err := os.ReadFile(file)
			if err != nil || !strings.Contains(string(data), "serve") && goos != "windows" || strings.Contains(string(data), key) {
				t.Errorf("%s: %v\n%s", file, err, data)
			}
			checkMode(t, file, 0o644)
			if st["installed"] != true || st["running"] != true || st["command"] != "service status" || st["url"] != nil {
				t.Errorf("status %v", st)
			}
			h.ok("", "service", "uninstall")
			if _, err := os.Stat(file); !os.IsNotExist(err) {
				t.Errorf("uninstall left %s", file)
			}
			for _, c := range fake.calls {
				if strings.Contains(c, key) {
					t.Errorf("a tool call names the key: %s", c)
				}
			}
		})
	}
}

// On an OS it has no service kind for, every verb refuses, naming the OS
// and what to do instead, and writes nothing.
func TestServiceRefusesUnknownOS(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	fake := &fakeHost{}
	h.host = fake.host("plan9", "/bin/rotor")
	for _, verb := range []string{"install", "uninstall", "status"} {
		r := h.run("", "service", verb)
		if r.code != 1 || !strings.Contains(r.stderr, "plan9") || !strings.Contains(r.stderr, "rotor serve --stable-key") {
			t.Errorf("service %s on plan9: %v", verb, r)
		}
	}
	if len(fake.calls) != 0 {
		t.Errorf("tools ran: %q", fake.calls)
	}
	if r := h.run("", "service", "start"); r.code != 1 || !strings.Contains(r.stderr, "Usage: rotor service install|uninstall|status") {
		t.Errorf("service start: %v", r)
	}
}

// getenv is one variable of the environment rotor runs with.
func (h *cliHome) getenv(key string) string {
	for _, kv := range h.env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// fakeSystemctl writes a systemctl that appends its argv to log, one call
// a line, and answers is-active as a user manager would: active after
// restart, inactive after disable --now.
func fakeSystemctl(t *testing.T, dir, log string) {
	t.Helper()
	script := fmt.Sprintf(`#!/bin/sh
printf '%%s\n' "$*" >> '%[1]s'
case "$*" in
*" restart rotor.service") : > '%[1]s.active' ;;
*" disable --now rotor.service") rm -f '%[1]s.active' ;;
*" is-active rotor.service") if [ -e '%[1]s.active' ]; then echo active; else echo inactive; exit 3; fi ;;
esac
`, log)
	if err := os.WriteFile(filepath.Join(dir, "systemctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// The Linux path end to end: the real binary against a fake systemctl
// first on PATH. install writes a 0644 unit naming the binary and
// ROTOR_HOME, makes the 0600 key in a 0700 home and starts the unit;
// status reads it back; uninstall stops, disables and removes it. The key
// is in no file, argv or output but rotor key's.
func TestServiceLinuxEndToEnd(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the systemd path runs on Linux")
	}
	t.Parallel()
	h := newHome(t)
	bin := t.TempDir()
	log := filepath.Join(bin, "calls")
	fakeSystemctl(t, bin, log)
	h.setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	run := func(args ...string) string {
		t.Helper()
		cmd, stdout, stderr := h.command(t.Context(), "", args...)
		if err := cmd.Run(); err != nil {
			t.Fatalf("rotor %s: %v\n%s%s", strings.Join(args, " "), err, stdout, stderr)
		}
		return stdout.String() + stderr.String()
	}
	out := run("service", "install")
	unit := filepath.Join(h.getenv("HOME"), ".config", "systemd", "user", "rotor.service")
	out += run("service", "install") // idempotent: rewrites and restarts
	key := strings.TrimSpace(run("key"))
	data, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(rotorBin)
	for _, want := range []string{"ExecStart=" + systemdQuote(real) + " serve --stable-key\n",
		"Environment=" + systemdQuote("ROTOR_HOME="+h.dir) + "\n", "Restart=on-failure\n"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("unit lacks %q:\n%s", want, data)
		}
	}
	checkMode(t, unit, 0o644)
	checkMode(t, h.dir, 0o700)
	checkMode(t, h.path(home.ClientKeyFile), 0o600)
	status := run("service", "status")
	for _, want := range []string{"installed: yes", "running:   yes", "logs:      journalctl --user -u rotor"} {
		if !strings.Contains(status, want) {
			t.Errorf("status lacks %q:\n%s", want, status)
		}
	}
	out += status + run("service", "uninstall")
	if _, err := os.Stat(unit); !os.IsNotExist(err) {
		t.Error("uninstall left the unit")
	}
	if status := run("service", "status"); !strings.Contains(status, "installed: no") || !strings.Contains(status, "running:   no") {
		t.Errorf("status after uninstall:\n%s", status)
	}
	calls, _ := os.ReadFile(log)
	want := strings.Repeat("--user daemon-reload\n--user enable rotor.service\n--user restart rotor.service\n", 2) +
		"--user is-active rotor.service\n--user disable --now rotor.service\n--user daemon-reload\n"
	if string(calls) != want {
		t.Errorf("systemctl calls:\n%s\nwant:\n%s", calls, want)
	}
	for what, text := range map[string]string{"unit": string(data), "systemctl argv": string(calls), "output": out} {
		if strings.Contains(text, key) {
			t.Errorf("the key is in the %s", what)
		}
	}
}
