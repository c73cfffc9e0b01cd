// Starts `tern serve` for the server tests: a tiny dummy checkpoint with the
// Qwen3 tokenizer (made once per test file), on a free loopback port; waits
// for /health; collects the server's log lines.
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";

export const TERN = process.env.TERN_BIN;
export const TOKENIZER = process.env.TERN_TOKENIZER;
if (!TERN || !TOKENIZER) throw new Error("set TERN_BIN and TERN_TOKENIZER");

const require = createRequire(import.meta.url);
const npm = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../../third_party/npm/node_modules");
export const OpenAI = require(path.join(npm, "openai")).default;
export const Anthropic = require(path.join(npm, "@anthropic-ai/sdk")).default;

// A fresh folder under the temp dir, removed when the test file's process
// exits (the suite makes a checkpoint per file: left behind, they pile up).
const scratch = [];
process.on("exit", () => {
  for (const d of scratch) fs.rmSync(d, { recursive: true, force: true });
});
export function scratchDir(prefix) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  scratch.push(dir);
  return dir;
}

export function makeDummy(seed = 1, preset = "tiny") {
  const dir = scratchDir("tern-serve-");
  const r = spawnSync(TERN, ["make-dummy", "--preset", preset, "--seed", String(seed), "--out", dir,
                             "--tokenizer", TOKENIZER], { encoding: "utf8" });
  if (r.status !== 0) throw new Error("make-dummy failed: " + r.stderr);
  return dir;
}

export function writeScript(entries) {
  const file = path.join(scratchDir("tern-script-"), "script.jsonl");
  fs.writeFileSync(file, entries.map((e) => JSON.stringify(e)).join("\n") + "\n");
  return file;
}

export class Server {
  constructor(model, args = []) {
    this.model = model;
    // A fixed sequence budget unless a test sets one: --parallel's default then
    // does not depend on the machine's free memory.
    this.args = args.includes("--seq-mem") ? args : [...args, "--seq-mem", "8G"];
    this.log = "";
  }
  async start() {
    this.proc = spawn(TERN, ["serve", "--model", this.model, "--port", "0", ...this.args],
                      { stdio: ["ignore", "ignore", "pipe"] });
    this.proc.stderr.setEncoding("utf8");
    this.proc.stderr.on("data", (d) => (this.log += d));
    const deadline = Date.now() + 60000;
    while (!/listening on http:\/\/[^:]+:(\d+)/.test(this.log)) {
      if (this.proc.exitCode !== null) throw new Error("tern serve exited: " + this.log);
      if (Date.now() > deadline) throw new Error("tern serve did not start: " + this.log);
      await sleep(20);
    }
    this.port = Number(this.log.match(/listening on http:\/\/[^:]+:(\d+)/)[1]);
    this.url = `http://127.0.0.1:${this.port}`;
    while ((await fetch(this.url + "/health").catch(() => ({ status: 0 }))).status !== 200) {
      if (Date.now() > deadline) throw new Error("tern serve never became ready: " + this.log);
      await sleep(20);
    }
    return this;
  }
  client(opts = {}) {
    return new OpenAI({ baseURL: this.url + "/v1", apiKey: "none", maxRetries: 0, ...opts });
  }
  async stop() {
    if (!this.proc || this.proc.exitCode !== null) return;
    this.proc.kill("SIGTERM");
    await new Promise((r) => this.proc.once("exit", r));
  }
  pid() {
    return this.proc.pid;
  }
  // Resident memory of the server process, in bytes.
  rss() {
    const m = fs.readFileSync(`/proc/${this.proc.pid}/status`, "utf8").match(/VmRSS:\s+(\d+) kB/);
    return Number(m[1]) * 1024;
  }
}

// One sample of the server's /metrics, named as printed (labels included:
// 'tern_generations_total{finish="cancelled"}'); 0 when absent.
export async function metric(s, sample, headers = {}) {
  const text = await (await fetch(s.url + "/metrics", { headers })).text();
  const line = text.split("\n").find((l) => l.startsWith(sample + " "));
  return line ? Number(line.slice(sample.length + 1)) : 0;
}

// Waits until a metric reaches `value` (10 s at most).
export async function untilMetric(s, sample, value, headers = {}) {
  const deadline = Date.now() + 10000;
  for (let v; (v = await metric(s, sample, headers)) < value; await sleep(10))
    if (Date.now() > deadline) throw new Error(`${sample} stayed at ${v}, below ${value}`);
}

// Waits until the engine has nothing queued or running (an idle prefill included).
export async function untilIdle(s, headers = {}) {
  const deadline = Date.now() + 10000;
  while ((await metric(s, "tern_requests_running", headers)) > 0 ||
         (await metric(s, "tern_queue_depth", headers)) > 0) {
    if (Date.now() > deadline) throw new Error("the engine never became idle");
    await sleep(10);
  }
}

export function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

export async function post(url, body, headers = {}) {
  const r = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" || body instanceof Uint8Array ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: r.status, text, json, headers: r.headers };
}
