package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/rotorproxy/rotor/accounts/home"
	rerr "github.com/rotorproxy/rotor/errors"
	"github.com/rotorproxy/rotor/rotation"
)

// serviceHost is what "rotor service" needs of the machine, injected so
// that tests pose as any OS and see every OS tool call.
type serviceHost struct {
	goos string
	uid  int
	// executable is the running rotor binary's path.
	executable func() (string, error)
	// run runs an OS tool (systemctl, launchctl, schtasks) to its end and
	// returns its combined output.
	run func(args []string) ([]byte, error)
}

// toolTimeout bounds one OS tool call: a systemctl waiting on a hung
// user manager must not hang rotor with it.
const toolTimeout = 30 * time.Second

// systemHost is this machine, its tools found on PATH.
func systemHost() *serviceHost {
	return &serviceHost{goos: runtime.GOOS, uid: os.Getuid(), executable: os.Executable,
		run: func(args []string) ([]byte, error) {
			ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
			defer cancel()
			return exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
		}}
}

func (a *app) serviceHost() *serviceHost {
	if a.host == nil {
		return systemHost()
	}
	return a.host
}

func cmdService(a *app, args []string) error {
	fs := a.flags()
	asJSON := fs.Bool("json", false, "print status as JSON")
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	verbs := map[string]func(*app, *serviceHost, serviceKind, serviceSpec) error{
		"install": serviceInstall, "uninstall": serviceUninstall,
		"status": func(a *app, h *serviceHost, k serviceKind, s serviceSpec) error {
			return serviceStatus(a, h, k, s, *asJSON)
		},
	}
	if len(pos) != 1 || verbs[pos[0]] == nil {
		return rerr.Validation("args", "Usage: rotor "+commands["service"].usage)
	}
	h := a.serviceHost()
	kind, ok := serviceKinds[h.goos]
	if !ok {
		return rerr.Validation("os", fmt.Sprintf("rotor service does not know how to run at login on %s: it knows systemd (linux), launchd (darwin) and the Task Scheduler (windows). Run \"rotor serve --stable-key\" from your own startup script instead.", h.goos))
	}
	spec, err := a.serviceSpec(h, kind)
	if err != nil {
		return err
	}
	return verbs[pos[0]](a, h, kind, spec)
}

// serviceSpec gathers the absolute paths the service definition names.
func (a *app) serviceSpec(h *serviceHost, kind serviceKind) (serviceSpec, error) {
	bin, err := h.executable()
	if err == nil {
		bin, err = filepath.EvalSymlinks(bin) // a package manager's symlink may move; its target is the binary
	}
	if err == nil {
		bin, err = filepath.Abs(bin)
	}
	if err != nil {
		return serviceSpec{}, fmt.Errorf("cannot find the rotor binary's path: %w", err)
	}
	dir, err := a.home()
	if err == nil {
		dir, err = filepath.Abs(dir)
	}
	if err != nil {
		return serviceSpec{}, err
	}
	file, logDir := kind.paths(a.getenv)
	credits := a.getenv("ROTOR_CREDITS")
	if _, err := rotation.ParseCreditsPolicy(credits); err != nil {
		return serviceSpec{}, rerr.Validation("ROTOR_CREDITS", "ROTOR_CREDITS: "+err.Error())
	}
	return serviceSpec{Binary: bin, Home: dir, Secrets: a.getenv("ROTOR_SECRETS"), Credits: credits, File: file, LogDir: logDir,
		Label: serviceLabel, UID: h.uid}, nil
}

// render is the service definition for s, as the file's bytes.
func (k serviceKind) render(s serviceSpec) []byte {
	if k.encode != nil {
		return k.encode(k.text(s))
	}
	return []byte(k.text(s))
}

// serviceInstall makes the stable key, writes the definition (again, when
// installed: it is idempotent) and has the OS start the serve now and at
// every login.
func serviceInstall(a *app, h *serviceHost, kind serviceKind, s serviceSpec) error {
	_, sec, err := a.storeAndSecrets() // ROTOR_HOME, 0700
	if err != nil {
		return err
	}
	if _, err := sec.ClientKey(); err != nil {
		return err
	}
	data := kind.render(s)
	if err := os.MkdirAll(filepath.Dir(s.File), 0o755); err != nil {
		return err
	}
	if s.LogDir != "" {
		if err := os.MkdirAll(s.LogDir, 0o700); err != nil {
			return err
		}
	}
	// The definition holds no secret, and the OS's service manager must
	// read it: 0644, as they ship.
	if err := home.WriteFileMode(s.File, data, 0o644); err != nil {
		return err
	}
	if err := runTools(a, h, kind.install(s)); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "Installed the %s %s: rotor serve --stable-key runs now and at every login.\n", kind.what, s.File)
	fmt.Fprintf(a.stdout, "Clients: OPENAI_BASE_URL=http://127.0.0.1:%d/v1, and the key \"rotor key\" prints.\n", home.DefaultPort)
	fmt.Fprintf(a.stdout, "Logs: %s\n", kind.logs(s))
	return nil
}

// serviceUninstall stops and unregisters the service and removes its
// definition. Stopping what does not run is not a failure: uninstall
// twice is fine.
func serviceUninstall(a *app, h *serviceHost, kind serviceKind, s serviceSpec) error {
	if err := runTools(a, h, kind.uninstall(s)); err != nil {
		return err
	}
	err := os.Remove(s.File)
	switch {
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(a.stdout, "No %s was installed (%s does not exist).\n", kind.what, s.File)
	case err != nil:
		return err
	default:
		fmt.Fprintf(a.stdout, "Removed the %s %s; rotor serve no longer runs at login.\n", kind.what, s.File)
	}
	return runTools(a, h, kind.forget(s))
}

// runTools runs calls in order. A call that may fail only warns; any
// other failure stops, naming the command and what it said.
func runTools(a *app, h *serviceHost, calls []toolCall) error {
	for _, c := range calls {
		out, err := h.run(c.args)
		if err == nil || c.mayFail {
			continue
		}
		said := strings.Join(strings.Fields(string(out)), " ")
		return fmt.Errorf("%s failed: %v%s", strings.Join(c.args, " "), err, orNothing(": ", said))
	}
	return nil
}

// orNothing is prefix+s, or "" when s is.
func orNothing(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// serviceState is rotor service status's answer.
type serviceState struct {
	Kind      string  `json:"kind"`
	File      string  `json:"file"`
	Installed bool    `json:"installed"`
	Running   bool    `json:"running"`
	URL       *string `json:"url"`
	Logs      string  `json:"logs"`
}

// serviceStatus says whether the service is installed and running, the
// URL of the serve running on this home, and where the logs are.
func serviceStatus(a *app, h *serviceHost, kind serviceKind, s serviceSpec, asJSON bool) error {
	st := serviceState{Kind: kind.name, File: s.File, Logs: kind.logs(s)}
	if _, err := os.Stat(s.File); err == nil {
		st.Installed = true
		st.Running = kind.running(h.run(kind.query(s)))
	}
	if in, err := home.LiveInfo(s.Home); err == nil {
		st.URL = &in.URL
	}
	if asJSON {
		return a.exportJSON("service status", st)
	}
	yes := map[bool]string{true: "yes", false: "no"}
	url := "none (no rotor serve runs on " + s.Home + ")"
	if st.URL != nil {
		url = *st.URL
	}
	fmt.Fprintf(a.stdout, "installed: %s (%s %s)\n", yes[st.Installed], kind.what, s.File)
	fmt.Fprintf(a.stdout, "running:   %s\n", yes[st.Running])
	fmt.Fprintf(a.stdout, "url:       %s\n", url)
	fmt.Fprintf(a.stdout, "logs:      %s\n", st.Logs)
	return nil
}
