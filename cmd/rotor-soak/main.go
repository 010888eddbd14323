// Command rotor-soak runs a real `rotor serve` under load and injected
// faults for a bounded time, then checks what docs/selection.md promises (make soak):
//
//   - no request is lost before its first byte: healthy accounts are always
//     in the pool, so every answer rotor makes itself is a loss (an error
//     from a serve the soak killed on purpose is counted apart);
//   - no healthy account is marked: none cools down, is rate-limited,
//     circuit-open or flagged, whatever the faulty accounts and the clients
//     do;
//   - every file in ROTOR_HOME still loads.
//
// The fake upstream (proxy/upstreamtest) stands behind every account,
// served over TLS like every real backend (the serves trust its
// certificate through SSL_CERT_FILE). Healthy accounts reach it as
// "localhost", faulty ones as "127.0.0.1", so
// faults that mark an endpoint (hangs past --response-timeout) mark only
// the faulty accounts' endpoint; one account points at a closed port. The
// faulty accounts change behaviour at random every half second: usage
// limits, 401, 5xx, resets, orderly closes and stalls mid-stream, hangs,
// slow headers.
// Meanwhile clients stream (some abort half-way, some do not stream),
// `rotor switch` and `rotor unpin` move the pin, and a second serve on the
// same home is killed with SIGKILL and started again.
//
// Everything it starts listens on and talks to loopback only, every loop
// is bounded by the run's deadline, and every child is killed on exit.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	cfg := defaultConfig()
	flag.StringVar(&cfg.Rotor, "rotor", "bin/rotor", "the rotor binary")
	flag.StringVar(&cfg.Testdata, "testdata", "testdata", "the fixtures folder")
	flag.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long to run (also SOAK=10m)")
	flag.IntVar(&cfg.Streams, "streams", cfg.Streams, "concurrent streaming clients")
	flag.Parse()
	if v := os.Getenv("SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "SOAK=%q: %v\n", v, err)
			os.Exit(1)
		}
		cfg.Duration = d
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := Run(ctx, cfg)
	if sum != nil {
		sum.Print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak failed:", err)
		os.Exit(1)
	}
	if !sum.OK() {
		os.Exit(1)
	}
}
