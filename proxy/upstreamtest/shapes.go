package upstreamtest

import (
	"fmt"
	"strings"
)

// Request bodies of the shapes that cost rotor the most per byte (issue
// 45): a client pasting a file as its first message, with no id naming
// the conversation, so that rotor derives one (docs/selection.md); and Codex's
// history, dense with small items and account-bound blobs (docs/codex.md).
// The proxy's benchmarks and cmd/rotor-bench send the same bytes.

// pastedLine is one line of a pasted source file, as JSON string text:
// a quote and a newline escape in every line, as code has.
const pastedLine = `	fmt.Println(\"the quick brown fox jumps over the lazy dog\", i) // 0123456789\n`

// pasted is about size bytes of pasted-file text, as JSON string text.
func pasted(size int) string {
	return strings.Repeat(pastedLine, max(size/len(pastedLine), 1))
}

// PastedFileResponses is a Responses request whose first user message,
// in an input array, is a pasted file of about size bytes; it names no
// conversation.
func PastedFileResponses(size int, stream bool) []byte {
	return fmt.Appendf(nil, `{"model":"gpt-5","instructions":"You review code.","stream":%t,"input":[`+
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"Review this file:\n%s"}]}]}`, stream, pasted(size))
}

// PastedFileChat is the same as a Chat Completions request, the file in
// its first user message.
func PastedFileChat(size int, stream bool) []byte {
	return fmt.Appendf(nil, `{"model":"gpt-5","stream":%t,"messages":[{"role":"system","content":"You review code."},`+
		`{"role":"user","content":"Review this file:\n%s"}]}`, stream, pasted(size))
}

// CodexHistory is a request as Codex CLI sends one late in a long turn:
// about size bytes of history, turn after turn of a user message, a
// reasoning item whose encrypted_content blob() mints, a tool call and its
// output, and an answer; with prompt_cache_key, store false and
// reasoning.encrypted_content included, as Codex sends them.
func CodexHistory(size int, blob func() string) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"gpt-5-codex","instructions":"You are Codex, a coding agent.","input":[`)
	output := strings.Repeat(`ok  \tgithub.com/example/pkg\t0.012s\n`, 100) // ~3.5 KiB of tool output
	for turn := 0; b.Len() < size; turn++ {
		if turn > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"message","role":"user","content":[{"type":"input_text","text":"Step %d: run the tests again."}]},`, turn)
		fmt.Fprintf(&b, `{"type":"reasoning","id":"rs_%d","summary":[{"type":"summary_text","text":"**Running the tests** I will run go test."}],"encrypted_content":"%s"},`, turn, blob())
		fmt.Fprintf(&b, `{"type":"function_call","id":"fc_%d","call_id":"call_%d","name":"shell","arguments":"{\"command\":[\"go\",\"test\",\"./...\"]}"},`, turn, turn)
		fmt.Fprintf(&b, `{"type":"function_call_output","call_id":"call_%d","output":"%s"},`, turn, output)
		fmt.Fprintf(&b, `{"type":"message","role":"assistant","content":[{"type":"output_text","text":"The tests pass (step %d)."}]}`, turn)
	}
	b.WriteString(`],"tools":[{"type":"function","name":"shell","parameters":{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}}}}}],` +
		`"tool_choice":"auto","parallel_tool_calls":false,"reasoning":{"effort":"medium","summary":"auto"},"store":false,"stream":true,` +
		`"include":["reasoning.encrypted_content"],"prompt_cache_key":"0199a7c2-codex-session"}`)
	return []byte(b.String())
}
