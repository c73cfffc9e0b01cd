// The serving path's own cost (issue 22): (1) streamed decode tok/s through
// `tern serve` against the engine alone (`tern bench` on CUDA, `tern run` on
// the CPU) at the same context: the server's overhead per token; (2) time to
// first token of a turn that adds ~200 tokens to a long conversation, against
// a fresh ~200-token prompt on the same server: the session cache's payoff.
//
// The turn follows an answer the model gave, sent back as history after
// --idle-ms of the client's own time (a person reading, an agent's tool).
//
//   node bench/serve_bench.mjs --tern build/tern --backend cpu --model DIR
//        [--dummy 35b-a3b --tokenizer DIR] [--context 4000] [--gen 64] [--idle-ms 300]
//        [--serve-flags "--no-idle-prefill"] [--json OUT]
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import { events, median, post, startServer, text } from "./serve_util.mjs";

const arg = (k, d) => (process.argv.includes(k) ? process.argv[process.argv.indexOf(k) + 1] : d);
const TERN = arg("--tern", "build/tern"), BACKEND = arg("--backend", "cpu"), MODEL = arg("--model", "");
const DUMMY = arg("--dummy", ""), TOK = arg("--tokenizer", MODEL), CONTEXT = Number(arg("--context", 4000));
const GEN = Number(arg("--gen", 64)), REPS = Number(arg("--repeat", 5)), JSON_OUT = arg("--json", "");
const IDLE_MS = Number(arg("--idle-ms", 300)), SERVE_FLAGS = arg("--serve-flags", "").split(" ").filter(Boolean);
const src = DUMMY ? ["--dummy", DUMMY] : ["--model", MODEL];

// (1a) The engine alone, same context and tokens generated.
function engineTokS() {
  if (DUMMY) {
    const r = spawnSync(TERN, ["bench", ...src, "--backend", BACKEND, "--decode", String(CONTEXT), "--gen", String(GEN), "--repeat", "3"], { encoding: "utf8" });
    const row = r.stdout.split("\n").find((l) => l.trim().startsWith(String(CONTEXT)));
    if (!row) throw new Error("tern bench: " + r.stdout + r.stderr);
    return Number(row.trim().split(/\s+/)[1]);
  }
  const ids = Array.from({ length: CONTEXT }, (_, i) => (i * 7919) % 150000).join(",");
  const runs = [];
  for (let i = 0; i < 3; i++) {
    const r = spawnSync(TERN, ["run", ...src, "--backend", BACKEND, "--prompt-ids", ids, "--max-tokens", String(GEN), "--ignore-eos"], { encoding: "utf8", maxBuffer: 1 << 26 });
    const m = r.stderr.match(/generated: \d+ tokens in [\d.]+ s \(([\d.]+) tok\/s\)/);
    if (!m) throw new Error("tern run: " + r.stderr);
    runs.push(Number(m[1]));
  }
  return median(runs);
}

// (1b) Streamed decode: the tokens after the first over the client's time from
// the first text event to the last. Tokens, not events: an event carries as
// many tokens as it took to complete a character (random weights often emit
// pieces of one), so the count is the usage's.
async function streamedTokS(url) {
  const prompt = Array.from({ length: CONTEXT }, (_, i) => (i * 7919) % 150000);
  const one = async () => {
    const r = await post(url + "/v1/completions", {
      prompt, max_tokens: GEN, ignore_eos: true, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    const times = [];
    let tokens = 0;
    for (const { t, j } of await events(r)) {
      if (j.usage) tokens = j.usage.completion_tokens;
      if (j.choices?.[0]?.finish_reason === null) times.push(t);
    }
    return (tokens - 1) / ((times.at(-1) - times[0]) / 1000);
  };
  await one();  // warm-up (and the prompt's prefill)
  const runs = [];
  for (let i = 0; i < 3; i++) runs.push(await one());
  return median(runs);
}


async function latency(url, messages, max_tokens = 1) {
  const t0 = performance.now();
  const r = await post(url + "/v1/chat/completions", { messages, max_tokens, ignore_eos: true, temperature: 0, enable_thinking: false });
  const j = await r.json();
  if (!j.usage) throw new Error(JSON.stringify(j));
  return [performance.now() - t0, j.usage, j.choices[0].message.content ?? ""];
}

// (2) A long conversation, then turns adding ~200 tokens, against fresh ~200-token prompts.
async function ttftRatio(url) {
  const conv = [{ role: "system", content: "You are a helpful assistant." }];
  let salt = 0;
  while (true) {
    conv.push({ role: "user", content: text(400, salt++) }, { role: "assistant", content: text(400, salt++) });
    const [, u] = await latency(url, [...conv, { role: "user", content: "ok" }]);  // also fills the cache
    if (u.prompt_tokens >= CONTEXT) break;
  }
  const turn = [], fresh = [];
  let cached = 0, tokens = 0;
  for (let i = 0; i < REPS; i++) {
    const asked = [...conv, { role: "user", content: text(170, 1000 + i) }];
    const [, , reply] = await latency(url, asked, 16);  // the previous turn, answered
    await new Promise((r) => setTimeout(r, IDLE_MS));
    const [ms, u] = await latency(url, [...asked, { role: "assistant", content: reply }, { role: "user", content: text(170, 3000 + i) }]);
    turn.push(ms);
    cached = u.prompt_tokens_details.cached_tokens;
    tokens = u.prompt_tokens;
    const [fms] = await latency(url, [{ role: "system", content: "Fresh " + i }, { role: "user", content: text(190, 2000 + i) }]);
    fresh.push(fms);
  }
  return { idle_ms: IDLE_MS, serve_flags: SERVE_FLAGS.join(" "), conversation_tokens: tokens, cached_tokens: cached, turn_ms: median(turn), fresh_ms: median(fresh), ratio: median(turn) / median(fresh) };
}

const engine = engineTokS();
const srv = await startServer(TERN, [...src, "--backend", BACKEND, "--tokenizer", TOK, "--cache-mem", "16G", ...SERVE_FLAGS]);
try {
  const streamed = await streamedTokS(srv.url);
  const t = await ttftRatio(srv.url);
  const out = {
    command: process.argv.slice(1).join(" "), backend: BACKEND, model: DUMMY ? "dummy " + DUMMY : MODEL,
    rev: spawnSync("git", ["rev-parse", "--short", "HEAD"], { encoding: "utf8" }).stdout.trim(),
    context: CONTEXT, gen: GEN, engine_tok_s: engine, streamed_tok_s: streamed,
    overhead_per_token: 1 - streamed / engine, ...t,
  };
  console.log(`decode at ${CONTEXT}: engine ${engine.toFixed(1)} tok/s, through the server ${streamed.toFixed(1)} tok/s: overhead ${(100 * out.overhead_per_token).toFixed(2)}%`);
  console.log(`turn adding ~200 tokens to ${t.conversation_tokens} (${t.cached_tokens} cached): ${t.turn_ms.toFixed(1)} ms; fresh ~200-token prompt: ${t.fresh_ms.toFixed(1)} ms; ratio ${t.ratio.toFixed(2)}`);
  if (JSON_OUT) fs.writeFileSync(JSON_OUT, JSON.stringify(out, null, 1) + "\n");
} finally {
  srv.p.kill("SIGTERM");
}
