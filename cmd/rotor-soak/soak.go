package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tidwall/gjson"

	"github.com/rotorproxy/rotor/accounts/home"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// Config is one soak run.
type Config struct {
	Rotor    string        // the rotor binary
	Testdata string        // the fixtures folder
	Duration time.Duration // how long the load runs
	Streams  int           // concurrent clients
}

func defaultConfig() Config {
	return Config{Rotor: "bin/rotor", Testdata: "testdata", Duration: 60 * time.Second, Streams: 1000}
}

const (
	clientKey   = "soak-client-key-0123456789abcdef0123456789"
	healthyN    = 3
	faultyN     = 2 // with the dead account, fewer than --max-attempts (4): a healthy one is always reached
	stallLimit  = 2 * time.Second
	answerLimit = 3 * time.Second
)

// faults are what a faulty account may do at any moment.
var faults = []upstreamtest.Behavior{
	{Status: 429, ResetIn: 3 * time.Second},
	{Status: 401},
	{Status: 500},
	{Status: 503},
	{ResetAfter: 3},
	{ResetAfter: 1},
	{CloseAfter: 3},
	{CloseAfter: 1},
	{StallAfter: 2},
	{StallAfter: 6},
	{HangHeaders: true},
	{HeaderDelay: 500 * time.Millisecond},
	{Stream: "failed_overloaded.sse"},
	{},
}

// Summary is what a run found.
type Summary struct {
	Duration    time.Duration
	Requests    int64
	Outcomes    map[string]int64
	Lost        int64    // rotor answered an error although a healthy account could serve
	LostSamples []string // a few of them, for the reader
	WrongMarks  []string // healthy accounts marked or charged
	Files       []string // files in ROTOR_HOME that no longer load
	FDStart     int
	FDEnd       int
	RSSStartKB  int
	RSSEndKB    int
	PeakRSSKB   int
}

// OK reports whether every invariant held.
func (s *Summary) OK() bool {
	return s.Lost == 0 && len(s.WrongMarks) == 0 && len(s.Files) == 0 && s.Requests > 0
}

// Print writes the summary for a person.
func (s *Summary) Print(w io.Writer) {
	fmt.Fprintf(w, "rotor soak: %d requests in %s\n", s.Requests, s.Duration.Round(time.Second))
	keys := make([]string, 0, len(s.Outcomes))
	for k := range s.Outcomes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %-48s %d\n", k, s.Outcomes[k])
	}
	fmt.Fprintf(w, "lost before the first byte: %d (must be 0)\n", s.Lost)
	for _, l := range s.LostSamples {
		fmt.Fprintf(w, "  %s\n", l)
	}
	fmt.Fprintf(w, "healthy accounts wrongly marked: %d (must be 0)\n", len(s.WrongMarks))
	for _, m := range s.WrongMarks {
		fmt.Fprintf(w, "  %s\n", m)
	}
	fmt.Fprintf(w, "serve file descriptors: %d at start, %d at end\n", s.FDStart, s.FDEnd)
	fmt.Fprintf(w, "serve RSS: %d MB at start, %d MB at end, %d MB peak\n", s.RSSStartKB>>10, s.RSSEndKB>>10, s.PeakRSSKB>>10)
	if len(s.Files) == 0 {
		fmt.Fprintln(w, "ROTOR_HOME: every file loads")
	} else {
		fmt.Fprintf(w, "ROTOR_HOME: %d files do not load\n", len(s.Files))
		for _, f := range s.Files {
			fmt.Fprintf(w, "  %s\n", f)
		}
	}
	if s.OK() {
		fmt.Fprintln(w, "PASS")
	} else {
		fmt.Fprintln(w, "FAIL")
	}
}

// soak is one run in progress.
type soak struct {
	cfg  Config
	env  []string
	home string
	up   *upstreamtest.Server

	mu       sync.Mutex
	outcomes map[string]int64
	lost     []string
	nLost    atomic.Int64
	requests atomic.Int64
	serveB   atomic.Pointer[string] // URL of the serve that gets killed
}

// Run sets up the home and the fake upstream, drives the load until
// cfg.Duration has passed or ctx ends, and checks the invariants.
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	bin, err := filepath.Abs(cfg.Rotor)
	if err != nil {
		return nil, err
	}
	cfg.Rotor = bin
	tmp, err := os.MkdirTemp("", "rotor-soak-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	s := &soak{cfg: cfg, home: filepath.Join(tmp, "home"), outcomes: map[string]int64{}}
	// The upstream is served over TLS, as every real one is, with a
	// certificate the serves are told to trust.
	s.up = upstreamtest.New(cfg.Testdata)
	if err := s.up.StartTLS("127.0.0.1:0"); err != nil {
		return nil, err
	}
	defer s.up.Close()
	ca := filepath.Join(tmp, "upstream-ca.pem")
	if err := os.WriteFile(ca, s.up.CertPEM(), 0o600); err != nil {
		return nil, err
	}
	// Healthy accounts always answer, slowly enough that the streams
	// overlap; faulty ones are changed at random below.
	s.up.SetDefault(upstreamtest.Behavior{EventDelay: 100 * time.Millisecond})
	port := strings.TrimPrefix(s.up.URL(), "https://127.0.0.1:")
	s.env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + tmp, "TMPDIR=" + os.TempDir(), "NO_COLOR=1",
		"ROTOR_HOME=" + s.home, "ROTOR_SECRETS=file", "ROTOR_CLIENT_KEY=" + clientKey,
		"ROTOR_OPENAI_BASE_URL=https://localhost:" + port + "/v1", "SSL_CERT_FILE=" + ca,
	}
	healthy, faulty, err := s.addAccounts()
	if err != nil {
		return nil, err
	}

	a, err := s.serve(ctx)
	if err != nil {
		return nil, err
	}
	defer a.kill()
	sum := &Summary{Duration: cfg.Duration}
	sum.FDStart, sum.RSSStartKB, _ = procStats(a.cmd.Process.Pid)

	deadline := time.Now().Add(cfg.Duration)
	runCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var bg sync.WaitGroup
	bg.Add(3)
	go func() { defer bg.Done(); s.injectFaults(runCtx, faulty) }()
	go func() { defer bg.Done(); s.movePins(runCtx, healthy) }()
	go func() { defer bg.Done(); s.killAndRestart(runCtx) }()
	peak := s.load(runCtx, a.url, a.cmd.Process.Pid)
	cancel()
	bg.Wait()

	sum.FDEnd, sum.RSSEndKB, sum.PeakRSSKB = procStats(a.cmd.Process.Pid)
	sum.PeakRSSKB = max(sum.PeakRSSKB, peak)
	sum.Requests = s.requests.Load()
	sum.Outcomes = s.outcomes
	sum.Lost = s.nLost.Load()
	sum.LostSamples = s.lost
	sum.WrongMarks = s.checkMarks(healthy)
	if err := a.stop(); err != nil {
		sum.Files = append(sum.Files, "serve did not stop cleanly: "+err.Error())
	}
	sum.Files = append(sum.Files, s.checkFiles(healthy)...)
	return sum, nil
}

// addAccounts adds the pool through the real CLI and returns the 1-based
// indexes of the healthy accounts and the keys of the faulty ones.
func (s *soak) addAccounts() (healthy []int, faulty []string, err error) {
	port := strings.TrimPrefix(s.up.URL(), "https://127.0.0.1:")
	dead, err := closedPort()
	if err != nil {
		return nil, nil, err
	}
	add := func(label, key, base string) error {
		args := []string{"add-key", "--label", label}
		if base != "" {
			args = append(args, "--base-url", base)
		}
		_, err := s.rotor(key, args...)
		return err
	}
	for i := range healthyN {
		if err := add(fmt.Sprintf("healthy-%d", i+1), fmt.Sprintf("sk-soak-healthy-%d", i+1), ""); err != nil {
			return nil, nil, err
		}
		healthy = append(healthy, i+1)
	}
	for i := range faultyN {
		key := fmt.Sprintf("sk-soak-faulty-%d", i+1)
		if err := add(fmt.Sprintf("faulty-%d", i+1), key, "https://127.0.0.1:"+port+"/v1"); err != nil {
			return nil, nil, err
		}
		faulty = append(faulty, key)
	}
	return healthy, faulty, add("dead", "sk-soak-dead", "https://"+dead+"/v1")
}

// rotor runs one CLI command to completion.
func (s *soak) rotor(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.cfg.Rotor, args...)
	cmd.Env = s.env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("rotor %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// serveProc is a running `rotor serve`.
type serveProc struct {
	cmd    *exec.Cmd
	url    string
	exited chan error
}

func (s *soak) serve(ctx context.Context) (*serveProc, error) {
	cmd := exec.Command(s.cfg.Rotor, "serve", "--port", "0", "--log-format", "json",
		"--stall-timeout", stallLimit.String(), "--response-timeout", answerLimit.String())
	cmd.Env = s.env
	cmd.Stderr = io.Discard
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &serveProc{cmd: cmd, exited: make(chan error, 1)}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "rotor proxy listening on "); ok {
				urls <- strings.TrimSpace(u)
			}
		}
		io.Copy(io.Discard, out)
		p.exited <- cmd.Wait()
	}()
	select {
	case p.url = <-urls:
		return p, nil
	case err := <-p.exited:
		return nil, fmt.Errorf("rotor serve exited at start: %v", err)
	case <-time.After(20 * time.Second):
		p.kill()
		return nil, errors.New("rotor serve printed no URL within 20s")
	case <-ctx.Done():
		p.kill()
		return nil, ctx.Err()
	}
}

func (p *serveProc) kill() {
	p.cmd.Process.Kill()
}

// stop ends a serve with SIGTERM, which must drain and exit 0.
func (p *serveProc) stop() error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		return err
	case <-time.After(40 * time.Second):
		p.kill()
		return errors.New("no exit within 40s of SIGTERM")
	}
}

// injectFaults changes what each faulty account does, at random, twice a
// second.
func (s *soak) injectFaults(ctx context.Context, keys []string) {
	for tick := time.NewTicker(500 * time.Millisecond); ; {
		for _, k := range keys {
			s.up.Set(k, faults[rand.IntN(len(faults))])
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// movePins pins a healthy account and unpins again, in turn.
func (s *soak) movePins(ctx context.Context, healthy []int) {
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			s.rotor("", "unpin")
			return
		case <-time.After(2 * time.Second):
		}
		if i%2 == 0 {
			s.rotor("", "switch", strconv.Itoa(healthy[rand.IntN(len(healthy))]))
		} else {
			s.rotor("", "unpin")
		}
	}
}

// killAndRestart keeps a second serve on the home and kills it with
// SIGKILL every few seconds: whatever it was writing must not hurt.
func (s *soak) killAndRestart(ctx context.Context) {
	for ctx.Err() == nil {
		b, err := s.serve(ctx)
		if err != nil {
			return
		}
		s.serveB.Store(&b.url)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(2000+rand.IntN(2000)) * time.Millisecond):
		}
		s.serveB.Store(nil)
		b.kill()
		<-b.exited
	}
}

// load runs the clients until ctx ends and returns the serve's peak RSS.
func (s *soak) load(ctx context.Context, url string, pid int) int {
	tr := &http.Transport{MaxConnsPerHost: s.cfg.Streams + 16, MaxIdleConnsPerHost: s.cfg.Streams + 16, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	for range s.cfg.Streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				s.one(ctx, client, url)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	peak := 0
	for {
		select {
		case <-done:
			return peak
		case <-time.After(500 * time.Millisecond):
			_, _, hwm := procStats(pid)
			peak = max(peak, hwm)
		}
	}
}

// one sends a request of a random kind and records its outcome.
func (s *soak) one(ctx context.Context, client *http.Client, urlA string) {
	// One request in ten goes to the serve that gets killed, one in ten
	// is not streamed, one in five is aborted after its first byte.
	kind := rand.IntN(10)
	target, viaB := urlA, false
	if p := s.serveB.Load(); p != nil && kind == 3 {
		target, viaB = *p, true
	}
	stream, abort := kind != 0, kind >= 8
	body := `{"model":"gpt-5","input":"hi","stream":` + strconv.FormatBool(stream) + `}`
	req, _ := http.NewRequestWithContext(ctx, "POST", target+"/responses", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+clientKey)
	req.Header.Set("Content-Type", "application/json")
	s.requests.Add(1)
	resp, err := client.Do(req)
	switch {
	case err != nil && ctx.Err() != nil:
		s.count("cut by the end of the run")
		return
	case err != nil && viaB:
		s.count("transport error on the serve killed with SIGKILL")
		return
	case err != nil:
		s.loss(fmt.Sprintf("transport error: %v", err))
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		code := gjson.GetBytes(b, "error.code").String()
		s.loss(fmt.Sprintf("%d %s: %.200s", resp.StatusCode, code, gjson.GetBytes(b, "error.message").String()))
		return
	}
	if abort {
		io.ReadAtLeast(resp.Body, make([]byte, 1), 1)
		s.count("200, aborted by the client")
		return
	}
	b, err := io.ReadAll(resp.Body)
	switch {
	case ctx.Err() != nil:
		s.count("cut by the end of the run")
	case !stream && err == nil && gjson.GetBytes(b, "status").String() == "completed":
		s.count("200 completed (not streamed)")
	case stream && err == nil && bytes.Contains(b, []byte("event: response.completed")):
		s.count("200 completed (streamed)")
	default:
		// Past the first byte a faulty account's break reaches the
		// client: allowed, and charged to that account (checked below).
		s.count("200, broken after the first byte")
	}
}

func (s *soak) count(outcome string) {
	s.mu.Lock()
	s.outcomes[outcome]++
	s.mu.Unlock()
}

func (s *soak) loss(what string) {
	s.nLost.Add(1)
	s.mu.Lock()
	s.outcomes["lost: "+strings.SplitN(what, ":", 2)[0]]++
	if len(s.lost) < 5 {
		s.lost = append(s.lost, what)
	}
	s.mu.Unlock()
}

// checkMarks lists the healthy accounts that rotor marked or charged.
func (s *soak) checkMarks(healthy []int) []string {
	var bad []string
	out, err := s.rotor("", "rotation", "status", "--json")
	if err != nil {
		return []string{err.Error()}
	}
	for _, a := range gjson.Get(out, "accounts").Array() {
		if i := int(a.Get("index").Int()); slices.Contains(healthy, i) && a.Get("state").String() != "available" {
			bad = append(bad, fmt.Sprintf("account %d is %s (%s)", i, a.Get("state").String(), a.Get("reason").String()))
		}
	}
	out, err = s.rotor("", "list", "--json")
	if err != nil {
		return append(bad, err.Error())
	}
	ids := map[string]int{}
	for _, a := range gjson.Get(out, "accounts").Array() {
		i := int(a.Get("index").Int())
		if slices.Contains(healthy, i) {
			ids[a.Get("id").String()] = i
			if f := a.Get("flagged_reason"); f.Exists() && f.Type != gjson.Null {
				bad = append(bad, fmt.Sprintf("account %d is flagged %s", i, f.String()))
			}
		}
	}
	// A healthy account's stream never breaks: none is charged with one.
	s.eachUsage(func(line []byte) {
		if i, ok := ids[gjson.GetBytes(line, "account_id").String()]; ok && gjson.GetBytes(line, "code").String() == "stream_interrupted" {
			bad = append(bad, fmt.Sprintf("account %d charged with a broken stream (%s)", i, gjson.GetBytes(line, "request_id").String()))
		}
	})
	return bad
}

// eachUsage calls fn for every line of usage.jsonl and its rotated copy.
func (s *soak) eachUsage(fn func(line []byte)) {
	for _, name := range []string{home.UsageOldFile, home.UsageFile} {
		data, err := os.ReadFile(filepath.Join(s.home, name))
		if err != nil {
			continue
		}
		for line := range bytes.SplitSeq(data, []byte("\n")) {
			if len(line) > 0 {
				fn(line)
			}
		}
	}
}

// checkFiles lists the files in ROTOR_HOME that no longer load.
func (s *soak) checkFiles(healthy []int) []string {
	var bad []string
	out, err := s.rotor("", "list", "--json")
	if err != nil || len(gjson.Get(out, "accounts").Array()) != healthyN+faultyN+1 {
		bad = append(bad, fmt.Sprintf("accounts.json: rotor list --json: %v %.200s", err, out))
	}
	if data, err := os.ReadFile(filepath.Join(s.home, home.StateFile)); err != nil || !json.Valid(data) {
		bad = append(bad, fmt.Sprintf("state.json: %v", err))
	}
	torn := 0
	s.eachUsage(func(line []byte) {
		if !json.Valid(line) {
			torn++
		}
	})
	if torn > 0 {
		bad = append(bad, fmt.Sprintf("usage.jsonl: %d lines are not JSON", torn))
	}
	return bad
}

// procStats reads a process's open descriptors, resident and peak
// resident memory (kB) from /proc; zeros where /proc is not there.
func procStats(pid int) (fds, rssKB, hwmKB int) {
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		fds = len(ents)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return fds, 0, 0
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			switch f[0] {
			case "VmRSS:":
				rssKB, _ = strconv.Atoi(f[1])
			case "VmHWM:":
				hwmKB, _ = strconv.Atoi(f[1])
			}
		}
	}
	return fds, rssKB, hwmKB
}

// closedPort returns a loopback address nothing listens on.
func closedPort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr, nil
}
