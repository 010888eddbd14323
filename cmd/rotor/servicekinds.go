package main

import (
	"encoding/xml"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf16"
)

// serviceSpec is what a service definition names: everything is absolute,
// because a login service starts with no shell, no PATH of the user's and
// no working directory. It never holds the client key: the serve reads
// the stable key from ROTOR_HOME or the keyring (docs/service.md).
type serviceSpec struct {
	Binary  string // the rotor binary, symlinks resolved
	Home    string // ROTOR_HOME
	Secrets string // ROTOR_SECRETS when set, so the service uses the CLI's backend
	Credits string // ROTOR_CREDITS when set, so the service spends credits as the user chose (docs/selection.md)
	File    string // the unit, plist or task definition
	LogDir  string // where the serve's output goes (macOS, Windows)
	Label   string // the launchd label / task name
	UID     int    // launchd's gui/<uid> domain
}

// environ is what a service sets for serve, in this order: ROTOR_HOME,
// then ROTOR_SECRETS and ROTOR_CREDITS when the CLI that installed it had
// them.
func (s serviceSpec) environ() [][2]string {
	env := [][2]string{{"ROTOR_HOME", s.Home}}
	if s.Secrets != "" {
		env = append(env, [2]string{"ROTOR_SECRETS", s.Secrets})
	}
	if s.Credits != "" {
		env = append(env, [2]string{"ROTOR_CREDITS", s.Credits})
	}
	return env
}

// toolCall is one run of an OS tool; mayFail marks a step whose failure
// only means there was nothing to undo (stopping a service not running).
type toolCall struct {
	args    []string
	mayFail bool
}

// serviceKind is how one OS runs rotor serve at login: where its
// definition lives, the text it writes there, and the OS tool calls that
// install, uninstall and query it.
type serviceKind struct {
	what  string // for people: "systemd user unit"
	name  string // for --json: "systemd"
	paths func(getenv func(string) string) (file, logDir string)
	// text is the definition for a spec. It is plain Go, not a
	// text/template: a template's reflection keeps every exported method
	// of every type in the binary, a quarter of rotor's code, which the
	// serve then maps (docs/PERFORMANCE.md).
	text func(s serviceSpec) string
	// encode turns the text into the file's bytes (Windows wants
	// UTF-16); nil writes it as it is.
	encode func(string) []byte
	// install runs after the file is written; uninstall before it is
	// removed and forget after.
	install, uninstall, forget func(s serviceSpec) []toolCall
	// query asks whether the service runs; running reads the answer.
	query   func(s serviceSpec) []string
	running func(out []byte, err error) bool
	logs    func(s serviceSpec) string
}

// serviceKinds are the OSes rotor service knows, by GOOS.
var serviceKinds = map[string]serviceKind{
	"linux":   systemdKind,
	"darwin":  launchdKind,
	"windows": schtasksKind,
}

// serviceLabel names the service to launchd and the Task Scheduler.
const serviceLabel = "com.github.rotorproxy.rotor"

// systemdQuote quotes s as one word of a unit file's ExecStart= or
// Environment=: backslashes and quotes escaped, % doubled (it starts a
// specifier), $ doubled (it starts a variable in ExecStart=).
func systemdQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "%", "%%", "$", "$$")
	return `"` + r.Replace(s) + `"`
}

// xmlEscape escapes s as XML character data.
func xmlEscape(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// userDir is the user's home as the OS's own tools see it.
func userDir(getenv func(string) string) string {
	if d := getenv("HOME"); d != "" {
		return d
	}
	return getenv("USERPROFILE")
}

// envDir is the directory the variable key names, else the one at under
// in the user's home, as the OS's own tools find it.
func envDir(getenv func(string) string, key string, under ...string) string {
	if d := getenv(key); d != "" {
		return d
	}
	return filepath.Join(append([]string{userDir(getenv)}, under...)...)
}

// systemctl is a systemctl --user call.
func systemctl(args ...string) []string { return append([]string{"systemctl", "--user"}, args...) }

const systemdUnit = "rotor.service"

var systemdKind = serviceKind{
	what: "systemd user unit",
	name: "systemd",
	paths: func(getenv func(string) string) (string, string) {
		cfg := envDir(getenv, "XDG_CONFIG_HOME", ".config")
		return filepath.Join(cfg, "systemd", "user", systemdUnit), ""
	},
	// Restart=on-failure: a crash (non-zero exit, a signal other than
	// the stop's SIGTERM) restarts; serve exits 0 on SIGTERM, so a stop
	// stays a stop.
	text: func(s serviceSpec) string {
		var env string
		for _, kv := range s.environ() {
			env += "Environment=" + systemdQuote(kv[0]+"="+kv[1]) + "\n"
		}
		return `[Unit]
Description=rotor: one OpenAI-compatible proxy over a pool of accounts, on loopback
Documentation=https://github.com/rotorproxy/rotor
After=network-online.target

[Service]
Type=simple
ExecStart=` + systemdQuote(s.Binary) + ` serve --stable-key
` + env + `Restart=on-failure
RestartSec=5

[Install]
WantedBy=default.target
`
	},
	install: func(serviceSpec) []toolCall {
		return []toolCall{{args: systemctl("daemon-reload")}, {args: systemctl("enable", systemdUnit)},
			{args: systemctl("restart", systemdUnit)}}
	},
	uninstall: func(serviceSpec) []toolCall {
		return []toolCall{{args: systemctl("disable", "--now", systemdUnit), mayFail: true}}
	},
	forget: func(serviceSpec) []toolCall {
		return []toolCall{{args: systemctl("daemon-reload"), mayFail: true}}
	},
	query:   func(serviceSpec) []string { return systemctl("is-active", systemdUnit) },
	running: func(_ []byte, err error) bool { return err == nil },
	logs:    func(serviceSpec) string { return "journalctl --user -u rotor" },
}

// launchdTarget is the service's name in the user's GUI domain.
func launchdTarget(s serviceSpec) string { return "gui/" + strconv.Itoa(s.UID) + "/" + s.Label }

var launchdKind = serviceKind{
	what: "launchd agent",
	name: "launchd",
	paths: func(getenv func(string) string) (string, string) {
		home := userDir(getenv)
		return filepath.Join(home, "Library", "LaunchAgents", serviceLabel+".plist"), filepath.Join(home, "Library", "Logs", "rotor")
	},
	// KeepAlive/SuccessfulExit=false: launchd starts serve again only
	// when it exits non-zero, so "launchctl bootout" (SIGTERM, exit 0)
	// stays a stop.
	text: func(s serviceSpec) string {
		var env string
		for _, kv := range s.environ() {
			env += "\t\t<key>" + kv[0] + "</key>\n\t\t<string>" + xmlEscape(kv[1]) + "</string>\n"
		}
		return `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
	<key>Label</key>
	<string>` + xmlEscape(s.Label) + `</string>
	<key>ProgramArguments</key>
	<array>
		<string>` + xmlEscape(s.Binary) + `</string>
		<string>serve</string>
		<string>--stable-key</string>
	</array>
	<key>EnvironmentVariables</key>
	<dict>
` + env + `	</dict>
	<key>RunAtLoad</key>
	<true/>
	<key>KeepAlive</key>
	<dict>
		<key>SuccessfulExit</key>
		<false/>
	</dict>
	<key>StandardOutPath</key>
	<string>` + xmlEscape(s.LogDir) + `/serve.log</string>
	<key>StandardErrorPath</key>
	<string>` + xmlEscape(s.LogDir) + `/serve.log</string>
</dict>
</plist>
`
	},
	install: func(s serviceSpec) []toolCall {
		return []toolCall{
			{args: []string{"launchctl", "bootout", launchdTarget(s)}, mayFail: true}, // an older copy, if loaded
			{args: []string{"launchctl", "enable", launchdTarget(s)}},
			{args: []string{"launchctl", "bootstrap", "gui/" + strconv.Itoa(s.UID), s.File}},
		}
	},
	uninstall: func(s serviceSpec) []toolCall {
		return []toolCall{{args: []string{"launchctl", "bootout", launchdTarget(s)}, mayFail: true}}
	},
	forget: func(serviceSpec) []toolCall { return nil },
	query:  func(s serviceSpec) []string { return []string{"launchctl", "print", launchdTarget(s)} },
	running: func(out []byte, err error) bool {
		return err == nil && strings.Contains(string(out), "state = running")
	},
	logs: func(s serviceSpec) string { return filepath.Join(s.LogDir, "serve.log") },
}

// schtasks is a call of the Task Scheduler's command-line tool on rotor's task.
func schtasks(verb string, args ...string) []string {
	return append([]string{"schtasks", verb, "/TN", "rotor"}, args...)
}

var schtasksKind = serviceKind{
	what: "logon task",
	name: "schtasks",
	paths: func(getenv func(string) string) (string, string) {
		local := envDir(getenv, "LOCALAPPDATA", "AppData", "Local")
		return filepath.Join(local, "rotor", "rotor-task.xml"), filepath.Join(local, "rotor", "logs")
	},
	// The action is cmd.exe (taskCommand), whose exit status is serve's,
	// which RestartOnFailure reads.
	text: func(s serviceSpec) string {
		return `<?xml version="1.0" encoding="UTF-16"?>
<Task version="1.2" xmlns="http://schemas.microsoft.com/windows/2004/02/mit/task">
  <RegistrationInfo>
    <Description>rotor serve --stable-key: one OpenAI-compatible proxy over a pool of accounts, on loopback</Description>
  </RegistrationInfo>
  <Triggers>
    <LogonTrigger>
      <Enabled>true</Enabled>
    </LogonTrigger>
  </Triggers>
  <Principals>
    <Principal id="Author">
      <LogonType>InteractiveToken</LogonType>
      <RunLevel>LeastPrivilege</RunLevel>
    </Principal>
  </Principals>
  <Settings>
    <MultipleInstancesPolicy>IgnoreNew</MultipleInstancesPolicy>
    <DisallowStartIfOnBatteries>false</DisallowStartIfOnBatteries>
    <StopIfGoingOnBatteries>false</StopIfGoingOnBatteries>
    <ExecutionTimeLimit>PT0S</ExecutionTimeLimit>
    <RestartOnFailure>
      <Interval>PT1M</Interval>
      <Count>999</Count>
    </RestartOnFailure>
    <Enabled>true</Enabled>
  </Settings>
  <Actions Context="Author">
    <Exec>
      <Command>cmd.exe</Command>
      <Arguments>` + xmlEscape(taskCommand(s)) + `</Arguments>
    </Exec>
  </Actions>
</Task>
`
	},
	encode: utf16LE,
	install: func(s serviceSpec) []toolCall {
		return []toolCall{{args: schtasks("/Create", "/XML", s.File, "/F")},
			{args: schtasks("/End"), mayFail: true}, {args: schtasks("/Run")}}
	},
	uninstall: func(serviceSpec) []toolCall {
		return []toolCall{{args: schtasks("/End"), mayFail: true}, {args: schtasks("/Delete", "/F"), mayFail: true}}
	},
	forget:  func(serviceSpec) []toolCall { return nil },
	query:   func(serviceSpec) []string { return schtasks("/Query", "/FO", "CSV", "/NH") },
	running: func(out []byte, err error) bool { return err == nil && strings.Contains(string(out), `"Running"`) },
	logs:    func(s serviceSpec) string { return filepath.Join(s.LogDir, "serve.log") },
}

// taskCommand is the logon task's cmd.exe command line. A task has no
// environment of its own, so cmd.exe sets ROTOR_HOME (and ROTOR_SECRETS)
// and appends serve's output to the log; with /s it runs what is inside
// the outer quotes as it is, paths with spaces included.
func taskCommand(s serviceSpec) string {
	var b strings.Builder
	b.WriteString(`/d /s /c "`)
	for i, kv := range s.environ() {
		if i > 0 {
			b.WriteString(" && ")
		}
		b.WriteString(`set "` + kv[0] + "=" + kv[1] + `"`)
	}
	b.WriteString(` && "` + s.Binary + `" serve --stable-key >> "` + filepath.Join(s.LogDir, "serve.log") + `" 2>&1"`)
	return b.String()
}

// utf16LE encodes s as UTF-16 little-endian with a byte-order mark: the
// Task Scheduler reads task definitions in UTF-16.
func utf16LE(s string) []byte {
	units := utf16.Encode([]rune(s))
	b := make([]byte, 0, 2+2*len(units))
	b = append(b, 0xff, 0xfe)
	for _, u := range units {
		b = append(b, byte(u), byte(u>>8))
	}
	return b
}
