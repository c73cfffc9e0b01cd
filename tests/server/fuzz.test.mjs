// Hostile input: ≥ 10,000 random and mutated requests (truncated bodies,
// flipped bytes, wrong types everywhere, huge numbers and strings, deep
// nesting, invalid UTF-8, unknown fields and routes) at the server, several
// at a time. None may get a 5xx or a broken connection; afterwards a normal
// request must succeed, and the process' memory must stay within the
// session cache's budget plus a fixed overhead (stated below).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Server, makeDummy, post } from "./harness.mjs";

const N = Number(process.env.TERN_FUZZ_REQUESTS || 10000);
const PRESET = process.env.TERN_FUZZ_PRESET || "tiny";  // "mid": the same bound with real widths
const CACHE = 32 << 20;
// The fixed overhead beyond the cache: what the server holds when ready
// (weights mapped, the tokenizer, thread stacks) plus 160 MB for the
// transient buffers of concurrent requests (bodies up to --max-body 4 MB,
// their parse trees, rendered prompts, tokens) and allocator slack.
const SLACK = 160 << 20;

let srv, ready;
before(async () => {
  srv = await new Server(makeDummy(3, PRESET), ["--ctx-size", "40", "--cache-mem", String(CACHE),
                                        "--max-body", String(4 << 20), "--max-queue", "8"]).start();
  ready = srv.rss();
});
after(async () => srv.stop());

let seed = 12345;
const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const pick = (a) => a[Math.floor(rnd() * a.length)];

const bases = [
  ["/v1/chat/completions", () => ({ messages: [{ role: "user", content: "hi" }], max_tokens: 2, seed: 1 })],
  ["/v1/chat/completions", () => ({ messages: [{ role: "system", content: "s" }, { role: "user", content: [{ type: "text", text: "a" }] }],
                                     max_tokens: 1, stream: true, temperature: 0.7, top_k: 5, stop: ["x"], logprobs: true, top_logprobs: 2 })],
  ["/v1/chat/completions", () => ({ messages: [{ role: "user", content: "w" }, { role: "assistant", content: null,
                                     tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: "{\"a\":1}" } }] },
                                     { role: "tool", tool_call_id: "c", content: "r" }],
                                     tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { a: { type: "integer" } } } } }],
                                     max_tokens: 1 })],
  ["/v1/completions", () => ({ prompt: "abc", max_tokens: 2, echo: true, logprobs: 1 })],
  ["/v1/completions", () => ({ prompt: [1, 2, 3], max_tokens: 1, stream: true })],
  ["/tokenize", () => ({ content: "héllo" })],
  ["/detokenize", () => ({ tokens: [1, 2, 3] })],
];

function randomValue(depth = 0) {
  const k = Math.floor(rnd() * (depth > 3 ? 7 : 9));
  switch (k) {
    case 0: return null;
    case 1: return rnd() < 0.5;
    case 2: return pick([0, -1, 1, 2 ** 31, 2 ** 53, -(2 ** 63), 1e308, -1e-308, 0.5, 7]);
    case 3: return pick(["", "x", "\u0000", "💥".repeat(50), "<|im_start|>", "<tool_call>", "a".repeat(20000)]);
    case 4: return Math.floor(rnd() * 300000) - 1000;
    case 5: return "user";
    case 6: return [];
    case 7: return Array.from({ length: Math.floor(rnd() * 4) }, () => randomValue(depth + 1));
    default: return Object.fromEntries(Array.from({ length: Math.floor(rnd() * 4) }, () => [pick(["role", "content", "type", "text", "x", "function", "name"]), randomValue(depth + 1)]));
  }
}

function mutate(obj, depth = 0) {
  if (obj === null || typeof obj !== "object" || depth > 4) return rnd() < 0.3 ? randomValue() : obj;
  const keys = Object.keys(obj);
  if (keys.length && rnd() < 0.4) {
    const k = pick(keys);
    const op = rnd();
    if (op < 0.3) delete obj[k];
    else if (op < 0.7) obj[k] = randomValue();
    else obj[k] = mutate(obj[k], depth + 1);
  }
  if (rnd() < 0.1) obj[pick(["zzz", "n", "max_tokens", "messages", "prompt", "model", "stream"])] = randomValue();
  return obj;
}

function body() {
  const [path, make] = pick(bases);
  const r = rnd();
  let b = JSON.stringify(r < 0.8 ? mutate(make()) : make());
  if (r > 0.9) b = b.slice(0, Math.floor(rnd() * b.length));                       // truncated
  else if (r > 0.85) b = "[".repeat(100000) + "]".repeat(100000);                   // deep nesting
  else if (r > 0.82) b = `{"messages": [{"role": "user", "content": ${"9".repeat(5000)}}]}`;  // a huge number
  let bytes = Buffer.from(b);
  if (rnd() < 0.05) {  // flipped bytes, invalid UTF-8 among them
    bytes = Buffer.from(bytes);
    for (let i = 0; i < 3 && bytes.length; i++) bytes[Math.floor(rnd() * bytes.length)] = Math.floor(rnd() * 256);
  }
  if (rnd() < 0.01) bytes = Buffer.alloc(5 << 20, 0x20);                            // too large
  return [rnd() < 0.02 ? pick(["/v1/nothing", "/v1/chat", "/../etc/passwd"]) : path, bytes];
}

test(`${N} hostile requests, then a normal one; memory stays bounded`, async () => {
  const statuses = {};
  let sent = 0;
  async function worker() {
    while (sent < N) {
      sent++;
      const [path, bytes] = body();
      const r = await fetch(srv.url + path, { method: rnd() < 0.02 ? "PUT" : "POST",
                                              headers: { "content-type": "application/json" }, body: bytes });
      const text = await r.text();
      statuses[r.status] = (statuses[r.status] || 0) + 1;
      assert.ok(r.status < 500, `${r.status} for ${path}: ${text.slice(0, 300)} <- ${bytes.subarray(0, 300)}`);
      if (r.status >= 400 && r.status !== 413) assert.ok(text.includes("error"), text);
    }
  }
  await Promise.all(Array.from({ length: 8 }, worker));
  console.log("statuses", statuses, "ready RSS MB", (ready / 1e6).toFixed(1), "now MB", (srv.rss() / 1e6).toFixed(1));
  assert.ok((statuses[200] || 0) > N / 50, "some of them were valid");
  const ok = await post(srv.url + "/v1/chat/completions", { messages: [{ role: "user", content: "still alive?" }], max_tokens: 3 });
  assert.equal(ok.status, 200, ok.text);
  assert.ok(srv.rss() <= ready + CACHE + SLACK, `RSS ${srv.rss()} > ${ready} + ${CACHE} + ${SLACK}`);
});
