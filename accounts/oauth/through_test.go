package oauth_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts/oauth"
)

// A token refresh through Client.Through goes by the proxy the rule
// names (docs/service.md: OAuth goes through the account's proxy too).
func TestRefreshGoesThroughTheProxy(t *testing.T) {
	t.Parallel()
	auth := startAuth(t)
	var relayed atomic.Int32
	// A forward proxy for plain HTTP: absolute-form requests, relayed.
	fwd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !r.URL.IsAbs() {
			http.Error(w, "not a proxy request", http.StatusBadRequest)
			return
		}
		relayed.Add(1)
		out, err := http.NewRequestWithContext(r.Context(), r.Method, r.URL.String(), r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	t.Cleanup(fwd.Close)
	proxyURL, _ := url.Parse(fwd.URL)
	c := oauth.NewClient(auth.URL()).Through(func(*url.URL) (*url.URL, error) { return proxyURL, nil })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const rt = "rt_test_through_proxy_71a0"
	auth.AddRefreshToken(rt)
	if _, err := c.Refresh(ctx, rt); err != nil {
		t.Fatalf("Refresh through the proxy: %v", err)
	}
	if relayed.Load() != 1 {
		t.Errorf("the proxy relayed %d requests, want the one refresh", relayed.Load())
	}
	// No rule: straight to the authorization server.
	auth.AddRefreshToken(rt + "_2")
	if _, err := oauth.NewClient(auth.URL()).Through(nil).Refresh(ctx, rt+"_2"); err != nil || relayed.Load() != 1 {
		t.Errorf("without a rule: %v, relayed %d", err, relayed.Load())
	}
}
