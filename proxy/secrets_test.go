package proxy

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/secrets"
)

// slowSecrets counts the reads of the store behind it and makes each take
// a while, as a keyring's D-Bus round trip does.
type slowSecrets struct {
	src   SecretSource
	reads atomic.Int32
}

func (s *slowSecrets) Get(id string) (secrets.Secret, error) {
	s.reads.Add(1)
	time.Sleep(50 * time.Millisecond)
	return s.src.Get(id)
}

// A burst of requests to a serve that has not read an account's secret
// yet reads it once, not once per request; every request is served.
func TestSecretReadOnceForABurst(t *testing.T) {
	t.Parallel()
	store := &slowSecrets{}
	e := newEnvWith(t, []acct{{accounts.KindAPIKey, "k1"}}, peerConfig{seed: 1,
		secrets: func(src SecretSource) SecretSource { store.src = src; return store }})
	const burst = 40
	var wg sync.WaitGroup
	codes := make(chan int, burst)
	for range burst {
		wg.Go(func() {
			resp := e.do("POST", "/v1/responses", streamBody)
			readAll(t, resp)
			codes <- resp.StatusCode
		})
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Fatalf("a request of the burst got %d", c)
		}
	}
	if n := store.reads.Load(); n != 1 {
		t.Fatalf("the secret store was read %d times for a burst of %d requests, want 1", n, burst)
	}
}

// slowPanicSecrets is a bug in the secret store that shows after a while.
type slowPanicSecrets struct{}

func (slowPanicSecrets) Get(string) (secrets.Secret, error) {
	time.Sleep(50 * time.Millisecond)
	panic("boom")
}

// When the one read a burst waits for panics, every request of the burst
// is answered (500), none is left waiting for it.
func TestSecretReadPanicReleasesTheBurst(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, []acct{{accounts.KindAPIKey, "k1"}}, peerConfig{seed: 1,
		secrets: func(SecretSource) SecretSource { return slowPanicSecrets{} }})
	const burst = 10
	codes := make(chan int, burst)
	for range burst {
		go func() {
			resp := e.do("POST", "/v1/responses", streamBody)
			readAll(t, resp)
			codes <- resp.StatusCode
		}()
	}
	deadline := time.After(10 * time.Second)
	for range burst {
		select {
		case c := <-codes:
			if c != 500 {
				t.Fatalf("status %d, want 500", c)
			}
		case <-deadline:
			t.Fatal("a request of the burst was left waiting for the read that panicked")
		}
	}
}
