// The APIs coding agents speak, through their official clients: Anthropic
// Messages (@anthropic-ai/sdk: create, stream, tools and tool_result round
// trips, count_tokens, errors) and OpenAI Responses (openai: plain, streamed,
// function calls and their outputs, previous_response_id), against the real
// engine on a tiny dummy and, for what depends on the model's words, the
// scripted backend. A multi-turn session through each reports its reuse and
// gives the same output with and without the cache.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Anthropic, Server, makeDummy, metric, post, untilMetric, writeScript } from "./harness.mjs";

const weather = "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>";
const script = writeScript([
  { trigger: "capital", reply: "They want a capital.</think>\n\nParis." },
  { trigger: "weather", reply: "Checking.\n\n" + weather },
  { trigger: "-3", reply: "It is cold: -3." },
  { trigger: "count", reply: "one two STOP three" },
]);
const model = makeDummy(5);
let real, scripted, cold;
before(async () => {
  [real, scripted, cold] = await Promise.all([
    new Server(model).start(), new Server(makeDummy(6), ["--script", script]).start(),
    new Server(model, ["--cache-mem", "0"]).start()]);
});
after(async () => Promise.all([real.stop(), scripted.stop(), cold.stop()]));
const anthropic = (s, opts = {}) => new Anthropic({ baseURL: s.url, apiKey: "none", maxRetries: 0, ...opts });
const tools = [{ name: "get_weather", description: "Weather", input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
const fnTools = [{ type: "function", name: "get_weather", description: "Weather", parameters: tools[0].input_schema }];

test("messages.create: content blocks, stop_reason, usage", async () => {
  const m = await anthropic(scripted).messages.create({ model: "x", max_tokens: 100, messages: [{ role: "user", content: "capital?" }],
                                                       thinking: { type: "enabled", budget_tokens: 2000 } }).catch((e) => e);
  assert.equal(m.status, 404, "unknown model");
  const r = await anthropic(scripted).messages.create({ max_tokens: 100, messages: [{ role: "user", content: "capital?" }],
                                                       thinking: { type: "enabled", budget_tokens: 2000 } });
  assert.equal(r.type, "message");
  assert.match(r.id, /^msg_/);
  assert.deepEqual(r.content.map((b) => b.type), ["thinking", "text"]);
  assert.equal(r.content[0].thinking, "They want a capital.");
  assert.equal(r.content[1].text, "Paris.");
  assert.equal(r.stop_reason, "end_turn");
  assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
  assert.equal(typeof r.usage.cache_read_input_tokens, "number");
  const s = await anthropic(scripted).messages.create({ max_tokens: 100, stop_sequences: ["STOP"], messages: [{ role: "user", content: "count" }] });
  assert.equal(s.stop_reason, "stop_sequence");
  assert.equal(s.stop_sequence, "STOP");
  assert.equal(s.content[0].text, "one two ");
  const l = await anthropic(real).messages.create({ max_tokens: 3, messages: [{ role: "user", content: "hi" }] });
  assert.equal(l.stop_reason, "max_tokens");
  assert.equal(l.usage.output_tokens, 3);
});

test("messages streaming: the documented event sequence", async () => {
  const stream = anthropic(scripted).messages.stream({ max_tokens: 100, messages: [{ role: "user", content: "capital?" }],
                                                        thinking: { type: "enabled", budget_tokens: 1024 } });
  const types = [];
  stream.on("streamEvent", (e) => types.push(e.type));
  const final = await stream.finalMessage();
  assert.equal(types[0], "message_start");
  assert.deepEqual(types.slice(-2), ["message_delta", "message_stop"]);
  assert.ok(types.includes("content_block_start") && types.includes("content_block_delta") && types.includes("content_block_stop"));
  assert.equal(final.content[0].thinking, "They want a capital.");
  assert.equal(final.content[1].text, "Paris.");
  // Raw bytes: each event named.
  const raw = await fetch(scripted.url + "/v1/messages", { method: "POST", headers: { "content-type": "application/json" },
                          body: JSON.stringify({ max_tokens: 20, stream: true, messages: [{ role: "user", content: "count" }] }) });
  const text = await raw.text();
  for (const block of text.trim().split("\n\n")) assert.match(block, /^event: [a-z_]+\ndata: \{/);
  assert.match(text, /^event: message_start\n[^\n]*\n\nevent: ping\n/);
});

test("tools: tool_use, then a tool_result round trip, streamed too", async () => {
  const c = anthropic(scripted);
  const r = await c.messages.create({ max_tokens: 200, tools, messages: [{ role: "user", content: "weather in Oslo?" }] });
  assert.equal(r.stop_reason, "tool_use");
  const use = r.content.find((b) => b.type === "tool_use");
  assert.match(use.id, /^toolu_/);
  assert.deepEqual(use.input, { city: "Oslo" });
  const r2 = await c.messages.create({ max_tokens: 200, tools, messages: [
    { role: "user", content: "weather in Oslo?" }, { role: "assistant", content: r.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: [{ type: "text", text: "-3 C" }] }] }] });
  assert.equal(r2.content.at(-1).text, "It is cold: -3.");
  assert.ok(r2.usage.cache_read_input_tokens > 0, "the second call reused the first");
  const s = await c.messages.stream({ max_tokens: 200, tools, messages: [{ role: "user", content: "weather in Oslo?" }] }).finalMessage();
  assert.deepEqual(s.content.find((b) => b.type === "tool_use").input, { city: "Oslo" });
});

test("count_tokens, images refused, errors in Anthropic's shape, x-api-key", async () => {
  const n = await anthropic(real).messages.countTokens({ messages: [{ role: "user", content: "Hello, world" }] });
  assert.ok(n.input_tokens > 3);
  const img = await post(real.url + "/v1/messages", { max_tokens: 5, messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "AA" } }] }] });
  assert.equal(img.status, 400);
  assert.equal(img.json.type, "error");
  assert.equal(img.json.error.type, "invalid_request_error");
  const noMax = await anthropic(real).messages.create({ messages: [{ role: "user", content: "x" }] }).catch((e) => e);
  assert.equal(noMax.status, 400);
  const keyed = await new Server(model, ["--api-key", "k1"]).start();
  try {
    const bad = await anthropic(keyed, { apiKey: "wrong" }).messages.create({ max_tokens: 2, messages: [{ role: "user", content: "x" }] }).catch((e) => e);
    assert.equal(bad.status, 401);
    assert.equal(bad.error.type, "error");
    const ok = await anthropic(keyed, { apiKey: "k1" }).messages.create({ max_tokens: 2, messages: [{ role: "user", content: "x" }] });
    assert.equal(ok.type, "message");
  } finally {
    await keyed.stop();
  }
});

test("a Messages session reuses its state and matches a cold server", async () => {
  const run = async (s) => {
    const msgs = [{ role: "user", content: "Tell me about rivers." }];
    const out = [];
    for (let turn = 0; turn < 3; turn++) {
      const r = await anthropic(s).messages.create({ max_tokens: 6, temperature: 0, system: "Be brief.", messages: msgs });
      out.push(r);
      msgs.push({ role: "assistant", content: r.content }, { role: "user", content: "more " + turn });
    }
    return out;
  };
  const [warm, coldRuns] = [await run(real), await run(cold)];
  for (let t = 0; t < 3; t++) assert.deepEqual(warm[t].content, coldRuns[t].content, `turn ${t}`);
  assert.ok(warm[2].usage.cache_read_input_tokens > 10);
  assert.equal(coldRuns[2].usage.cache_read_input_tokens, 0);
});

test("responses.create: plain, streamed, function calls and outputs, previous_response_id", async () => {
  const c = scripted.client();
  const r = await c.responses.create({ input: "capital?", instructions: "Be brief." });
  assert.equal(r.object, "response");
  assert.equal(r.status, "completed");
  assert.deepEqual(r.output.map((o) => o.type), ["reasoning", "message"]);
  assert.equal(r.output_text, "Paris.");
  assert.equal(typeof r.usage.input_tokens_details.cached_tokens, "number");

  const stream = await c.responses.create({ input: "capital?", stream: true });
  const events = [];
  for await (const e of stream) events.push(e);
  assert.equal(events[0].type, "response.created");
  assert.equal(events[1].type, "response.in_progress");
  assert.equal(events.at(-1).type, "response.completed");
  for (const t of ["response.output_item.added", "response.content_part.added", "response.output_text.delta",
                   "response.reasoning_text.delta", "response.output_text.done", "response.output_item.done"])
    assert.ok(events.some((e) => e.type === t), t);
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  assert.equal(events.at(-1).response.output_text, "Paris.");

  const f = await c.responses.create({ input: "weather in Oslo?", tools: [...fnTools, { type: "web_search" }] });
  const call = f.output.find((o) => o.type === "function_call");
  assert.equal(call.name, "get_weather");
  assert.deepEqual(JSON.parse(call.arguments), { city: "Oslo" });
  const f2 = await c.responses.create({ previous_response_id: f.id, tools: fnTools, reasoning: { effort: "none" },
                                        input: [{ type: "function_call_output", call_id: call.call_id, output: "-3 C" }] });
  assert.equal(f2.output_text, "It is cold: -3.");
  assert.ok(f2.usage.input_tokens_details.cached_tokens > 0);
  const missing = await c.responses.create({ previous_response_id: "resp_nope", input: "x" }).catch((e) => e);
  assert.equal(missing.status, 404);
  const fs = await c.responses.create({ input: "weather in Oslo?", tools: fnTools, stream: true });
  const ev = [];
  for await (const e of fs) ev.push(e);
  assert.ok(ev.some((e) => e.type === "response.function_call_arguments.delta"));
  assert.ok(ev.some((e) => e.type === "response.function_call_arguments.done"));
});

test("a Responses session reuses its state and matches a cold server", async () => {
  const run = async (s) => {
    const c = s.client();
    const out = [];
    let prev;
    for (let turn = 0; turn < 3; turn++) {
      const r = await c.responses.create({ input: "turn " + turn + " about rivers", previous_response_id: prev, max_output_tokens: 6, temperature: 0,
                                           reasoning: { effort: "none" } });
      out.push(r);
      prev = r.id;
    }
    return out;
  };
  const warm = await run(real), coldRuns = await run(cold);
  for (let t = 0; t < 3; t++) assert.equal(warm[t].output_text, coldRuns[t].output_text, `turn ${t}`);
  assert.ok(warm[2].usage.input_tokens_details.cached_tokens > 10);
  assert.equal(warm[2].status, "incomplete");
  assert.equal(warm[2].incomplete_details.reason, "max_output_tokens");
});

test("a Messages or Responses client that goes away cancels its request", async () => {
  const cancelled = 'tern_generations_total{finish="cancelled"}';
  const before = await metric(real, cancelled);
  const s1 = anthropic(real).messages.stream({ max_tokens: 2000, temperature: 0, messages: [{ role: "user", content: "long story" }] });
  let n = 0;
  s1.on("text", () => { if (++n === 3) s1.abort(); });
  await s1.done().catch(() => {});
  const ctl = new AbortController();
  const s2 = await real.client().responses.create({ input: "long story", stream: true, max_output_tokens: 2000 }, { signal: ctl.signal });
  n = 0;
  try { for await (const e of s2) if (e.type.endsWith(".delta") && ++n === 3) ctl.abort(); } catch {}
  await untilMetric(real, cancelled, before + 2);
});
