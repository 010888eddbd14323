// chat.mjs drives real Chat Completions clients against rotor for
// cmd/rotor/e2e_chat_test.go: the `openai` SDK's chat.completions, the AI
// SDK's openai.chat() and LangChain's default ChatOpenAI. Each is set up as
// its own documentation says, from OPENAI_BASE_URL and OPENAI_API_KEY (set
// by `rotor exec`); nothing here knows about rotor.
//
// Usage: node chat.mjs <case>
//
// Every result is one JSON line on stdout: {"case": ..., "step": ..., ...}.
// A line with "wait": true blocks until the test writes a line on stdin.
//
// Cases:
//   openai-plain    chat.completions.create, not streamed
//   openai-stream   chat.completions.create({stream: true, include_usage})
//   openai-tool     a get_weather tool call, then the tool's result sent back
//   openai-abort    a stream aborted after its first chunk
//   ai-generate     AI SDK generateText with openai.chat()
//   ai-stream       AI SDK streamText
//   ai-tool         AI SDK generateText with a tool, run to the final answer
//   lc-invoke       LangChain ChatOpenAI.invoke
//   lc-stream       LangChain ChatOpenAI.stream
import OpenAI from "openai";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText, tool, stepCountIs } from "ai";
import { ChatOpenAI } from "@langchain/openai";
import { z } from "zod";
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

function proceed(obj) {
  emit({ ...obj, wait: true });
  if (pending.length) return Promise.resolve(pending.shift());
  return new Promise((resolve) => waiting.push(resolve));
}

function errorInfo(err) {
  return {
    name: err?.constructor?.name ?? typeof err,
    message: String(err?.message ?? err),
    status: err?.status ?? err?.statusCode ?? null,
    user_abort: err instanceof OpenAI.APIUserAbortError,
  };
}

const model = "gpt-5";
const baseURL = process.env.OPENAI_BASE_URL;
const apiKey = process.env.OPENAI_API_KEY;
const messages = [{ role: "user", content: "Say hello" }];
const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather for a city.",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false },
  },
};
const weather = (city) => ({ city, temperature_c: 18 });

const cases = {
  async "openai-plain"(client) {
    const r = await client.chat.completions.create({ model, messages });
    emit({ step: "done", text: r.choices[0].message.content, finish: r.choices[0].finish_reason, object: r.object, usage: r.usage });
  },

  async "openai-stream"(client) {
    const s = await client.chat.completions.create({ model, messages, stream: true, stream_options: { include_usage: true } });
    let text = "", chunks = 0, finish = null, usage = null, role = null;
    for await (const c of s) {
      chunks++;
      if (c.usage) usage = c.usage;
      const ch = c.choices[0];
      if (!ch) continue;
      role ??= ch.delta?.role ?? null;
      text += ch.delta?.content ?? "";
      finish = ch.finish_reason ?? finish;
    }
    emit({ step: "done", text, chunks, finish, usage, role });
  },

  async "openai-tool"(client) {
    const first = await client.chat.completions.create({ model, messages, tools: [weatherTool] });
    const msg = first.choices[0].message;
    const call = msg.tool_calls?.[0];
    emit({ step: "tool_call", finish: first.choices[0].finish_reason, name: call?.function?.name, id: call?.id, arguments: JSON.parse(call?.function?.arguments ?? "null") });
    const args = JSON.parse(call.function.arguments);
    const second = await client.chat.completions.create({
      model,
      tools: [weatherTool],
      messages: [...messages, msg, { role: "tool", tool_call_id: call.id, content: JSON.stringify(weather(args.city)) }],
    });
    emit({ step: "done", text: second.choices[0].message.content, finish: second.choices[0].finish_reason });
  },

  async "openai-abort"(client) {
    const controller = new AbortController();
    let chunks = 0, caught = null, finished = false;
    try {
      const s = await client.chat.completions.create({ model, messages, stream: true }, { signal: controller.signal });
      for await (const c of s) {
        chunks++;
        if (c.choices[0]?.finish_reason) finished = true;
        if (chunks === 1) controller.abort();
      }
    } catch (err) {
      caught = errorInfo(err);
    }
    await proceed({ step: "aborted", chunks, finished, error: caught });
    emit({ step: "done" });
  },

  async "ai-generate"() {
    const openai = createOpenAI({ baseURL, apiKey });
    const r = await generateText({ model: openai.chat(model), prompt: "Say hello" });
    emit({ step: "done", text: r.text, finish: r.finishReason, usage: r.usage });
  },

  async "ai-stream"() {
    const openai = createOpenAI({ baseURL, apiKey });
    const r = streamText({ model: openai.chat(model), prompt: "Say hello" });
    let text = "", parts = 0;
    for await (const t of r.textStream) {
      parts++;
      text += t;
    }
    emit({ step: "done", text, parts, finish: await r.finishReason, usage: await r.usage });
  },

  async "ai-tool"() {
    const openai = createOpenAI({ baseURL, apiKey });
    const r = await generateText({
      model: openai.chat(model),
      prompt: "What is the weather in Paris?",
      tools: {
        get_weather: tool({
          description: "Get the current weather for a city.",
          inputSchema: z.object({ city: z.string() }),
          execute: async ({ city }) => weather(city),
        }),
      },
      stopWhen: stepCountIs(3),
    });
    const calls = r.steps.flatMap((s) => s.toolCalls.map((c) => ({ name: c.toolName, input: c.input })));
    emit({ step: "done", text: r.text, steps: r.steps.length, calls });
  },

  async "lc-invoke"() {
    const llm = new ChatOpenAI({ model, apiKey, configuration: { baseURL } });
    const r = await llm.invoke("Say hello");
    emit({ step: "done", text: r.content, usage: r.usage_metadata ?? null });
  },

  async "lc-stream"() {
    const llm = new ChatOpenAI({ model, apiKey, configuration: { baseURL } });
    let text = "", chunks = 0;
    for await (const c of await llm.stream("Say hello")) {
      chunks++;
      text += typeof c.content === "string" ? c.content : "";
    }
    emit({ step: "done", text, chunks });
  },
};

const name = process.argv[2];
if (!cases[name]) {
  emit({ case: name ?? null, step: "usage", error: { message: "usage: node chat.mjs <" + Object.keys(cases).join("|") + ">" } });
  process.exit(2);
}
try {
  await cases[name](new OpenAI());
} catch (err) {
  emit({ case: name, step: "failed", error: errorInfo(err) });
  process.exitCode = 1;
}
lines.close();
process.stdin.destroy();
