// The official `openai` Node SDK's `chat.completions.parse()` and `.stream()` with a JSON
// Schema response format, against a running massgen server (MASSGEN_BASE_URL) whose panel
// is the simulator (it answers a schema with its smallest valid instance). Driven by
// tests/it/cli_clients.rs; exits non-zero on any failure.
import assert from "node:assert/strict";
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: `${process.env.MASSGEN_BASE_URL}/v1`,
  apiKey: "unused",
  maxRetries: 0,
  timeout: 60_000,
});

const schema = {
  type: "object",
  properties: {
    name: { type: "string" },
    age: { type: "integer" },
    role: { type: "string", enum: ["admin", "user"] },
    tags: { type: "array", items: { type: "string" } },
    address: {
      type: "object",
      properties: { city: { type: "string" } },
      required: ["city"],
      additionalProperties: false,
    },
  },
  required: ["name", "age", "role", "tags", "address"],
  additionalProperties: false,
};
const response_format = { type: "json_schema", json_schema: { name: "person", strict: true, schema } };
const expected = { name: "simulated", age: 1, role: "admin", tags: [], address: { city: "simulated" } };
const ask = (content) => ({ model: "massgen", messages: [{ role: "user", content }], response_format });

const completion = await client.chat.completions.parse(ask("A typical user as a person record."));
assert.deepEqual(completion.choices[0].message.parsed, expected);
assert.equal(completion.choices[0].finish_reason, "stop");

const stream = client.chat.completions.stream(ask("A typical user as a person record."));
let deltas = 0;
stream.on("content.delta", () => deltas++);
const streamed = await stream.finalChatCompletion();
assert.ok(deltas > 0, "the answer streamed");
// The stream helper fills `parsed` only for zod-made formats: parse the streamed text.
assert.deepEqual(JSON.parse(streamed.choices[0].message.content), expected);

// A corrective call fixes a broken first answer; a panel that never fits is a clear error.
const fixed = await client.chat.completions.parse(ask("A person record. [sim:invalid_json_once]"));
assert.deepEqual(fixed.choices[0].message.parsed, expected);
await assert.rejects(client.chat.completions.parse(ask("A person record. [sim:invalid_json]")), (e) => {
  assert.equal(e.status, 502);
  assert.equal(e.code, "invalid_output");
  return true;
});
console.log("ok");
