package upstreamtest

import (
	"cmp"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// The fixed bodies below are small and structural, so they live here rather
// than in testdata/: tests look at their shape, never at their content.

// missingKeyBody is what api.openai.com answers when no bearer token is sent.
const missingKeyBody = `{"error":{"message":"You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).","type":"invalid_request_error","param":null,"code":null}}`

// openaiModelsBody is GET /v1/models in api.openai.com's list shape.
const openaiModelsBody = `{"object":"list","data":[` +
	`{"id":"gpt-5","object":"model","created":1754425777,"owned_by":"system"},` +
	`{"id":"gpt-5-2025-08-07","object":"model","created":1754425777,"owned_by":"system"},` +
	`{"id":"gpt-5-mini","object":"model","created":1754425928,"owned_by":"system"},` +
	`{"id":"gpt-5-codex","object":"model","created":1757527818,"owned_by":"system"},` +
	`{"id":"gpt-4.1","object":"model","created":1744316542,"owned_by":"system"}]}`

// codexModelsETag is sent with the Codex models list; Codex CLI keeps it to
// notice when the list changes.
const codexModelsETag = `W/"fakeupstream-models-1"`

// codexModelsBody is GET /backend-api/codex/models: the Codex backend's own
// shape, {"models":[ModelInfo...]}, not the OpenAI list (fields as in
// codex-rs protocol/src/openai_models.rs).
const codexModelsBody = `{"models":[` +
	`{"slug":"gpt-5-codex","display_name":"gpt-5-codex","description":"Optimized for coding tasks with many tools.",` +
	`"default_reasoning_level":"medium","supported_reasoning_levels":[{"effort":"low","description":"Fastest responses with limited reasoning"},{"effort":"medium","description":"Dynamically adjusts reasoning based on the task"},{"effort":"high","description":"Maximizes reasoning depth for complex or ambiguous problems"}],` +
	`"shell_type":"shell_command","visibility":"list","supported_in_api":true,"priority":1,"upgrade":null,"base_instructions":"",` +
	`"supports_reasoning_summaries":true,"support_verbosity":false,"default_verbosity":null,"apply_patch_tool_type":"freeform",` +
	`"truncation_policy":{"mode":"tokens","limit":10000},"supports_parallel_tool_calls":true,"context_window":272000,` +
	`"experimental_supported_tools":[],"input_modalities":["text","image"]},` +
	`{"slug":"gpt-5","display_name":"gpt-5","description":"Broad world knowledge with strong general reasoning.",` +
	`"default_reasoning_level":"medium","supported_reasoning_levels":[{"effort":"minimal","description":"Fastest responses with little reasoning"},{"effort":"low","description":"Balances speed with some reasoning"},{"effort":"medium","description":"Solid balance of reasoning depth and latency"},{"effort":"high","description":"Maximizes reasoning depth for complex or ambiguous problems"}],` +
	`"shell_type":"default","visibility":"list","supported_in_api":true,"priority":2,"upgrade":null,"base_instructions":"",` +
	`"supports_reasoning_summaries":true,"support_verbosity":true,"default_verbosity":"low","apply_patch_tool_type":null,` +
	`"truncation_policy":{"mode":"bytes","limit":10000},"supports_parallel_tool_calls":false,"context_window":272000,` +
	`"experimental_supported_tools":[],"input_modalities":["text","image"]}]}`

// compactBody is the answer of POST .../responses/compact. Codex CLI only
// reads "output" (the replacement history: kept user messages plus one opaque
// "compaction" item, whose encrypted_content is blob, minted for the caller
// like any account-bound content); the envelope follows the public
// /v1/responses/compact resource ("object":"response.compaction", with usage).
func compactBody(now time.Time, blob string) []byte {
	return []byte(`{"id":"resp_68b1f4c0d2e88190a5b7c3e9f1d2a4660c8f2a7d5e3b1c9a","object":"response.compaction","created_at":` +
		strconv.FormatInt(now.Unix(), 10) + `,"output":[` +
		`{"id":"msg_68b1f4c1a0b48190b9d3e5f7a1c2e4880c8f2a7d5e3b1c9a","type":"message","status":"completed","role":"user","content":[{"type":"input_text","text":"Say hello."}]},` +
		`{"id":"cmp_68b1f4c25e7c8190a2c4e6f8b1d3f5a70c8f2a7d5e3b1c9a","type":"compaction","encrypted_content":"` + blob + `"}],` +
		`"usage":{"input_tokens":1536,"input_tokens_details":{"cached_tokens":1024},"output_tokens":212,"output_tokens_details":{"reasoning_tokens":128},"total_tokens":1748}}`)
}

// invalidURLBody is api.openai.com's answer to an unknown path or method.
func invalidURLBody(method, path string) []byte {
	msg, _ := json.Marshal("Invalid URL (" + method + " " + path + ")")
	return []byte(`{"error":{"message":` + string(msg) + `,"type":"invalid_request_error","param":null,"code":null}}`)
}

// usageBody is GET /backend-api/wham/usage for an account behaving as b
// without a Meter: the backend's RateLimitStatusPayload, its windows,
// other limit families (additional_rate_limits) and credits those b's
// x-codex-* Headers report (windows unused and no credits when they
// report none), its reset credits b's.
func usageBody(b Behavior, fill filler) []byte {
	h := func(k string) string { return fill.string(b.Headers[k]) }
	window := func(prefix string, minutes int) map[string]any {
		used, _ := strconv.ParseFloat(h(prefix+"-used-percent"), 64)
		if m, err := strconv.Atoi(h(prefix + "-window-minutes")); err == nil && m > 0 {
			minutes = m
		}
		after, err := strconv.Atoi(h(prefix + "-reset-after-seconds"))
		if err != nil {
			after = minutes * 60
		}
		return map[string]any{"used_percent": int(used), "limit_window_seconds": minutes * 60,
			"reset_after_seconds": after, "reset_at": time.Now().Add(time.Duration(after) * time.Second).Unix()}
	}
	limits := func(prefix string) (map[string]any, bool) {
		primary, secondary := window(prefix+"-primary", 300), window(prefix+"-secondary", 10080)
		spent := primary["used_percent"].(int) >= 100 || secondary["used_percent"].(int) >= 100
		return map[string]any{"allowed": !spent, "limit_reached": spent,
			"primary_window": primary, "secondary_window": secondary}, spent
	}
	main, _ := limits("x-codex")
	var additional []map[string]any
	for k := range b.Headers {
		prefix, ok := strings.CutSuffix(strings.ToLower(k), "-primary-used-percent")
		if !ok || prefix == "x-codex" || !strings.HasPrefix(prefix, "x-") {
			continue
		}
		id := strings.ReplaceAll(strings.TrimPrefix(prefix, "x-"), "-", "_")
		rl, _ := limits(prefix)
		additional = append(additional, map[string]any{"limit_name": cmp.Or(h(prefix+"-limit-name"), id),
			"metered_feature": id, "rate_limit": rl})
	}
	credits := map[string]any{"has_credits": false, "unlimited": false, "balance": nil}
	if v := h("x-codex-credits-has-credits"); v != "" {
		credits["has_credits"], credits["unlimited"] = v == "true" || v == "1", h("x-codex-credits-unlimited") == "true"
		if bal := h("x-codex-credits-balance"); bal != "" {
			credits["balance"] = bal
		}
	}
	plan := h("x-codex-plan-type")
	if plan == "" {
		plan = "plus"
	}
	payload := map[string]any{
		"plan_type":                plan,
		"rate_limit":               main,
		"rate_limit_reset_credits": map[string]any{"available_count": b.ResetCredits},
		"credits":                  credits,
	}
	if additional != nil {
		payload["additional_rate_limits"] = additional
	}
	body, _ := json.Marshal(payload)
	return body
}
