// What coding agents send that SDK tests do not (issue 43): system messages
// inside Anthropic's list and several leading ones, adaptive thinking,
// output_config.format, context-limit errors in each API's wording, no tool
// parsing without tools, Codex's namespaced tools, the root and model list
// probes, model aliases and '*', a log line per refusal, and Claude Code's
// per-request billing header that must not end prefix reuse.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Anthropic, Server, makeDummy, writeScript, post } from "./harness.mjs";

const call = (fn, param, value) =>
  `<tool_call>\n<function=${fn}>\n<parameter=${param}>\n${value}\n</parameter>\n</function>\n</tool_call>`;
const script = writeScript([
  { trigger: "hello\n<system-reminder>\nStay terse.\n</system-reminder>", reply: "REMINDED" },
  { trigger: "Stay terse.\n</system-reminder><|im_end|>\n<|im_start|>user\nhello", reply: "ON ITS OWN" },
  { trigger: "<|im_start|>system\nFirst rule.\n\nSecond rule.<|im_end|>", reply: "Done.</think>\n\nMERGED" },
  { trigger: "mention", reply: "Done.</think>\n\nA call looks like " + call("x", "y", "z") },
  { trigger: "namespaced", reply: "Done.</think>\n\n" + call("weather__get", "city", "Oslo") },
  { trigger: "-3 C", reply: "Done.</think>\n\nCOLD" },
  { trigger: "think adaptively", reply: "Pondering.</think>\n\nADAPTIVE" },
  { trigger: "write it", reply: "Done.</think>\n\n<tool_call>\n<function=write>\n<parameter=content>\nhi\n</parameter>\n" +
                                "<parameter=path>\nhttps://x.test/a\n</parameter>\n</function>\n</tool_call>" },
]);
const nsTools = [{ type: "namespace", name: "weather", description: "Weather tools", tools: [
  { type: "function", name: "get", description: "Weather", strict: false,
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }] },
  { type: "web_search" }];
let scripted, real, small, aliased;
before(async () => {
  const model = makeDummy(11);
  [scripted, real, small, aliased] = await Promise.all([
    new Server(makeDummy(12), ["--script", script]).start(),
    new Server(model).start(),
    new Server(model, ["--ctx-size", "64"]).start(),
    new Server(model, ["--served-model-name", "qwen3.6", "--served-model-name", "claude-x",
                       "--served-model-name", "*"]).start()]);
});
after(async () => Promise.all([scripted.stop(), real.stop(), small.stop(), aliased.stop()]));
const anthropic = (s) => new Anthropic({ baseURL: s.url, apiKey: "none", maxRetries: 0 });
const text = (m) => m.content.filter((b) => b.type === "text").map((b) => b.text).join("");

test("Anthropic: a system message inside messages goes to the user side, the same way every turn", async () => {
  // As Claude Code sends it: right after the user's message.
  const msgs = [{ role: "user", content: "hello" }, { role: "system", content: [{ type: "text", text: "Stay terse." }] }];
  const r = await anthropic(scripted).messages.create({ max_tokens: 50, system: "Base.", messages: msgs });
  assert.equal(text(r), "REMINDED");
  const r2 = await anthropic(scripted).messages.create({ max_tokens: 50, system: "Base.", messages: [
    ...msgs, { role: "assistant", content: r.content }, { role: "user", content: "and now?" }] });
  assert.ok(r2.usage.cache_read_input_tokens >= r.usage.input_tokens,
            `the first turn renders as before: ${r2.usage.cache_read_input_tokens} of ${r.usage.input_tokens} reused`);
  // After an assistant turn: a user message of its own.
  const own = await anthropic(scripted).messages.create({ max_tokens: 50, messages: [
    { role: "user", content: "first" }, { role: "assistant", content: "ok" },
    { role: "system", content: "Stay terse." }, { role: "user", content: "hello" }] });
  assert.equal(text(own), "ON ITS OWN");
  const last = await post(scripted.url + "/v1/messages", { max_tokens: 5, messages: [
    { role: "user", content: "a" }, { role: "assistant", content: "b" }, { role: "system", content: "c" }] });
  assert.equal(last.status, 200, last.text);
});

test("several leading system and developer messages (and instructions) merge into one", async () => {
  const c = await scripted.client().chat.completions.create({ messages: [
    { role: "system", content: "First rule." }, { role: "developer", content: "Second rule." },
    { role: "user", content: "go" }] });
  assert.equal(c.choices[0].message.content, "MERGED");
  const r = await scripted.client().responses.create({ instructions: "First rule.", input: [
    { type: "message", role: "developer", content: "Second rule." }, { type: "message", role: "user", content: "go" }] });
  assert.equal(r.output_text, "MERGED");
  // A system message later in a chat goes to the user side instead of failing.
  const mid = await scripted.client().chat.completions.create({ chat_template_kwargs: { enable_thinking: false }, messages: [
    { role: "user", content: "first" }, { role: "assistant", content: "ok" },
    { role: "system", content: "Stay terse." }, { role: "user", content: "hello" }] });
  assert.equal(mid.choices[0].message.content, "ON ITS OWN");
});

test("Anthropic: thinking adaptive is thinking enabled; output_config.format constrains the answer", async () => {
  const r = await anthropic(scripted).messages.create({ max_tokens: 50, thinking: { type: "adaptive" },
    output_config: { effort: "low" }, context_management: { edits: [] },
    messages: [{ role: "user", content: "think adaptively" }] });
  assert.deepEqual(r.content.map((b) => b.type), ["thinking", "text"]);
  assert.equal(text(r), "ADAPTIVE");
  const schema = { type: "object", properties: { title: { type: "string", maxLength: 12 } },
                   required: ["title"], additionalProperties: false };
  for (let seed = 0; seed < 3; seed++) {
    const t = await anthropic(real).messages.create({ max_tokens: 120, temperature: 1, metadata: {},
      output_config: { format: { type: "json_schema", schema } }, messages: [{ role: "user", content: "title " + seed }] });
    const v = JSON.parse(text(t));
    assert.deepEqual(Object.keys(v), ["title"]);
    assert.ok(typeof v.title === "string" && [...v.title].length <= 12);
  }
  const bad = await post(real.url + "/v1/messages", { max_tokens: 5, messages: [{ role: "user", content: "x" }],
    output_config: { format: { type: "json_schema", schema: { type: "object", not: { required: ["a"] } } } } });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.type, "invalid_request_error");
  assert.match(bad.json.error.message, /output_config\.format/);
  assert.match(bad.json.error.message, /not/);
});

test("context limits: each API's own wording, and no max_tokens means what the context leaves", async () => {
  const long = "word ".repeat(80);
  const a = await post(small.url + "/v1/messages", { max_tokens: 5, messages: [{ role: "user", content: long }] });
  assert.equal(a.status, 400);
  assert.equal(a.json.error.type, "invalid_request_error");
  assert.match(a.json.error.message, /^prompt is too long: \d+ tokens > 63 maximum$/);
  const b = await post(small.url + "/v1/messages", { max_tokens: 60, messages: [{ role: "user", content: "hi" }] });
  assert.equal(b.status, 400);
  assert.match(b.json.error.message, /^input length and `max_tokens` exceed context limit: \d+ \+ 60 > 64, /);
  for (const path of ["/v1/chat/completions", "/v1/responses"]) {
    const body = path === "/v1/responses" ? { input: long } : { messages: [{ role: "user", content: long }] };
    const o = await post(small.url + path, body);
    assert.equal(o.status, 400, path);
    assert.equal(o.json.error.code, "context_length_exceeded", path);
    assert.match(o.json.error.message, /maximum context length is 64 tokens/, path);
  }
  const fits = await small.client().chat.completions.create({ messages: [{ role: "user", content: "hi" }], ignore_eos: true });
  assert.equal(fits.choices[0].finish_reason, "length");
  assert.ok(fits.usage.prompt_tokens + fits.usage.completion_tokens <= 64);
  assert.match(small.log, /status=400 error="prompt is too long/);
});

test("without tools, a <tool_call> in the answer is text", async () => {
  const c = await scripted.client().chat.completions.create({ messages: [{ role: "user", content: "mention" }] });
  assert.equal(c.choices[0].finish_reason, "stop");
  assert.equal(c.choices[0].message.tool_calls, undefined);
  assert.match(c.choices[0].message.content, /<tool_call>\n<function=x>/);
});

test("Responses: namespaced tools are flattened, and the call comes back with its namespace", async () => {
  const c = scripted.client();
  const r = await c.responses.create({ input: "namespaced weather", tools: nsTools });
  const fc = r.output.find((o) => o.type === "function_call");
  assert.equal(fc.name, "get");
  assert.equal(fc.namespace, "weather");
  assert.deepEqual(JSON.parse(fc.arguments), { city: "Oslo" });
  const r2 = await c.responses.create({ tools: nsTools, input: [
    { type: "message", role: "user", content: "namespaced weather" },
    { type: "function_call", call_id: fc.call_id, name: "get", namespace: "weather", arguments: fc.arguments },
    { type: "function_call_output", call_id: fc.call_id, output: "-3 C" }] });
  assert.equal(r2.output_text, "COLD");
  assert.ok(r2.usage.input_tokens_details.cached_tokens > 0, "the call's history renders as it was generated");
  assert.equal(scripted.log.match(/tools of type 'web_search' are skipped/g)?.length, 1, "one warning per type");
});

test("probes: GET and HEAD /, /v1/models with context size; aliases and '*'", async () => {
  for (const method of ["GET", "HEAD"]) assert.equal((await fetch(aliased.url + "/", { method })).status, 200);
  const models = await (await fetch(aliased.url + "/v1/models")).json();
  assert.deepEqual(models.data.map((m) => m.id), ["qwen3.6", "claude-x"]);
  for (const m of models.data) assert.ok(m.context_length > 0 && m.max_model_len === m.context_length);
  for (const name of ["qwen3.6", "claude-x", "claude-haiku-4-5"]) {
    const r = await anthropic(aliased).messages.create({ model: name, max_tokens: 2, messages: [{ role: "user", content: "x" }] });
    assert.equal(r.model, name);
    const c = await aliased.client().chat.completions.create({ model: name, max_tokens: 2, messages: [{ role: "user", content: "x" }] });
    assert.equal(c.model, name);
  }
  const unknown = await post(real.url + "/v1/chat/completions", { model: "nope", messages: [{ role: "user", content: "x" }] });
  assert.equal(unknown.status, 404);
  assert.match(real.log, /request id="req_[0-9a-f]+" endpoint="\/v1\/chat\/completions" status=404/);
});

test("refused requests leave one warning line with id, endpoint, status and message, never the prompt", async () => {
  const secret = "SECRET-PROMPT-TEXT";
  const r = await post(real.url + "/v1/chat/completions", { messages: [{ role: "wizard", content: secret }] },
                       { "x-request-id": "abc-123" });
  assert.equal(r.status, 400);
  const lines = real.log.split("\n").filter((l) => l.includes('id="abc-123"'));
  assert.equal(lines.length, 1);
  assert.match(lines[0], /warn.*endpoint="\/v1\/chat\/completions" status=400 error="'messages\[0\]\.role' must be/);
  assert.ok(!real.log.includes(secret));
  const bad = await post(real.url + "/v1/messages", "{not json");
  assert.equal(bad.status, 400);
  assert.match(real.log, /endpoint="\/v1\/messages" status=400 error="the body is not valid JSON/);
});

test("Claude Code's billing header (a new hash per request) does not end prefix reuse", async () => {
  const system = (hash) => [{ type: "text", text: `x-anthropic-billing-header: cc_version=2.1.332.abc; cc_entrypoint=cli; cch=${hash};` },
                            { type: "text", text: "You are a helpful coding agent. ".repeat(20) }];
  const msgs = [{ role: "user", content: "List the files." }];
  const first = await anthropic(real).messages.create({ max_tokens: 4, temperature: 0, system: system("a1b2c"), messages: msgs });
  const second = await anthropic(real).messages.create({ max_tokens: 4, temperature: 0, system: system("f9e8d"), messages: [
    ...msgs, { role: "assistant", content: first.content }, { role: "user", content: "And again." }] });
  assert.ok(second.usage.cache_read_input_tokens >= 100, `reused ${second.usage.cache_read_input_tokens}`);
  assert.equal(real.log.match(/billing-header line of system prompts is dropped/g)?.length, 1);
  // A prompt that leaves the cache inside a message: reuse stops at the
  // snapshot before, the log says where it left.
  await anthropic(real).messages.create({ max_tokens: 2, system: system("00000"),
                                          messages: [{ role: "user", content: "List the files, please." }] });
  const [, cached, left] = [...real.log.matchAll(/cached=(\d+) .*cache_left_at=(\d+)/g)].at(-1);
  assert.ok(Number(left) > Number(cached), `cache_left_at=${left} cached=${cached}`);
});

test("tool-call arguments nested 20,000 deep are a 400 naming the field, and the server lives on", async () => {
  const deep = "[".repeat(20000) + "]".repeat(20000);
  const args = `{"a": ${deep}}`;
  const chat = await post(real.url + "/v1/chat/completions", { messages: [{ role: "user", content: "x" },
    { role: "assistant", content: "", tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: args } }] },
    { role: "tool", tool_call_id: "c1", content: "ok" }] });
  assert.equal(chat.status, 400);
  assert.equal(chat.json.error.param, "messages[1].tool_calls[0].function.arguments");
  assert.match(chat.json.error.message, /nests deeper than 64 levels/);
  const resp = await post(real.url + "/v1/responses", { input: [{ type: "message", role: "user", content: "x" },
    { type: "function_call", call_id: "c1", name: "f", arguments: args },
    { type: "function_call_output", call_id: "c1", output: "ok" }] });
  assert.equal(resp.status, 400);
  assert.match(resp.json.error.message, /nests deeper than 64 levels/);
  assert.equal((await fetch(real.url + "/health")).status, 200);
});

test("agent tool schemas the grammar cannot enforce degrade (logged), and parameters come in any order", async () => {
  const params = { type: "object", additionalProperties: false, required: ["path", "content"], properties: {
    path: { type: "string", format: "uri" },
    content: { type: "string", maxLength: 524288 },
    meta: { type: "object", propertyNames: { pattern: "^[a-z]+$" }, additionalProperties: { type: "string" } },
    tags: { type: "array", items: { type: "string" }, maxItems: 100000, uniqueItems: true },
    mode: { not: { const: "x" } } } };
  const tools = [{ type: "function", function: { name: "write", description: "Write a file", parameters: params } }];
  for (const tool_choice of ["auto", "required"]) {
    const c = await scripted.client().chat.completions.create({ tools, tool_choice, messages: [{ role: "user", content: "write it" }] });
    assert.equal(c.choices[0].finish_reason, "tool_calls", tool_choice);
    assert.deepEqual(JSON.parse(c.choices[0].message.tool_calls[0].function.arguments),
                     { content: "hi", path: "https://x.test/a" }, tool_choice);
  }
  assert.match(scripted.log, /warning.*write.*mode.*not/);
  // response_format stays strict: the keyword and where it is.
  const strict = await post(scripted.url + "/v1/chat/completions", { messages: [{ role: "user", content: "x" }],
    response_format: { type: "json_schema", json_schema: { name: "p", schema: params } } });
  assert.equal(strict.status, 400);
  assert.match(strict.json.error.message, /^'response_format': .*'(not|maxLength|maxItems)'.* at #\/properties\/(mode|content|tags)/);
});

test("Responses: item_reference items stand for the stored output items they name", async () => {
  const c = scripted.client();
  const r1 = await c.responses.create({ input: "think adaptively" });
  assert.deepEqual(r1.output.map((o) => o.type), ["reasoning", "message"]);
  const r2 = await c.responses.create({ input: [
    { type: "message", role: "user", content: "think adaptively" },
    ...r1.output.map((o) => ({ type: "item_reference", id: o.id })),
    { type: "message", role: "user", content: "namespaced weather" }], tools: nsTools });
  assert.equal(r2.output.find((o) => o.type === "function_call").namespace, "weather");
  assert.ok(r2.usage.input_tokens_details.cached_tokens > 0);
  const missing = await post(scripted.url + "/v1/responses", { input: [{ type: "item_reference", id: "rs_nope" }] });
  assert.equal(missing.status, 404);
  assert.equal(missing.json.error.param, "input[0].id");
});
