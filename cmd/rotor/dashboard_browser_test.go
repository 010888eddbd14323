package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/rotorproxy/rotor/accounts/prices"
)

// browserRun is what became of the browser test, for "make test"'s last
// lines (browserReport): a skip deep in go test's output is easy to miss.
var browserRun atomic.Value // string

func browserReport() string {
	if s, ok := browserRun.Load().(string); ok {
		return "dashboard browser test: " + s + "\n"
	}
	return "dashboard browser test: not run (filtered out by -run)\n"
}

// chromium finds Debian's Chromium (.ci/run installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const why = "no Chromium on this machine (apt-get install chromium; .ci/run does)"
	browserRun.Store("SKIPPED: " + why)
	t.Skip(why + ": the dashboard's browser test cannot run")
	return ""
}

// The dashboard in a real headless Chromium, as a user meets it: the link
// from `rotor dashboard` logs in; the page shows each account's state, its
// quota bars, the usage charts and the money card (what the usage cost
// and was worth); a click on Pin shows up in `rotor rotation status`;
// `rotor switch` in a terminal shows up on the page within 2 s.
// Screenshots at 1280×800 and 390×844, light and dark, are saved under
// .cache/.
func TestDashboardInABrowser(t *testing.T) {
	bin := chromium(t)
	defer func() {
		if t.Failed() {
			browserRun.Store("FAILED")
		} else {
			browserRun.Store("ran in headless Chromium; screenshots in .cache/")
		}
	}()
	d := newDashboardPool(t)
	link := d.login(t)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // CI runs as root
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	// The whole browser lives at most 2 minutes; each step has its own bound.
	life, cancelLife := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelLife()
	actx, cancelAlloc := chromedp.NewExecAllocator(life, opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}

	within := func(d time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, stop := context.WithTimeout(ctx, d)
		defer stop()
		if err := chromedp.Do(c, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(expr string) float64 {
		t.Helper()
		c, stop := context.WithTimeout(ctx, 5*time.Second)
		defer stop()
		v, err := chromedp.Run(c, chromedp.Evaluate[float64](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	text := func(sel string) string {
		t.Helper()
		c, stop := context.WithTimeout(ctx, 5*time.Second)
		defer stop()
		s, err := chromedp.Run(c, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	media := func(scheme string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
			return err
		})
	}

	within(30*time.Second, "open the login link", chromedp.Navigate(link),
		chromedp.WaitVisible(chromedp.CSS(`article[data-index="3"]`)))
	c, stop := context.WithTimeout(ctx, 5*time.Second)
	loc, err := chromedp.Run(c, chromedp.Location())
	stop()
	if err != nil || loc != d.base+"/" {
		t.Errorf("after login the page is %q (%v), want %s/ (the token must not stay in the address bar)", loc, err, d.base)
	}
	if s := text(`article[data-index="1"] .state`); s != "rate-limited" {
		t.Errorf("alice's state on the page: %q", s)
	}
	if s := text(`article[data-index="2"] .state`); s != "available" {
		t.Errorf("bob's state on the page: %q", s)
	}
	dana := text(`article[data-index="3"]`)
	for _, want := range []string{"dana", "chatgpt", "Primary: 62% used, resets in 2h1", "Secondary: 35% used, resets in 4d", "Cache hit", " 24h · ",
		"12.50", "gpt-5.2-codex-sonic"} {
		if !strings.Contains(dana, want) {
			t.Errorf("dana's card lacks %q: %q", want, dana)
		}
	}
	if w := eval(`parseFloat(document.querySelector('article[data-index="3"] .bar > span').style.width)`); w != 62 {
		t.Errorf("dana's primary bar is %v%% wide, want 62%%", w)
	}
	// The money card: the usage records at prices.json's prices, as
	// `rotor report` prints amounts (docs/cost.md).
	want, _ := d.money(t)
	for _, w := range []string{"1h", "24h", "7d"} {
		row := `#money tr[data-window="` + w + `"] `
		for _, c := range []struct {
			class string
			usd   prices.USD
		}{{"cost", want.Cost}, {"value", want.Value}, {"saved", want.Saved}} {
			if got := text(row + "." + c.class); got != usd(c.usd) || got == "$0" {
				t.Errorf("money card, %s %s: %q, want %q", w, c.class, got, usd(c.usd))
			}
		}
		if got := text(row + ".unpriced"); got != "-" {
			t.Errorf("money card, %s unpriced: %q", w, got)
		}
	}
	if s := text("#money .prices"); !strings.Contains(s, "OpenAI list prices of 2025-11-20") || !strings.Contains(s, "1 model(s) from "+d.h.path("prices.json")+" of 2025-12-01") {
		t.Errorf("money card prices: %q", s)
	}
	if n := eval(`document.querySelectorAll("#chart-requests svg rect").length`); n == 0 {
		t.Error("the requests chart drew no bar")
	}
	if n := eval(`document.querySelectorAll("#recent tbody tr").length`); n < 4 {
		t.Errorf("last requests table has %v rows", n)
	}

	shots := filepath.Join("..", "..", ".cache")
	os.MkdirAll(shots, 0o755)
	shot := func(name string) {
		t.Helper()
		c, stop := context.WithTimeout(ctx, 10*time.Second)
		defer stop()
		chromedp.Do(c, chromedp.Sleep(300*time.Millisecond))
		png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shot("dashboard-1280x800.png")

	// A click on Pin is `rotor switch`: rotation status says so at once.
	within(5*time.Second, "click pin", chromedp.Click(chromedp.CSS(`article[data-index="2"] button[data-action="pin"]`)))
	deadline := time.Now().Add(2 * time.Second)
	for {
		var st struct {
			Pinned *int `json:"pinned_account_index"`
		}
		json.Unmarshal([]byte(d.h.ok("", "rotation", "status", "--json").stdout), &st)
		if st.Pinned != nil && *st.Pinned == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rotation status does not show the pin clicked on the page")
		}
		time.Sleep(50 * time.Millisecond)
	}
	within(3*time.Second, "the page shows its own pin", chromedp.WaitVisible(chromedp.CSS(`article[data-index="2"] .pinmark`)))

	// `rotor switch` in a terminal: on the page within 2 s.
	d.h.ok("", "switch", "3")
	switched := time.Now()
	within(2*time.Second, "the page shows rotor switch 3 within 2s", chromedp.WaitVisible(chromedp.CSS(`article[data-index="3"] .pinmark`)))
	t.Logf("rotor switch reached the page in %v", time.Since(switched).Round(time.Millisecond))
	if s := text("#pin"); !strings.Contains(s, "3. dana") {
		t.Errorf("pin line: %q", s)
	}

	// Usable with the keyboard: a focused button takes Enter.
	within(5*time.Second, "keyboard", chromedp.Focus(chromedp.CSS(`article[data-index="3"] button[data-action="unpin"]`)),
		chromedp.KeyEvent("\r"), chromedp.WaitNotPresent(chromedp.CSS(`article[data-index="3"] .pinmark`)))
	if d.h.pool().Pinned() != 0 {
		t.Error("Enter on the focused Unpin button did not unpin")
	}

	within(10*time.Second, "dark", media("dark"))
	shot("dashboard-1280x800-dark.png")
	within(10*time.Second, "phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	if eval(`document.documentElement.scrollWidth > window.innerWidth ? 1 : 0`) == 1 {
		t.Error("at 390×844 the page scrolls sideways")
	}
	shot("dashboard-390x844-dark.png")
	within(10*time.Second, "light", media("light"))
	shot("dashboard-390x844.png")
}
