// What depends on what the model says, through the official `openai` client,
// against `tern serve --script` (the scripted backend replays given replies
// through the real engine, sampler, parsers and server): reasoning_content,
// tool calls (whole and streamed, with finish_reason "tool_calls"), a call
// written inside <think>, tool_choice "none", stop strings split across tokens.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Server, makeDummy, writeScript } from "./harness.mjs";

const weather = "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
const script = writeScript([
  { trigger: "capital", reply: "The user asks for a capital.</think>\n\nParis is the capital." },
  { trigger: "weather", reply: "I will check.\n\n" + weather },
  { trigger: "two cities", reply: weather + "\n" + weather.replace("Oslo", "Rome") },
  { trigger: "inside", reply: "Let me call it.\n" + weather + "</think>\n\n" },
  { trigger: "count", reply: "one two three STOP four" },
  { trigger: "mention", reply: "Tools are called with a <tool_call> tag." },
  { trigger: "Norway", reply: "Oslo is the capital." },
]);
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather",
  parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"] } } }];
let srv, client;
before(async () => {
  srv = await new Server(makeDummy(2), ["--script", script]).start();
  client = srv.client();
});
after(async () => srv.stop());
const user = (content) => [{ role: "user", content }];

test("reasoning comes back as reasoning_content", async () => {
  const c = await client.chat.completions.create({ messages: user("What is the capital of France?") });
  assert.equal(c.choices[0].message.reasoning_content, "The user asks for a capital.");
  assert.equal(c.choices[0].message.content, "Paris is the capital.");
  assert.equal(c.choices[0].finish_reason, "stop");
  const s = await client.chat.completions.create({ messages: user("capital?"), stream: true });
  let reasoning = "", content = "";
  for await (const ch of s) {
    reasoning += ch.choices[0]?.delta?.reasoning_content ?? "";
    content += ch.choices[0]?.delta?.content ?? "";
  }
  assert.equal(reasoning, "The user asks for a capital.");
  assert.equal(content, "Paris is the capital.");
});

test("tool calls, whole and streamed", async () => {
  const c = await client.chat.completions.create({ messages: user("weather in Oslo?"), tools, enable_thinking: false });
  const m = c.choices[0].message;
  assert.equal(c.choices[0].finish_reason, "tool_calls");
  assert.equal(m.content, "I will check.");
  assert.equal(m.tool_calls.length, 1);
  assert.equal(m.tool_calls[0].type, "function");
  assert.match(m.tool_calls[0].id, /^call_/);
  assert.equal(m.tool_calls[0].function.name, "get_weather");
  assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { city: "Oslo", days: 3 });

  const s = await client.chat.completions.create({ messages: user("weather in two cities"), tools, stream: true, enable_thinking: false });
  const calls = [];
  let finish;
  for await (const ch of s) {
    for (const d of ch.choices[0]?.delta?.tool_calls ?? []) {
      calls[d.index] ??= { name: "", arguments: "" };
      if (d.function?.name) calls[d.index].name += d.function.name;
      if (d.function?.arguments) calls[d.index].arguments += d.function.arguments;
    }
    finish = ch.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, "tool_calls");
  assert.deepEqual(calls.map((c) => [c.name, JSON.parse(c.arguments).city]), [["get_weather", "Oslo"], ["get_weather", "Rome"]]);
  // The streaming helper of the client assembles the same calls.
  const r = await client.chat.completions.stream({ messages: user("weather in two cities"), tools, enable_thinking: false }).finalChatCompletion();
  assert.equal(r.choices[0].message.tool_calls.length, 2);
});

test("a tool call inside <think> is still a call; a mention of the tag is not", async () => {
  const c = await client.chat.completions.create({ messages: user("call it inside"), tools });
  assert.equal(c.choices[0].message.tool_calls.length, 1);
  assert.equal(c.choices[0].message.reasoning_content, "Let me call it.");
  assert.equal(c.choices[0].finish_reason, "tool_calls");
  // Without tools: with them, tool_choice "auto" makes <tool_call> start a
  // call the grammar completes (tests/server/structured.test.mjs).
  const p = await client.chat.completions.create({ messages: user("mention the tag"), enable_thinking: false });
  assert.equal(p.choices[0].message.tool_calls, undefined);
  assert.equal(p.choices[0].message.content, "Tools are called with a <tool_call> tag.");
});

test("tool_choice none keeps calls as text", async () => {
  const c = await client.chat.completions.create({ messages: user("weather in Oslo?"), tools, tool_choice: "none", enable_thinking: false });
  assert.equal(c.choices[0].message.tool_calls, undefined);
  assert.ok(c.choices[0].message.content.includes("<tool_call>"));
});

test("a tool result round trip renders and runs", async () => {
  const first = await client.chat.completions.create({ messages: user("weather in Oslo?"), tools, enable_thinking: false });
  const msg = first.choices[0].message;
  const c = await client.chat.completions.create({
    messages: [...user("weather in Oslo?"), msg, { role: "tool", tool_call_id: msg.tool_calls[0].id, content: "{\"temp\": -3}" },
               ...user("what is the capital of Norway")],
    tools, enable_thinking: false,
  });
  assert.equal(c.choices[0].message.content, "Oslo is the capital.");
  assert.ok(c.usage.prompt_tokens_details.cached_tokens > 0);
});

test("stop strings are not matched inside reasoning and never show", async () => {
  const c = await client.chat.completions.create({ messages: user("count"), stop: ["STOP"], enable_thinking: false });
  assert.equal(c.choices[0].message.content, "one two three ");
  assert.equal(c.choices[0].finish_reason, "stop");
  const s = await client.chat.completions.create({ messages: user("count"), stop: "ee ST", stream: true, enable_thinking: false });
  let text = "";
  for await (const ch of s) text += ch.choices[0]?.delta?.content ?? "";
  assert.equal(text, "one two thr");
});
