package proxy

import (
	"context"
	"net/http"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/secrets"
	"github.com/rotorproxy/rotor/proxy/metrics"
)

// apiKeyAdapter serves API-key accounts: OpenAI's API, or any base_url
// that speaks it. The client's body goes as it came, and the answer comes
// back as it is.
type apiKeyAdapter struct{ upstreamBase }

// apiKeyPaths are the OpenAI API's paths, by op.
var apiKeyPaths = [opCount]string{opResponses: "/responses", opCompact: "/responses/compact",
	opChat: "/chat/completions", opModels: "/models"}

func (apiKeyAdapter) Refreshes() bool    { return false }
func (apiKeyAdapter) AddCommand() string { return `"rotor add-key"` }
func (apiKeyAdapter) meter() string      { return metrics.MeterCost }
func (apiKeyAdapter) listsCatalog() bool { return false }

func (ad apiKeyAdapter) ProbeRequest(ctx context.Context, a *accounts.Account, sec *secrets.Secret) (*http.Request, error) {
	return probeRequest(ctx, ad, upstreamURL(ad.base(a.BaseURL), apiKeyPaths[opModels], nil), a, sec)
}

func (apiKeyAdapter) appendURL(dst []byte, base string, r *request) []byte {
	return appendUpstreamURL(dst, base, apiKeyPaths[r.op], r.query)
}

func (apiKeyAdapter) setHeaders(h HeaderSetter, _ string, sec secrets.Secret) {
	setBearer(h, sec.APIKey)
}

func (apiKeyAdapter) body(r *request) ([]byte, answerForm, error) {
	if r.op == opModels {
		return nil, formAsIs, nil
	}
	return r.body, formAsIs, nil
}

// refuses keeps API keys away from Codex's models catalog while a ChatGPT
// account can answer it: an API key's list is OpenAI's, which Codex
// cannot read as its catalog (docs/codex.md).
func (apiKeyAdapter) refuses(r *request) string {
	if r.codexCatalog {
		return skipNotCatalog
	}
	return ""
}

// skipNotCatalog is the skip reason of an API key for Codex's catalog.
const skipNotCatalog = "not-a-codex-catalog"

// signsIn: an API key signs in to nothing.
func (apiKeyAdapter) signsIn() bool { return false }
