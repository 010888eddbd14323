// sdk.mjs drives the real `openai` Node SDK against rotor for
// cmd/rotor/e2e_test.go. It is configured the way any user's program is: the
// SDK reads OPENAI_BASE_URL and OPENAI_API_KEY from the environment (set by
// `rotor exec`, or exported from `rotor env`). Nothing here knows about rotor.
//
// Usage: node sdk.mjs <case>
//
// Every result is one JSON line on stdout: {"case": ..., "step": ..., ...}.
// Steps that need the Go test to act first (switch the fake upstream's
// behaviour, look at its open requests) print a line with "wait": true and
// then block until the test writes a line on stdin.
//
// Cases:
//   stream     responses.create({stream: true}); text from the deltas
//   nonstream  responses.create(); the SDK's output_text
//   toolcall   a function_call (get_weather), then function_call_output sent
//              back in a second request that answers with text
//   abort      a stream aborted with an AbortController after its first event
//   ratelimit  a 429 that must surface as OpenAI.RateLimitError
import OpenAI from "openai";
import readline from "node:readline";

const lines = readline.createInterface({ input: process.stdin });
const pending = [];
const waiting = [];
lines.on("line", (l) => (waiting.length ? waiting.shift()(l) : pending.push(l)));
lines.on("close", () => {
  while (waiting.length) waiting.shift()(null);
});

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

// proceed tells the Go test what happened and waits for its go-ahead.
function proceed(obj) {
  emit({ ...obj, wait: true });
  if (pending.length) return Promise.resolve(pending.shift());
  return new Promise((resolve) => waiting.push(resolve));
}

function errorInfo(err) {
  return {
    name: err?.constructor?.name ?? typeof err,
    message: String(err?.message ?? err),
    status: err?.status ?? null,
    code: err?.code ?? null,
    type: err?.type ?? null,
    error: err?.error ?? null,
    rate_limit_error: err instanceof OpenAI.RateLimitError,
    api_error: err instanceof OpenAI.APIError,
    user_abort: err instanceof OpenAI.APIUserAbortError,
  };
}

const model = "gpt-5";
const tools = [
  {
    type: "function",
    name: "get_weather",
    description: "Get the current weather for a city.",
    parameters: {
      type: "object",
      properties: { city: { type: "string" } },
      required: ["city"],
      additionalProperties: false,
    },
    strict: true,
  },
];

const cases = {
  async stream(client) {
    const stream = await client.responses.create({ model, input: "Say hello", stream: true });
    let text = "";
    const types = [];
    let usage = null;
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === "response.output_text.delta") text += ev.delta;
      if (ev.type === "response.completed") usage = ev.response.usage;
    }
    emit({ case: "stream", step: "done", text, events: types.length, first: types[0], last: types.at(-1), usage });
  },

  async nonstream(client) {
    const resp = await client.responses.create({ model, input: "Say hello" });
    emit({ case: "nonstream", step: "done", text: resp.output_text, status: resp.status, id: resp.id, usage: resp.usage });
  },

  async toolcall(client) {
    const input = [{ role: "user", content: "What is the weather in Paris?" }];
    const first = await client.responses.create({ model, input, tools });
    const calls = first.output.filter((o) => o.type === "function_call");
    if (calls.length !== 1) throw new Error("want one function_call, got " + JSON.stringify(first.output));
    const call = calls[0];
    const args = JSON.parse(call.arguments);
    await proceed({ case: "toolcall", step: "function_call", name: call.name, call_id: call.call_id, arguments: args });
    // Run the "tool" and send its result back, with the call, as the Responses API expects.
    const result = { city: args.city, temperature_c: 18, conditions: "cloudy" };
    const second = await client.responses.create({
      model,
      tools,
      input: [...input, call, { type: "function_call_output", call_id: call.call_id, output: JSON.stringify(result) }],
    });
    emit({ case: "toolcall", step: "done", text: second.output_text });
  },

  async abort(client) {
    const controller = new AbortController();
    const stream = await client.responses.create(
      { model, input: "Say hello", stream: true },
      { signal: controller.signal },
    );
    let events = 0;
    let completed = false;
    let caught = null;
    try {
      // After abort() the SDK still yields the events it had already read,
      // then ends the iteration (quietly, or with APIUserAbortError).
      for await (const ev of stream) {
        events++;
        if (ev.type === "response.completed") completed = true;
        if (events === 1) {
          emit({ case: "abort", step: "first_event", type: ev.type });
          controller.abort();
        }
      }
    } catch (err) {
      caught = errorInfo(err);
    }
    // Stay alive (the connection must be closed by the abort, not by our
    // exit) until the test has looked at the upstream.
    await proceed({ case: "abort", step: "aborted", events, completed, error: caught });
    emit({ case: "abort", step: "done" });
  },

  async ratelimit(client) {
    const started = Date.now();
    try {
      const resp = await client.responses.create({ model, input: "Say hello" });
      emit({ case: "ratelimit", step: "done", unexpected_success: true, text: resp.output_text });
    } catch (err) {
      emit({ case: "ratelimit", step: "done", elapsed_ms: Date.now() - started, error: errorInfo(err) });
    }
  },
};

const name = process.argv[2];
if (!cases[name]) {
  emit({ case: name ?? null, step: "usage", error: { message: "usage: node sdk.mjs <" + Object.keys(cases).join("|") + ">" } });
  process.exit(2);
}
// maxRetries comes from SDK_MAX_RETRIES when the test sets it, else the
// SDK's own default, as in any program.
const opts = {};
if (process.env.SDK_MAX_RETRIES) opts.maxRetries = Number(process.env.SDK_MAX_RETRIES);
const client = new OpenAI(opts);
try {
  await cases[name](client);
} catch (err) {
  emit({ case: name, step: "failed", error: errorInfo(err) });
  process.exitCode = 1;
}
lines.close();
process.stdin.destroy();
