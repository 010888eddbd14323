package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rotorproxy/rotor/proxy/dashboard"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

type config struct {
	rotor    string
	duration time.Duration
	rounds   int
	only     string
	// dashboard keeps a dashboard page's live stream open on rotor: what
	// it costs the request path shows as a difference between runs.
	dashboard bool
	// tls serves the upstream over TLS, as every real backend is: each
	// proxy then makes its own handshakes, with their cost in CPU and
	// memory. caFile is the certificate the run's processes trust
	// (SSL_CERT_FILE), roots the measuring client's pool of it.
	tls    bool
	caFile string
	roots  *x509.CertPool
	// before is another rotor binary (an earlier commit's) run as a
	// fifth peer, interleaved with the others, so a change is measured
	// against what it changed in the same run, on the same load.
	before string
}

// env is the environment of the run's child processes: the certificate
// they trust when the upstream is served over TLS.
func (c *config) env() []string {
	if c.caFile == "" {
		return os.Environ()
	}
	return append(os.Environ(), "SSL_CERT_FILE="+c.caFile)
}

// clientKey is rotor's client key for the run (ROTOR_CLIENT_KEY).
const clientKey = "rotor-bench-client-key-0123456789abcdef"

// peer is one way to reach the upstream: directly, or through a proxy
// process whose CPU and memory are measured.
type peer struct {
	name string
	base string // ends in /v1
	pid  int    // 0: no process of its own (direct)
}

// scenario is one load shape.
type scenario struct {
	name    string
	conc    int // closed-loop workers, or concurrent streams
	body    []byte
	path    string // under /v1; "" is /responses
	streams bool
	events  int
	gapMS   int
	// chatgpt: rotor's one account is a ChatGPT login (Codex's backend)
	// instead of an API key.
	chatgpt bool
}

// result is what one scenario measured through one peer.
type result struct {
	requests  int
	errors    int
	rps       float64
	p50, p99  time.Duration // request latency, or per-event latency for streams
	ttfb50    time.Duration
	cpu       time.Duration // the proxy process's CPU time over the scenario
	peakRSSMB float64
}

func scenarios() []scenario {
	small := []byte(`{"model":"gpt-5","input":"hi","stream":false}`)
	big := bytes.Repeat([]byte("x"), 2<<20)
	large := append(append([]byte(`{"model":"gpt-5","stream":false,"input":"`), big...), `"}`...)
	// The shapes that made docs/codex.md and docs/selection.md dear (issue 45): a pasted file as
	// the first user message, naming no conversation, so rotor derives one
	// (docs/selection.md); and Codex's history, dense with items and blobs (docs/codex.md).
	blobs := 0
	blob := func() string { blobs++; return fmt.Sprintf("gAAAAAB%0500d", blobs) }
	return []scenario{
		{name: "non-stream C=1", conc: 1, body: small},
		{name: "non-stream C=64", conc: 64, body: small},
		{name: "2 MiB bodies C=8", conc: 8, body: large},
		{name: "2 MiB first message in input C=8", conc: 8, body: upstreamtest.PastedFileResponses(2<<20, false)},
		{name: "2 MiB first message in Chat messages C=8", conc: 8, body: upstreamtest.PastedFileChat(2<<20, false), path: "/chat/completions"},
		{name: "2 MiB Codex history on ChatGPT C=8", conc: 8, body: upstreamtest.CodexHistory(2<<20, blob), chatgpt: true},
		{name: "100 streams x 20 events", conc: 100, streams: true, events: 20, gapMS: 50},
		{name: "1000 streams x 20 events", conc: 1000, streams: true, events: 20, gapMS: 50},
		// Longer-lived streams, as a Codex turn's are: more of them open at
		// once for longer, which is what a proxy's per-stream memory shows.
		{name: "1000 streams x 20 events 100 ms apart", conc: 1000, streams: true, events: 20, gapMS: 100},
	}
}

func run(ctx context.Context, cfg config, out, log io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	upCmd := exec.Command(self, "-upstream")
	if cfg.tls {
		dir, err := os.MkdirTemp("", "rotor-bench-ca-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.caFile = filepath.Join(dir, "ca.pem")
		upCmd.Args = append(upCmd.Args, "-ca-out", cfg.caFile)
	}
	upProc, err := startProc(ctx, upCmd, "")
	if err != nil {
		return fmt.Errorf("upstream: %w", err)
	}
	defer upProc.kill()
	up := upProc.line
	if cfg.tls {
		pemCert, err := os.ReadFile(cfg.caFile)
		if err != nil {
			return err
		}
		cfg.roots = x509.NewCertPool()
		if !cfg.roots.AppendCertsFromPEM(pemCert) {
			return errors.New("upstream: no certificate in " + cfg.caFile)
		}
		fmt.Fprintln(log, "rotor-bench: the upstream is served over TLS")
	}
	if cfg.before == "" {
		fmt.Fprintf(out, "| scenario | measure | direct | naive | floor | rotor | rotor vs naive | rotor vs floor |\n|---|---|---|---|---|---|---|---|\n")
	} else {
		fmt.Fprintf(out, "| scenario | measure | direct | naive | floor | rotor | before | rotor vs naive | rotor vs floor | rotor vs before | before vs floor |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	}
	for _, sc := range scenarios() {
		if cfg.only != "" && !strings.Contains(sc.name, cfg.only) {
			continue
		}
		// Fresh proxies for every scenario: each peak RSS is then the
		// scenario's own, not what the one before left resident (Go hands
		// memory back to the OS only slowly).
		peers, stop, err := startPeers(ctx, cfg, up, log, sc.chatgpt)
		if err != nil {
			return err
		}
		best := make([]*result, len(peers))
		for round := range max(cfg.rounds, 1) {
			for i, p := range peers { // interleaved: each peer once per round
				if ctx.Err() != nil {
					stop()
					return ctx.Err()
				}
				fmt.Fprintf(log, "rotor-bench: %s through %s (round %d)\n", sc.name, p.name, round+1)
				r := measure(ctx, cfg, sc, p)
				if best[i] == nil || better(sc, r, best[i]) {
					best[i] = r
				}
			}
		}
		stop()
		table(out, sc, best)
	}
	if cfg.only == "" || strings.Contains("session", cfg.only) {
		return runSessions(ctx, cfg, up, out, log)
	}
	return nil
}

// startPeers starts the naive proxy, the floor proxy and rotor in front
// of up (with a dashboard open on rotor when cfg says so; rotor's account
// a ChatGPT login when chatgpt is set) and returns the four peers, direct
// first and rotor last; stop ends them.
func startPeers(ctx context.Context, cfg config, up string, log io.Writer, chatgpt bool) (peers []peer, stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, f := range slices.Backward(stops) {
			f()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	self, err := os.Executable()
	if err != nil {
		return nil, stop, err
	}
	naiveCmd, floorCmd := exec.Command(self, "-peer", up), exec.Command(self, "-floor", up)
	naiveCmd.Env, floorCmd.Env = cfg.env(), cfg.env()
	naive, err := startProc(ctx, naiveCmd, "")
	if err != nil {
		return nil, stop, fmt.Errorf("naive proxy: %w", err)
	}
	stops = append(stops, naive.kill)
	floor, err := startProc(ctx, floorCmd, "")
	if err != nil {
		return nil, stop, fmt.Errorf("floor proxy: %w", err)
	}
	stops = append(stops, floor.kill)
	home, err := os.MkdirTemp("", "rotor-bench-")
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() { os.RemoveAll(home) })
	rotor, err := startRotor(ctx, cfg, up, home, chatgpt)
	if err != nil {
		return nil, stop, fmt.Errorf("rotor: %w", err)
	}
	stops = append(stops, rotor.kill)
	var earlier *proc
	if cfg.before != "" {
		bcfg := cfg
		bcfg.rotor = cfg.before
		if earlier, err = startRotor(ctx, bcfg, up, filepath.Join(home, "before"), chatgpt); err != nil {
			return nil, stop, fmt.Errorf("rotor (before): %w", err)
		}
		stops = append(stops, earlier.kill)
	}
	if cfg.dashboard {
		closePage, err := openDashboard(ctx, strings.TrimSuffix(rotor.line, "/v1"))
		if err != nil {
			return nil, stop, fmt.Errorf("dashboard: %w", err)
		}
		stops = append(stops, closePage)
		fmt.Fprintln(log, "rotor-bench: a dashboard page is open on rotor")
	}
	peers = []peer{
		{name: "direct", base: up + "/v1"},
		{name: "naive", base: strings.TrimSpace(naive.line) + "/v1", pid: naive.cmd.Process.Pid},
		{name: "floor", base: floor.line + "/v1", pid: floor.cmd.Process.Pid},
		{name: "rotor", base: rotor.line, pid: rotor.cmd.Process.Pid},
	}
	if earlier != nil {
		peers = append(peers, peer{name: "before", base: earlier.line, pid: earlier.cmd.Process.Pid})
	}
	return peers, stop, nil
}

// better reports whether run a beats run b: more streams completed, then
// the lower event p99; for closed loops the higher throughput.
func better(sc scenario, a, b *result) bool {
	if !sc.streams {
		return a.rps > b.rps
	}
	if ok, okB := a.requests-a.errors, b.requests-b.errors; ok != okB {
		return ok > okB
	}
	return a.p99 < b.p99
}

// measure runs sc through p once, with the proxy's peak RSS reset first.
func measure(ctx context.Context, cfg config, sc scenario, p peer) *result {
	resetPeak(p.pid)
	cpu0 := cpuTime(p.pid)
	tr := &http.Transport{MaxIdleConnsPerHost: sc.conc + 16, DisableCompression: true, IdleConnTimeout: 30 * time.Second,
		TLSClientConfig: &tls.Config{RootCAs: cfg.roots}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	var r *result
	if sc.streams {
		r = streams(ctx, client, sc, p)
	} else {
		r = closedLoop(ctx, client, sc, p, cfg.duration)
	}
	r.cpu = cpuTime(p.pid) - cpu0
	r.peakRSSMB = peakRSS(p.pid)
	return r
}

func newRequest(ctx context.Context, p peer, path string, body []byte) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, "POST", p.base+cmp.Or(path, "/responses"), bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+clientKey)
	req.Header.Set("Content-Type", "application/json")
	return req
}

// closedLoop keeps sc.conc requests in flight for d and times each.
func closedLoop(ctx context.Context, client *http.Client, sc scenario, p peer, d time.Duration) *result {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var mu sync.Mutex
	var lat []time.Duration
	var errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range sc.conc {
		wg.Go(func() {
			var mine []time.Duration
			for ctx.Err() == nil {
				t0 := time.Now()
				resp, err := client.Do(newRequest(context.Background(), p, sc.path, sc.body))
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = errors.New(resp.Status)
					}
				}
				if err != nil {
					errs.Add(1)
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	el := time.Since(start)
	r := &result{requests: len(lat) + int(errs.Load()), errors: int(errs.Load()), rps: float64(len(lat)) / el.Seconds()}
	r.p50, r.p99 = pct(lat, 50), pct(lat, 99)
	return r
}

// streams opens sc.conc streams at once and times every event from the
// moment the upstream wrote it.
func streams(ctx context.Context, client *http.Client, sc scenario, p peer) *result {
	body := []byte(`{"model":"gpt-5","input":"hi","stream":true}`)
	var mu sync.Mutex
	var lat, ttfb []time.Duration
	var errs atomic.Int64
	var wg sync.WaitGroup
	for range sc.conc {
		wg.Go(func() {
			req := newRequest(ctx, p, sc.path, body)
			req.Header.Set("x-bench-events", strconv.Itoa(sc.events))
			req.Header.Set("x-bench-gap-ms", strconv.Itoa(sc.gapMS))
			t0 := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				errs.Add(1)
				return
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			var mine []time.Duration
			first, done := time.Duration(0), false
			for {
				line, err := br.ReadSlice('\n')
				if first == 0 && len(line) > 0 {
					first = time.Since(t0)
				}
				if i := bytes.Index(line, []byte(`"t":`)); i >= 0 {
					j := i + 4
					for j < len(line) && line[j] >= '0' && line[j] <= '9' {
						j++
					}
					if ns, perr := strconv.ParseInt(string(line[i+4:j]), 10, 64); perr == nil {
						mine = append(mine, time.Duration(time.Now().UnixNano()-ns))
					}
				}
				if bytes.Contains(line, []byte(`"type":"response.completed"`)) {
					done = true
				}
				if err != nil {
					break
				}
			}
			if resp.StatusCode != 200 || !done || len(mine) != sc.events {
				errs.Add(1)
			}
			mu.Lock()
			lat = append(lat, mine...)
			ttfb = append(ttfb, first)
			mu.Unlock()
		})
	}
	wg.Wait()
	r := &result{requests: sc.conc, errors: int(errs.Load())}
	r.p50, r.p99, r.ttfb50 = pct(lat, 50), pct(lat, 99), pct(ttfb, 50)
	return r
}

func pct(xs []time.Duration, p int) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[min(len(xs)*p/100, len(xs)-1)]
}

// table prints sc's rows: each measure through each peer, and rotor's
// ratio to the naive and to the floor proxy (above 1 is better for rotor
// on throughput rows, below 1 on the others). rs is direct, naive, floor,
// rotor, and with -before the earlier rotor, whose columns then follow:
// its figures, rotor's ratio to it and its own to the floor.
func table(w io.Writer, sc scenario, rs []*result) {
	d, n, f, r := rs[0], rs[1], rs[2], rs[3]
	var b *result
	if len(rs) > 4 {
		b = rs[4]
	}
	ms := func(x time.Duration) string { return fmt.Sprintf("%.2f ms", float64(x.Microseconds())/1000) }
	ratio := func(a, b float64) string {
		// An added latency below zero is the direct run's own noise at
		// that percentile: no ratio means anything then.
		if b <= 0 || a < 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", a/b)
	}
	// row prints one measure: direct's cell as given, each proxy's from
	// text, and rotor's ratios from value (none when value is nil).
	row := func(measure, direct string, text func(*result) string, value func(*result) float64) {
		cells := []string{sc.name, measure, direct, text(n), text(f), text(r)}
		if b != nil {
			cells = append(cells, text(b))
		}
		vs := []string{"-", "-"}
		if value != nil {
			vs = []string{ratio(value(r), value(n)), ratio(value(r), value(f))}
		}
		if b != nil {
			vs = append(vs, "-", "-")
			if value != nil {
				vs[2], vs[3] = ratio(value(r), value(b)), ratio(value(b), value(f))
			}
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(append(cells, vs...), " | "))
	}
	perReq := func(x *result) float64 { return float64(x.cpu) / float64(max(x.requests, 1)) }
	perReqText := func(x *result) string {
		if x.requests == 0 {
			return "-"
		}
		return ms(time.Duration(perReq(x)))
	}
	addedP50 := func(x *result) float64 { return float64(x.p50 - d.p50) }
	if !sc.streams {
		row("throughput", fmt.Sprintf("%.0f/s", d.rps),
			func(x *result) string { return fmt.Sprintf("%.0f/s (%.2fx direct)", x.rps, x.rps/d.rps) },
			func(x *result) float64 { return x.rps })
		row("added latency p50", "-", func(x *result) string { return ms(x.p50 - d.p50) }, addedP50)
		row("latency p99", ms(d.p99), func(x *result) string { return ms(x.p99) },
			func(x *result) float64 { return float64(x.p99) })
		row("proxy CPU per request", "-", perReqText, perReq)
	} else {
		ok := func(x *result) string { return fmt.Sprintf("%d/%d", x.requests-x.errors, x.requests) }
		row("streams complete", ok(d), ok, nil)
		// Each event is timed from the moment the upstream wrote it, so
		// direct's own figure includes the clients' scheduling: the
		// proxies are compared with it and with each other as they are,
		// not as a difference that noise can make negative.
		row("event latency p50", ms(d.p50), func(x *result) string { return ms(x.p50) }, nil)
		row("event latency p99", ms(d.p99), func(x *result) string { return ms(x.p99) },
			func(x *result) float64 { return float64(x.p99) })
		row("time to first byte p50", ms(d.ttfb50), func(x *result) string { return ms(x.ttfb50) },
			func(x *result) float64 { return float64(x.ttfb50) })
		row("proxy CPU per stream", "-", perReqText, perReq)
	}
	row("proxy peak RSS", "-", func(x *result) string { return fmt.Sprintf("%.0f MB", x.peakRSSMB) },
		func(x *result) float64 { return x.peakRSSMB })
	ratios := 2
	if b != nil {
		ratios = 4
	}
	for i, x := range rs {
		if x.errors > 0 {
			cells := make([]string, len(rs)+ratios) // the peers' columns, then the ratios'
			cells[i] = fmt.Sprintf("%d of %d", x.errors, x.requests)
			fmt.Fprintf(w, "| %s | errors | %s |\n", sc.name, strings.Join(cells, " | "))
		}
	}
}

// proc is a child process that printed its address as a first line.
type proc struct {
	cmd  *exec.Cmd
	line string
}

func (p *proc) kill() {
	p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

// startProc starts cmd and waits, at most 20 s, for a stdout line with
// prefix; the rest of that line is the proc's line.
func startProc(ctx context.Context, cmd *exec.Cmd, prefix string) (*proc, error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				select {
				case lines <- strings.TrimSpace(rest):
				default:
				}
			}
		}
	}()
	p := &proc{cmd: cmd}
	select {
	case p.line = <-lines:
		return p, nil
	case <-time.After(20 * time.Second):
	case <-ctx.Done():
	}
	p.kill()
	return nil, errors.New("did not start within 20 s")
}

// startRotor starts `rotor serve` on a fresh home (under home) with one
// account whose base URL is the upstream: an API key, or with chatgpt the
// test ChatGPT login of testdata/jwt (its token expires in 2100).
func startRotor(ctx context.Context, cfg config, upstream, home string, chatgpt bool) (*proc, error) {
	bin := cfg.rotor
	env := append(cfg.env(), "ROTOR_HOME="+filepath.Join(home, "home"), "ROTOR_SECRETS=file",
		"ROTOR_OPENAI_BASE_URL="+upstream+"/v1", "ROTOR_CHATGPT_BASE_URL="+upstream+"/backend-api",
		"ROTOR_CLIENT_KEY="+clientKey)
	add := exec.CommandContext(ctx, bin, "add-key", "--label", "bench")
	add.Stdin = strings.NewReader("sk-bench-0123456789")
	if chatgpt {
		add = exec.CommandContext(ctx, bin, "import", "codex", "--file", "testdata/jwt/codex_auth.json", "--label", "bench")
	}
	add.Env = env
	if out, err := add.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("add-key: %v: %s", err, out)
	}
	cmd := exec.Command(bin, "serve", "--port", "0", "--log-level", "error")
	cmd.Env = env
	return startProc(ctx, cmd, "rotor proxy listening on ")
}

// cpuTime is the user+system CPU time of pid so far (0 for pid 0).
func cpuTime(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// resetPeak restarts VmHWM counting for pid (clear_refs 5).
func resetPeak(pid int) {
	if pid != 0 {
		os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
	}
}

// peakRSS is pid's VmHWM in MB.
func peakRSS(pid int) float64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return float64(kb) / 1024
		}
	}
	return 0
}

// openDashboard logs in to rotor's dashboard as a browser would and reads
// its live stream until stop, as an open page does.
func openDashboard(ctx context.Context, base string) (stop func(), err error) {
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(dashboard.LoginURL(base, clientKey, time.Now()))
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	cookie := strings.SplitN(resp.Header.Get("Set-Cookie"), ";", 2)[0]
	if resp.StatusCode != http.StatusSeeOther || cookie == "" {
		return nil, fmt.Errorf("login answered %d", resp.StatusCode)
	}
	ctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/dashboard/events", nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Cookie", cookie)
	ev, err := http.DefaultClient.Do(req)
	if err != nil || ev.StatusCode != 200 {
		cancel()
		return nil, fmt.Errorf("events: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(io.Discard, ev.Body)
		ev.Body.Close()
	}()
	return func() { cancel(); <-done }, nil
}
