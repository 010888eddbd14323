package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// runNaive is the peer rotor is measured against: the reverse proxy anyone
// would write in ten lines with the standard library, flushing streams as
// they come. It prints its address on stdout and serves until killed.
func runNaive(target string) error {
	u, err := url.Parse(target)
	if err != nil {
		return err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 4096, IdleConnTimeout: 90 * time.Second, DisableCompression: true}
	ln, err := announce()
	if err != nil {
		return err
	}
	return http.Serve(ln, rp)
}

// announce listens on a loopback port for a peer process and prints its
// URL on stdout: the line the benchmark waits for.
func announce() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	fmt.Printf("http://%s\n", ln.Addr())
	return ln, nil
}
