// Structured outputs through the server (issue 24), on a tiny random-weight
// dummy where nothing but the constraint can make an answer valid: every
// answer is validated by python3-jsonschema (not tern's code), at temperature
// 1 over several seeds; tool calls under "required" / a named function /
// Anthropic "any" and "tool" validate against the tool's schema; GBNF and
// json_schema on /v1/completions; the Responses API's text.format; and the
// 400s that name a bad schema or grammar.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { Anthropic, OpenAI, Server, makeDummy, post } from "./harness.mjs";

let server;
before(async () => { server = await new Server(makeDummy(11)).start(); });
after(async () => server.stop());
const openai = () => new OpenAI({ baseURL: server.url + "/v1", apiKey: "none", maxRetries: 0 });
const anthropic = () => new Anthropic({ baseURL: server.url, apiKey: "none", maxRetries: 0 });

// python3-jsonschema's verdict on each [schema, text] (the text parsed as JSON there).
function validate(pairs) {
  const code = `
import json, sys, jsonschema
out = []
for schema, text in json.load(sys.stdin):
    try:
        jsonschema.validate(json.loads(text), schema, format_checker=jsonschema.FormatChecker())
        out.append("ok")
    except Exception as e:
        out.append(type(e).__name__ + ": " + str(e).splitlines()[0])
print(json.dumps(out))`;
  const r = spawnSync("python3", ["-c", code], { input: JSON.stringify(pairs), encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
}
const assertValid = (pairs) => validate(pairs).forEach((v, i) => assert.equal(v, "ok", `${v}: ${pairs[i][1]}`));

const person = {
  type: "object",
  properties: {
    name: { type: "string", minLength: 1, maxLength: 12 },
    age: { type: "integer", minimum: 0, maximum: 130 },
    email: { type: "string", format: "email" },
    tags: { type: "array", items: { enum: ["a", "b", "c"] }, maxItems: 3 },
  },
  required: ["name", "age"],
  additionalProperties: false,
};
// The same with every string bounded: a random model's answer must end.
const bounded = { ...person, properties: { name: person.properties.name, age: person.properties.age, tags: person.properties.tags } };
const weatherTool = {
  type: "function",
  function: {
    name: "get_weather", description: "Weather in a city",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 20 }, days: { type: "integer", minimum: 1, maximum: 7 } },
                  required: ["city", "days"] },
  },
};
const timeTool = { type: "function", function: { name: "get_time", parameters: { type: "object", properties: { zone: { enum: ["UTC", "CET"] } }, required: ["zone"] } } };

// Thinking off throughout: a random model's reasoning (free, unconstrained)
// would not end; the constraint after </think> is tested in tests/grammar.
// The email's local part is unbounded too, so a seed may run out of tokens:
// every answer that ends must validate, and most must end.
test("response_format json_schema: every sampled answer validates", async () => {
  const pairs = [];
  for (const seed of [1, 2, 3, 4, 5, 6]) {
    const r = await openai().chat.completions.create({
      messages: [{ role: "user", content: "Describe a person." }], temperature: 1, seed, max_tokens: 400,
      response_format: { type: "json_schema", json_schema: { name: "person", schema: person, strict: true } },
      chat_template_kwargs: { enable_thinking: false },
    });
    assert.ok(["stop", "length"].includes(r.choices[0].finish_reason), JSON.stringify(r.choices[0]));
    if (r.choices[0].finish_reason === "stop") pairs.push([person, r.choices[0].message.content]);
  }
  assert.ok(pairs.length >= 4, `only ${pairs.length} of 6 seeds' objects ended within 400 tokens`);
  assertValid(pairs);
});

// A free object's strings are unbounded, and a random model seldom closes
// one: of several seeds, those that end ("stop") must be valid objects, and
// one must end within the budget.
// Whether text is the beginning of some JSON value: an answer cut by
// max_tokens must still be one (an object under json_object).
function isJsonPrefix(text) {
  let i = 0;
  const EOF = Symbol("end of text");
  const peek = () => { if (i >= text.length) throw EOF; return text[i]; };
  const ws = () => { while (i < text.length && " \t\n\r".includes(text[i])) i++; };
  const expect = (c) => { if (peek() !== c) throw new Error(`expected ${c} at ${i}`); i++; };
  const str = () => {
    expect('"');
    for (;;) {
      const c = peek();
      i++;
      if (c === '"') return;
      if (c < " ") throw new Error("a control character in a string");
      if (c !== "\\") continue;
      const e = peek();
      i++;
      if (e === "u") for (let k = 0; k < 4; k++, i++) { if (!/[0-9a-fA-F]/.test(peek())) throw new Error("bad \\u"); }
      else if (!'"\\/bfnrt'.includes(e)) throw new Error("bad escape");
    }
  };
  const num = () => {
    const m = /^-?(0|[1-9][0-9]*)?(\.[0-9]*)?([eE][+-]?[0-9]*)?/.exec(text.slice(i))[0];
    if (!m) throw new Error(`a value expected at ${i}`);
    i += m.length;
    peek();  // a number the text ends in may go on
  };
  const container = (close, member) => {
    i++;
    ws();
    if (peek() === close) return void i++;
    for (;;) {
      member();
      ws();
      const c = peek();
      i++;
      if (c === close) return;
      if (c !== ",") throw new Error(`expected , or ${close} at ${i - 1}`);
    }
  };
  const value = () => {
    ws();
    const c = peek();
    if (c === "{") return container("}", () => { ws(); str(); ws(); expect(":"); value(); });
    if (c === "[") return container("]", value);
    if (c === '"') return str();
    for (const word of ["true", "false", "null"]) if (c === word[0]) return [...word].forEach(expect);
    return num();
  };
  try {
    ws();
    if (peek() !== "{") return false;
    value();
    ws();
    return i === text.length;
  } catch (e) {
    if (e === EOF) return true;
    return false;
  }
}

test("isJsonPrefix tells JSON beginnings from other text", () => {
  for (const t of ['{"a": [1, 2.5e', '{"a": "x\\u00', "{", '{"a": {"b": null}}', '{"a": tr'])
    assert.ok(isJsonPrefix(t), t);
  for (const t of ['{"a" 1', '{"a": [1,]', '{"a": 1}}', "[1]", '{"a": "\n"}', '{"a": 01'])
    assert.ok(!isJsonPrefix(t), t);
});

// A random model need not close an object that nothing bounds (json_object):
// each answer is a whole valid object or, at max_tokens, the beginning of one.
test("response_format json_object and streaming", async () => {
  const done = [];
  for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
    const r = await openai().chat.completions.create({
      messages: [{ role: "user", content: "JSON please" }], temperature: 1, seed, max_tokens: 200,
      response_format: { type: "json_object" }, chat_template_kwargs: { enable_thinking: false },
    });
    const { finish_reason, message } = r.choices[0];
    if (finish_reason === "stop") done.push([{ type: "object" }, message.content]);
    else assert.ok(finish_reason === "length" && isJsonPrefix(message.content), `${finish_reason}: ${message.content}`);
  }
  assertValid(done);
  const stream = await openai().chat.completions.create({
    messages: [{ role: "user", content: "Describe a person." }], temperature: 1, seed: 6, max_tokens: 400, stream: true,
    response_format: { type: "json_schema", json_schema: { name: "person", schema: bounded } },
    chat_template_kwargs: { enable_thinking: false },
  });
  let text = "", finish = null;
  for await (const c of stream) {
    text += c.choices[0]?.delta?.content ?? "";
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, "stop");
  assertValid([[bounded, text]]);
});

test("tool_choice required, named and parallel_tool_calls false give valid calls", async () => {
  const pairs = [];
  for (const seed of [1, 2, 3]) {
    const req = await openai().chat.completions.create({
      messages: [{ role: "user", content: "Weather?" }], temperature: 1, seed, max_tokens: 300,
      tools: [weatherTool, timeTool], tool_choice: "required", chat_template_kwargs: { enable_thinking: false },
    });
    const m = req.choices[0];
    assert.equal(m.finish_reason, "tool_calls", JSON.stringify(m));
    assert.ok(m.message.tool_calls.length >= 1);
    for (const c of m.message.tool_calls) {
      const tool = [weatherTool, timeTool].find((t) => t.function.name === c.function.name);
      assert.ok(tool, c.function.name);
      pairs.push([tool.function.parameters, c.function.arguments]);
    }
    const named = await openai().chat.completions.create({
      messages: [{ role: "user", content: "Time?" }], temperature: 1, seed, max_tokens: 300, parallel_tool_calls: false,
      tools: [weatherTool, timeTool], tool_choice: { type: "function", function: { name: "get_time" } },
      chat_template_kwargs: { enable_thinking: false },
    });
    const calls = named.choices[0].message.tool_calls;
    assert.equal(named.choices[0].finish_reason, "tool_calls");
    assert.equal(calls.length, 1);
    assert.equal(calls[0].function.name, "get_time");
    pairs.push([timeTool.function.parameters, calls[0].function.arguments]);
  }
  assertValid(pairs);
});

test("Anthropic tool_choice any / tool, Responses text.format", async () => {
  const tools = [{ name: "get_weather", input_schema: weatherTool.function.parameters }];
  const pairs = [];
  for (const tool_choice of [{ type: "any" }, { type: "tool", name: "get_weather" }]) {
    const m = await anthropic().messages.create({ max_tokens: 300, temperature: 1, tools, tool_choice, thinking: { type: "disabled" },
                                                  messages: [{ role: "user", content: "Weather?" }] });
    assert.equal(m.stop_reason, "tool_use", JSON.stringify(m));
    const use = m.content.find((b) => b.type === "tool_use");
    assert.equal(use.name, "get_weather");
    pairs.push([tools[0].input_schema, JSON.stringify(use.input)]);
  }
  // Every string bounded (no seed in the Responses API: the answer must end within the budget whatever is drawn).
  const short = { type: "object", properties: { name: person.properties.name, age: person.properties.age }, required: ["name", "age"],
                  additionalProperties: false };
  const r = await openai().responses.create({ input: "Describe a person.", temperature: 1, max_output_tokens: 400,
                                               reasoning: { effort: "none" },
                                               text: { format: { type: "json_schema", name: "person", schema: short } } });
  assert.equal(r.status, "completed", JSON.stringify(r.incomplete_details));
  pairs.push([short, r.output_text]);
  assertValid(pairs);
});

test("completions: grammar (GBNF) and json_schema", async () => {
  for (const seed of [1, 2, 3]) {
    const g = await post(server.url + "/v1/completions", { prompt: "Answer:", max_tokens: 30, temperature: 1, seed,
                                                           grammar: 'root ::= ("yes" | "no") " " [0-9]{1,3}' });
    assert.equal(g.status, 200, JSON.stringify(g.json));
    assert.match(g.json.choices[0].text, /^(yes|no) [0-9]{1,3}$/);
    assert.equal(g.json.choices[0].finish_reason, "stop");
    const j = await post(server.url + "/v1/completions", { prompt: "Person:", max_tokens: 300, temperature: 1, seed, json_schema: bounded });
    assertValid([[bounded, j.json.choices[0].text]]);
  }
});

test("bad schemas and grammars are 400s naming the problem", async () => {
  const chat = (extra) => post(server.url + "/v1/chat/completions", { messages: [{ role: "user", content: "x" }], max_tokens: 5, ...extra });
  let r = await chat({ response_format: { type: "json_schema", json_schema: { name: "n", schema: { type: "string", not: { const: "" } } } } });
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /unsupported keyword 'not'/);
  assert.equal(r.json.error.param, "response_format");
  r = await chat({ response_format: { type: "xml" } });
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /json_schema/);
  r = await chat({ tool_choice: "required" });
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /tools/);
  r = await chat({ tools: [weatherTool], tool_choice: { type: "function", function: { name: "nope" } } });
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /nope/);
  r = await post(server.url + "/v1/completions", { prompt: "x", grammar: "root ::= (" });
  assert.equal(r.status, 400);
  assert.equal(r.json.error.param, "grammar");
  assert.match(r.json.error.message, /GBNF/);
  const ok = await chat({});
  assert.equal(ok.status, 200, "the server keeps serving");
});
