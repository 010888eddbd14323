// Command rotor-bench measures rotor side by side with a naive
// httputil.ReverseProxy, with the floor of its own HTTP stack (a bare
// fasthttp pass-through) and with no proxy at all (make bench-load), and
// prints a markdown table of ratios (docs/PERFORMANCE.md explains it).
//
// One run starts, on loopback only: an upstream that speaks the Responses
// wire format, the naive and floor proxies (this binary, as child
// processes with -upstream, -peer and -floor), and `rotor serve` with one
// API-key account pointing at the upstream. Every scenario then runs against each peer in turn,
// interleaved, so that a machine slowing down mid-run hurts them alike.
// Per-event latency comes from the send time the upstream writes into each
// SSE event; CPU time and peak RSS of the proxy processes from /proc.
// Every scenario is bounded in time and the run stops by itself.
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
	var cfg config
	flag.StringVar(&cfg.rotor, "rotor", "bin/rotor", "the rotor binary")
	flag.DurationVar(&cfg.duration, "duration", 4*time.Second, "how long each closed-loop scenario runs per peer")
	flag.IntVar(&cfg.rounds, "rounds", 1, "how many times each scenario runs per peer (the best run counts)")
	flag.StringVar(&cfg.only, "only", "", "run only scenarios whose name contains this")
	flag.BoolVar(&cfg.dashboard, "dashboard", false, "keep rotor's dashboard open (logged in, its live stream read) during the run")
	flag.BoolVar(&cfg.tls, "tls", false, "serve the upstream over TLS, as the real backends are, with a certificate only the run trusts")
	flag.StringVar(&cfg.before, "before", "", "another rotor binary (an earlier build) to run beside rotor, interleaved, with its own columns")
	peer := flag.String("peer", "", "internal: run as the naive proxy in front of this upstream URL")
	floor := flag.String("floor", "", "internal: run as the floor proxy (a bare fasthttp pass-through) in front of this upstream URL")
	asUpstream := flag.Bool("upstream", false, "internal: run as the upstream")
	caOut := flag.String("ca-out", "", "internal: with -upstream, serve over TLS and write the certificate to trust here")
	flag.Parse()
	if *asUpstream {
		if err := runUpstream(*caOut); err != nil {
			fmt.Fprintln(os.Stderr, "rotor-bench upstream:", err)
			os.Exit(1)
		}
		return
	}
	if *peer != "" || *floor != "" {
		serve, target := runNaive, *peer
		if *floor != "" {
			serve, target = runFloor, *floor
		}
		if err := serve(target); err != nil {
			fmt.Fprintln(os.Stderr, "rotor-bench peer:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute) // stops by itself, whatever happens
	defer cancel()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "rotor-bench:", err)
		os.Exit(1)
	}
}
