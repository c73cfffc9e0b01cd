// Several clients at once through `tern serve` (issue 44): for each N of
// --clients, N clients each hold a multi-turn conversation (--turns turns, each
// the history with the model's answers and ~--turn-words new words, streamed,
// --gen tokens), started together; reported per N: time to first token
// (median and p90 over every turn), each stream's decode tok/s (median), and
// the aggregate tok/s over the whole run (the session cache on, as agents use it). Then a new request's time to first
// token while --beside others decode, against the same request alone.
//
//   node bench/serve_clients.mjs --tern build/tern (--model DIR | --dummy 35b-a3b --tokenizer DIR)
//        [--backend cuda] [--clients 1,2,4,8] [--turns 4] [--first-words 1500]
//        [--turn-words 150] [--gen 64] [--beside 7] [--serve-flags "..."] [--json OUT]
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import { events, median, percentile, post, startServer, text } from "./serve_util.mjs";

const arg = (k, d) => (process.argv.includes(k) ? process.argv[process.argv.indexOf(k) + 1] : d);
const TERN = arg("--tern", "build/tern"), BACKEND = arg("--backend", "cpu"), MODEL = arg("--model", "");
const DUMMY = arg("--dummy", ""), TOK = arg("--tokenizer", MODEL);
const CLIENTS = arg("--clients", "1,2,4,8").split(",").map(Number), TURNS = Number(arg("--turns", 4));
const FIRST = Number(arg("--first-words", 1500)), WORDS = Number(arg("--turn-words", 150));
const GEN = Number(arg("--gen", 64)), BESIDE = Number(arg("--beside", 7)), JSON_OUT = arg("--json", "");
const SERVE_FLAGS = arg("--serve-flags", "").split(" ").filter(Boolean);
const src = DUMMY ? ["--dummy", DUMMY] : ["--model", MODEL];

// One streamed turn: when it was sent, its first token, its last, its tokens and text.
async function turn(url, messages, max_tokens = GEN) {
  const sent = performance.now();
  const r = await post(url + "/v1/chat/completions", {
    messages, max_tokens, ignore_eos: true, temperature: 0, enable_thinking: false, stream: true,
    stream_options: { include_usage: true },
  });
  const times = [];
  let tokens = 0, reply = "";
  for (const { t, j } of await events(r)) {
    if (j.usage) tokens = j.usage.completion_tokens;
    const d = j.choices?.[0]?.delta;
    if (d?.content) reply += d.content;
    if (d?.content || d?.reasoning_content) times.push(t);
  }
  if (tokens === 0) throw new Error("no tokens");
  return { sent, first: times[0], last: times.at(-1), tokens, reply };
}

// A client's conversation; its turns' records.
async function conversation(url, id) {
  const messages = [{ role: "system", content: `Client ${id}.` }, { role: "user", content: text(FIRST, id) }];
  const out = [];
  for (let k = 0; k < TURNS; k++) {
    const t = await turn(url, messages);
    out.push(t);
    messages.push({ role: "assistant", content: t.reply }, { role: "user", content: text(WORDS, 100 * id + k) });
  }
  return out;
}

async function clients(url, n) {
  const all = await Promise.all(Array.from({ length: n }, (_, i) => conversation(url, 1000 * n + i)));
  const turns = all.flat();
  const ttft = turns.map((t) => t.first - t.sent);
  const each = turns.map((t) => (t.tokens - 1) / ((t.last - t.first) / 1000));
  const start = Math.min(...turns.map((t) => t.sent)), end = Math.max(...turns.map((t) => t.last));
  const tokens = turns.reduce((s, t) => s + t.tokens, 0);
  return { clients: n, turns: turns.length, ttft_ms_p50: median(ttft), ttft_ms_p90: percentile(ttft, 0.9),
           tok_s_per_stream_p50: median(each), tok_s_aggregate: tokens / ((end - start) / 1000) };
}

// A new request's first token while `beside` others decode, against alone.
async function ttftBeside(url) {
  const ask = (salt) => [{ role: "user", content: text(FIRST, salt) }];
  const alone = [];
  for (let i = 0; i < 3; i++) {
    const t = await turn(url, ask(7000 + i), 4);
    alone.push(t.first - t.sent);
  }
  const busy = Array.from({ length: BESIDE }, (_, i) => turn(url, ask(8000 + i), 100000));
  await new Promise((r) => setTimeout(r, 2000));  // they are decoding
  const beside = [];
  for (let i = 0; i < 3; i++) {
    const t = await turn(url, ask(7100 + i), 4);  // fresh prompts of the same length
    beside.push(t.first - t.sent);
  }
  return { busy, result: { beside: BESIDE, ttft_ms_alone: median(alone), ttft_ms_beside: median(beside),
                           ratio: median(beside) / median(alone) } };
}

const parallel = Math.max(...CLIENTS, BESIDE + 1);
const srv = await startServer(TERN, [...src, "--backend", BACKEND, "--tokenizer", TOK, "--parallel", String(parallel),
                                     "--max-queue", "64", "--threads", "96", ...SERVE_FLAGS]);
try {
  const rows = [];
  for (const n of CLIENTS) {
    const r = await clients(srv.url, n);
    rows.push(r);
    console.log(`${n} clients: ttft p50 ${r.ttft_ms_p50.toFixed(0)} ms p90 ${r.ttft_ms_p90.toFixed(0)} ms, ` +
                `${r.tok_s_per_stream_p50.toFixed(1)} tok/s a stream, ${r.tok_s_aggregate.toFixed(1)} tok/s in all`);
  }
  const { busy, result } = await ttftBeside(srv.url);
  console.log(`first token beside ${BESIDE} decoding: ${result.ttft_ms_beside.toFixed(0)} ms against ` +
              `${result.ttft_ms_alone.toFixed(0)} ms alone (${result.ratio.toFixed(2)}x)`);
  const out = {
    command: process.argv.slice(1).join(" "), backend: BACKEND, model: DUMMY ? "dummy " + DUMMY : MODEL,
    rev: spawnSync("git", ["rev-parse", "--short", "HEAD"], { encoding: "utf8" }).stdout.trim(),
    turns: TURNS, first_words: FIRST, turn_words: WORDS, gen: GEN, clients: rows, ttft_beside: result,
  };
  if (JSON_OUT) fs.writeFileSync(JSON_OUT, JSON.stringify(out, null, 1) + "\n");
  srv.p.kill("SIGTERM");  // ends the busy streams
  await Promise.allSettled(busy);
} finally {
  srv.p.kill("SIGTERM");
}
