// The real coding agents against `tern serve` (issue 43): Claude Code
// (Anthropic Messages), Codex (Responses), Qwen Code and OpenCode (chat
// completions), each run non-interactively (`claude -p`, `codex exec`,
// `qwen -p`, `opencode run`) with the README's recipe (agents_setup.mjs).
// Against the scripted backend each agent must finish a turn that runs two
// of its own tools from the model's calls (a file write and a shell command),
// print the scripted answer, and have its follow-up request reuse the first's
// state; against the random tiny dummy, one turn with no protocol error.
// Then the OpenAI Agents SDK (Responses and chat completions) and the Vercel
// AI SDK (a tool, a zod object). Nothing leaves loopback: every agent's
// telemetry, update checks and model catalogs are off.
// TERN_AGENT_CAPTURES=DIR keeps every exchange (agents_setup.mjs).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { Server, makeDummy, writeScript } from "./harness.mjs";
import { MODEL, NPM, Recorder, agents, bin, prepareAgent, runAgent } from "./agents_setup.mjs";

const names = Object.keys(agents);
for (const n of names)
  if (!fs.existsSync(bin(n))) throw new Error(`${bin(n)} is missing: run scripts/setup.sh`);

// The scripted model's turn for each agent: two tool calls in the agent's own
// tool names and parameters (found in the tool lists they send; parameters in
// the schema's order, which tern's tool grammar holds the model to), then, once
// the shell's output is back, the final answer. Replies open with <think>: as
// reasoning when the prompt already opened it, or themselves when thinking is
// off, so they parse the same either way.
const note = (a) => `notes for ${a}: 7 apples`;
const done = (a) => `ALL-DONE-${a}-93417`;
const shellCmd = (a) => `echo ok > shell.txt && echo RESULT-${a}-$((6*7))`;  // prints what it does not say
const call = (fn, params) =>
  "<tool_call>\n<function=" + fn + ">\n" +
  Object.entries(params).map(([k, v]) => `<parameter=${k}>\n${v}\n</parameter>\n`).join("") +
  "</function>\n</tool_call>";
const calls = {
  claude: (w) => [call("Write", { file_path: path.join(w, "notes.txt"), content: note("claude") }),
                  call("Bash", { command: shellCmd("claude"), description: "Write shell.txt and print a check" })],
  // Codex has no file tool for an unknown model: its instructions say to run
  // apply_patch through exec_command, which Codex intercepts and applies itself.
  codex: () => [call("exec_command", { cmd: `apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: notes.txt\n+${note("codex")}\n*** End Patch\nEOF` }),
                call("exec_command", { cmd: shellCmd("codex") })],
  qwen: (w) => [call("write_file", { file_path: path.join(w, "notes.txt"), content: note("qwen") }),
                call("run_shell_command", { command: shellCmd("qwen"), description: "Write shell.txt and print a check" })],
  opencode: (w) => [call("write", { content: note("opencode"), filePath: path.join(w, "notes.txt") }),
                    call("bash", { command: shellCmd("opencode") })],
};
const think = (s) => `<think>\n${s}\n</think>\n\n`;
const task = (a) => `Write the notes file, then run the shell check. (job tern-${a})`;

// The folders first: the calls name absolute paths in them.
const runs = Object.fromEntries(names.map((a) => [a, prepareAgent(a)]));
const script = writeScript([
  { trigger: "", reply: think("Nothing asked.") + "OK." },  // titles, probes
  ...names.flatMap((a) => [
    { trigger: `job tern-${a}`, reply: think("I will write the file and run the command.") + calls[a](runs[a].work).join("\n") },
    { trigger: `RESULT-${a}-42`, reply: think("Both tools ran.") + done(a) },
  ]),
  // The SDKs (below).
  { trigger: "sdk weather", reply: think("Use the tool.") + call("get_weather", { city: "Oslo" }) },
  { trigger: "SDK-TOOL-SAYS-minus-3", reply: think("Got it.") + "SDK-ANSWER: cold, -3." },
  { trigger: "sdk object", reply: think("A JSON object.") + '{"city": "Oslo", "celsius": -3}' },
]);

// As the README serves it: the agents' name, and any other (sub-agents and
// side requests may ask for names of their own).
const SERVED = ["--served-model-name", MODEL, "--served-model-name", "*"];
let scripted, dummy, rec;
before(async () => {
  [scripted, dummy] = await Promise.all([
    new Server(makeDummy(11), ["--script", script, ...SERVED]).start(),
    new Server(makeDummy(12), SERVED).start()]);
  rec = await new Recorder(scripted.url).start();
});
const scratch = Object.values(runs).map((r) => r.base);  // the agents' folders, removed at the end
after(async () => {
  await rec?.stop();
  await Promise.all([scripted?.stop(), dummy?.stop()]);
  if (!process.env.TERN_AGENT_CAPTURES) for (const d of scratch) fs.rmSync(d, { recursive: true, force: true });
});

// tern's per-request log lines since `from` (one per finished request).
const logLines = (s, from) => s.log.slice(from).split("\n").filter((l) => /request id=\S+ endpoint=/.test(l));
// Its warnings and errors about requests ("[time] warning request id=... status=400").
const warnings = (s, from) => s.log.slice(from).split("\n")
  .filter((l) => /^\[[^\]]*\] \[?(warn|warning|error|critical)\]? /.test(l) && /endpoint=/.test(l));

// What an agent said when it failed: the API errors it printed.
const agentErrors = (r) => `${r.stdout}\n${r.stderr}`.split("\n")
  .filter((l) => /API Error|status code [45]\d\d|\b(400|404|405|413|422|500|501)\b.*(error|Error)|invalid_request|Bad Request|unexpected status|stream (error|disconnected)|Failed to (parse|fetch)|ECONNREFUSED|ERROR/.test(l));

function report(a, r, recorder, server, from) {
  return [`${a}: exit ${r.code}${r.timedOut ? " (timed out)" : ""} after ${r.seconds.toFixed(1)} s`,
          `  command: ${path.basename(r.cmd)} ${r.args.map((x) => JSON.stringify(x)).join(" ")}`,
          `  requests: ${recorder.records.map((x) => `${x.method} ${x.path} -> ${x.status}`).join(", ")}`,
          ...recorder.failures().map((f) => "  refused: " + f),
          ...warnings(server, from).map((w) => "  tern: " + w),
          `  stdout: ${r.stdout.slice(-1500)}`, `  stderr: ${r.stderr.slice(-1500)}`].join("\n");
}

// The cached prompt tokens tern reported in a recorded answer (any API's usage).
function cachedOf(x) {
  const m = [...x.response.matchAll(/"(?:cache_read_input_tokens|cached_tokens)":(\d+)/g)].map((v) => Number(v[1]));
  return m.length ? Math.max(...m) : null;
}

for (const a of names) {
  test(`${a}: a scripted turn writes a file, runs a command, answers, reuses the cache`, { timeout: 200000 }, async () => {
    rec.as(a);
    const from = scripted.log.length;
    const r = await runAgent(a, { url: rec.url, prompt: task(a), run: runs[a], timeout: 120000 });
    const why = report(a, r, rec, scripted, from);
    // (a) a turn with no protocol error.
    assert.deepEqual(rec.failures(), [], why);
    assert.deepEqual(warnings(scripted, from), [], why);
    assert.ok(!r.timedOut, why);
    assert.equal(r.code, 0, why);
    // (b) both tools ran.
    const main = rec.records.filter((x) => JSON.stringify(x.body ?? "").includes(`job tern-${a}`));
    assert.ok(main.length >= 2, "a request with the task and one with the tools' results\n" + why);
    const read = (f) => fs.existsSync(path.join(r.work, f)) ? fs.readFileSync(path.join(r.work, f), "utf8").trim() : null;
    assert.equal(read("notes.txt"), note(a), "the file tool wrote notes.txt\n" + why);
    assert.equal(read("shell.txt"), "ok", "the shell tool wrote shell.txt\n" + why);
    // (c) the scripted answer, printed.
    assert.ok(r.stdout.includes(done(a)), why);
    // (d) the request with the results reused the one that made the calls.
    const follow = main.find((x) => JSON.stringify(x.body).includes(`RESULT-${a}-42`));
    assert.ok(follow, "a request carried the shell's output\n" + why);
    const cached = cachedOf(follow);
    assert.ok(cached > 0, `the follow-up request reused the cache (cached=${cached})\n` + why);
    const line = logLines(scripted, from).find((l) => l.includes(` cached=${cached} `));
    assert.ok(line, "tern logged cached=" + cached + "\n" + why);
    // Only what is new (the calls, their results) is prefilled again: the
    // earlier turn renders as it did.
    const prompt = Number(line.match(/ prompt=(\d+) /)[1]);
    assert.ok(prompt - cached <= 0.1 * prompt, `reused ${cached} of ${prompt} prompt tokens\n` + why);
  });
}

for (const a of names) {
  test(`${a}: a turn against the random dummy has no protocol error`, { timeout: 200000 }, async () => {
    const recD = await new Recorder(dummy.url).start();
    try {
      recD.as(`${a}-dummy`);
      const from = dummy.log.length;
      // The random model may loop through tools or run to its cap: a time
      // limit ends that, and only protocol errors count.
      const run = prepareAgent(a);
      scratch.push(run.base);
      const r = await runAgent(a, { url: recD.url, prompt: "Say hello.", run, timeout: 40000 });
      const why = report(a, r, recD, dummy, from);
      assert.ok(recD.records.some((x) => x.status === 200), "an answer began\n" + why);
      assert.deepEqual(recD.failures(), [], why);
      assert.deepEqual(warnings(dummy, from), [], why);
      assert.ok(logLines(dummy, from).length > 0 || r.timedOut, why);
      assert.deepEqual(agentErrors(r), [], why);
    } finally {
      await recD.stop();
    }
  });
}

// The SDKs, from third_party/npm like the agents.
const load = async (m) => createRequire(path.join(NPM, "noop.js"))(m);

for (const kind of ["responses", "chat"]) {
  test(`OpenAI Agents SDK: a Runner with a function tool (${kind})`, { timeout: 60000 }, async () => {
    const { Agent, Runner, tool, OpenAIResponsesModel, OpenAIChatCompletionsModel, setTracingDisabled } = await load("@openai/agents");
    const { z } = await load("zod");
    const { OpenAI } = await load("openai");
    setTracingDisabled(true);  // no traces to OpenAI
    const client = new OpenAI({ baseURL: rec.url + "/v1", apiKey: "none", maxRetries: 0 });
    const model = kind === "responses" ? new OpenAIResponsesModel(client, MODEL) : new OpenAIChatCompletionsModel(client, MODEL);
    rec.as(`openai-agents-${kind}`);
    const seen = [];
    const weather = tool({ name: "get_weather", description: "The weather in a city", parameters: z.object({ city: z.string() }),
                           execute: async ({ city }) => (seen.push(city), "SDK-TOOL-SAYS-minus-3") });
    const agent = new Agent({ name: "weather", instructions: "Answer with the tool's help.", model, tools: [weather] });
    const result = await new Runner({ tracingDisabled: true }).run(agent, "sdk weather in Oslo?").catch((e) => e);
    const why = `${result?.stack ?? ""}\n${rec.failures().join("\n")}`;
    assert.deepEqual(rec.failures(), [], why);
    assert.ok(!(result instanceof Error), why);
    assert.deepEqual(seen, ["Oslo"], why);
    assert.equal(result.finalOutput, "SDK-ANSWER: cold, -3.", why);
  });
}

// The Vercel AI SDK's three ways to tern: @ai-sdk/openai's Responses (its
// default) and chat models, and @ai-sdk/openai-compatible.
async function aiSdk() {
  const ai = await load("ai");
  const { createOpenAI } = await load("@ai-sdk/openai");
  const { createOpenAICompatible } = await load("@ai-sdk/openai-compatible");
  const { z } = await load("zod");
  const openai = createOpenAI({ baseURL: rec.url + "/v1", apiKey: "none" });
  const compat = createOpenAICompatible({ name: "tern", baseURL: rec.url + "/v1", apiKey: "none", supportsStructuredOutputs: true });
  const models = { responses: openai.responses(MODEL), chat: openai.chat(MODEL), compatible: compat(MODEL) };
  return { ai, z, models };
}

for (const kind of ["responses", "chat", "compatible"]) {
  test(`Vercel AI SDK: generateText with a tool (${kind})`, { timeout: 60000 }, async () => {
    const { ai, z, models } = await aiSdk();
    rec.as(`ai-sdk-text-${kind}`);
    const seen = [];
    const tools = { get_weather: ai.tool({ description: "The weather in a city", inputSchema: z.object({ city: z.string() }),
                                           execute: async ({ city }) => (seen.push(city), "SDK-TOOL-SAYS-minus-3") }) };
    const r = await ai.generateText({ model: models[kind], tools, stopWhen: ai.stepCountIs(3), prompt: "sdk weather in Oslo?",
                                      maxRetries: 0 }).catch((e) => e);
    const why = `${r?.stack ?? ""}\n${rec.failures().join("\n")}`;
    assert.deepEqual(rec.failures(), [], why);
    assert.ok(!(r instanceof Error), why);
    assert.deepEqual(seen, ["Oslo"], why);
    assert.equal(r.text, "SDK-ANSWER: cold, -3.", why);
  });
}

for (const kind of ["responses", "chat", "compatible"]) {
  test(`Vercel AI SDK: generateObject with a zod schema (${kind})`, { timeout: 60000 }, async () => {
    const { ai, z, models } = await aiSdk();
    rec.as(`ai-sdk-object-${kind}`);
    const schema = z.object({ city: z.string(), celsius: z.number().int() });
    const r = await ai.generateObject({ model: models[kind], schema, prompt: "sdk object: the weather in Oslo", maxRetries: 0 })
      .catch((e) => e);
    const why = `${r?.stack ?? ""}\n${rec.failures().join("\n")}`;
    assert.deepEqual(rec.failures(), [], why);
    assert.ok(!(r instanceof Error), why);
    assert.deepEqual(r.object, { city: "Oslo", celsius: -3 }, why);
    const sent = JSON.stringify(rec.records.at(-1).body);
    assert.match(sent, /"celsius"/, "the schema went to the server: " + sent.slice(0, 400));
  });
}
