package proxy

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/proxy/upstreamtest"
)

// rotor_ttfb_seconds counts every request an upstream answered, whatever
// it answered: for such requests its _count is rotor_request_duration_seconds'.
// An error the upstream sent, passed on or answered for, is the first byte
// of the client's answer as much as a success is.
func TestTTFBCountsEveryRequestAnUpstreamAnswered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, []acct{{accounts.KindChatGPT, "a"}, {accounts.KindChatGPT, "b"}})
	nonStream := `{"model":"gpt-5","stream":false,"input":"hi"}`
	every := func(b upstreamtest.Behavior) {
		e.up.Set("a", b)
		e.up.Set("b", b)
	}
	sent := 0
	send := func(body string, status int) {
		t.Helper()
		resp := e.do("POST", "/v1/responses", body)
		readAll(t, resp)
		if resp.StatusCode != status {
			t.Fatalf("request %d: status %d, want %d", sent+1, resp.StatusCode, status)
		}
		sent++
	}
	send(streamBody, 200)
	send(nonStream, 200)
	every(upstreamtest.Behavior{Status: 400})
	send(streamBody, 400) // passed on as the upstream sent it
	send(nonStream, 400)
	every(upstreamtest.Behavior{Status: 401, ErrorFixture: "token_invalidated_401.json"})
	send(streamBody, 401) // answered for: token_invalidated
	every(upstreamtest.Behavior{Status: 404, ErrorFixture: "usage_not_included_404.json"})
	send(streamBody, 403) // entitlement_error, once every account answered
	every(upstreamtest.Behavior{Status: 429, ResetIn: time.Hour})
	send(streamBody, 429) // pool exhausted, once every account answered

	var fams map[string]*dto.MetricFamily
	eventually(t, 5*time.Second, "every request counted", func() bool {
		fams, _ = e.scrape()
		return sample(fams, "rotor_request_duration_seconds") == float64(sent)
	})
	if ttfb := sample(fams, "rotor_ttfb_seconds"); ttfb != float64(sent) {
		t.Errorf("rotor_ttfb_seconds counts %v requests, rotor_request_duration_seconds %d: the same requests", ttfb, sent)
	}
}
