// Abuse, faults and limits (issue 48), against the tiny dummy checkpoint on
// 127.0.0.1: start-up errors exit, stops are bounded (mid-stream, stalled
// client, mid-load), SIGKILL and restart, auth on every endpoint, the Host
// check, /metrics labels, 429 with the defaults, the API key file, and the
// memory held after big grammars, long words and many varied requests.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { Server, TERN, TOKENIZER, makeDummy, post, scratchDir, sleep } from "./harness.mjs";

const MiB = 1 << 20;
const KEY = "sk-attack-test-key";
let model, srv;
before(async () => {
  model = makeDummy(3);
  srv = await new Server(model, ["--api-key", KEY]).start();
});
after(async () => srv.stop());
const auth = { authorization: `Bearer ${KEY}` };

// One raw HTTP exchange: sends `text`, returns all the server wrote until it closed.
function raw(port, text, { timeoutMs = 5000 } = {}) {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, "127.0.0.1");
    let out = "";
    s.setEncoding("latin1");
    s.on("data", (d) => (out += d));
    s.on("end", () => resolve(out));
    s.on("error", () => resolve(out));
    s.setTimeout(timeoutMs, () => {
      s.destroy();
      reject(new Error("no end from the server; got: " + out.slice(0, 200)));
    });
    s.write(text);
  });
}

// Waits for the process to exit, up to ms; its code, or null when it did not.
function exited(proc, ms) {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve(proc.exitCode);
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve(null), ms);
    proc.once("exit", (code) => {
      clearTimeout(t);
      resolve(code);
    });
  });
}

async function waitFor(cond, ms, what) {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error("timed out waiting for " + what);
    await sleep(10);
  }
}

test("start-up errors exit with status 1 and a message", async () => {
  for (const args of [["--model", "/nonexistent/model"],
                      ["--model", model, "--tokenizer", "/nonexistent/tok"],
                      ["--model", model, "--api-key-file", "/nonexistent/key"]]) {
    const p = spawn(TERN, ["serve", "--port", "0", ...args], { stdio: ["ignore", "ignore", "pipe"] });
    let log = "";
    p.stderr.on("data", (d) => (log += d));
    const code = await exited(p, 10000);
    if (code === null) p.kill("SIGKILL");
    assert.equal(code, 1, `${args.join(" ")}: ${log}`);
    assert.match(log, /nonexistent/);
  }
});

test("a load that fails after listening exits too", async () => {
  // A checkpoint folder whose weights are missing: found only by the loader.
  const dir = scratchDir("tern-broken-");
  for (const f of fs.readdirSync(model))
    if (!f.endsWith(".safetensors")) fs.copyFileSync(path.join(model, f), path.join(dir, f));
  const p = spawn(TERN, ["serve", "--port", "0", "--model", dir], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  p.stderr.on("data", (d) => (log += d));
  const code = await exited(p, 10000);
  if (code === null) p.kill("SIGKILL");
  assert.equal(code, 1, log);
});

test("SIGTERM while loading stops at once", async () => {
  const p = spawn(TERN, ["serve", "--port", "0", "--model", model], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  p.stderr.on("data", (d) => (log += d));
  await waitFor(() => /listening on/.test(log), 10000, "listening");
  const t0 = Date.now();
  p.kill("SIGTERM");
  const code = await exited(p, 3000);
  if (code === null) p.kill("SIGKILL");
  assert.equal(code, 0, log);
  assert.ok(Date.now() - t0 < 2500);
});

// A stream long enough to be stopped in the middle.
function longStream(s, headers = {}) {
  return fetch(s.url + "/v1/completions", {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ prompt: "Count", max_tokens: 100000, ignore_eos: true, stream: true }),
  });
}

test("SIGTERM mid-stream: the stream ends well-formed within 2 s", async () => {
  const s = await new Server(model, ["--ctx-size", "200000"]).start();
  const r = await longStream(s);
  const reader = r.body.getReader();
  let text = "";
  const first = await reader.read();
  text += new TextDecoder().decode(first.value);
  const t0 = Date.now();
  s.proc.kill("SIGTERM");
  for (;;) {
    const { done, value } = await reader.read().catch(() => ({ done: true }));
    if (done) break;
    text += new TextDecoder().decode(value);
  }
  const code = await exited(s.proc, 3000);
  if (code === null) s.proc.kill("SIGKILL");
  assert.equal(code, 0, s.log.slice(-2000));
  assert.ok(Date.now() - t0 < 2500, `stopped in ${Date.now() - t0} ms`);
  assert.match(text, /data: \[DONE\]\n\n$/);
  assert.match(text, /"finish_reason":"[a-z_]+"/);
});

test("SIGTERM with a stalled streaming client stops within 2.5 s", async () => {
  const s = await new Server(model, ["--ctx-size", "200000"]).start();
  const body = JSON.stringify({ prompt: "Count", max_tokens: 100000, ignore_eos: true, stream: true });
  const sock = net.connect(s.port, "127.0.0.1");
  sock.write(`POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
             `Content-Length: ${body.length}\r\n\r\n${body}`);
  sock.once("data", () => sock.pause());  // reads no more: the server's writes fill up and block
  await sleep(1000);
  const t0 = Date.now();
  s.proc.kill("SIGTERM");
  const code = await exited(s.proc, 4000);
  sock.destroy();
  if (code === null) s.proc.kill("SIGKILL");
  assert.notEqual(code, null, "still running");
  assert.ok(Date.now() - t0 < 2600, `stopped in ${Date.now() - t0} ms`);
});

test("SIGKILL, then a restart serves", async () => {
  const s = await new Server(model).start();
  const r = longStream(s).catch(() => null);
  await sleep(200);
  s.proc.kill("SIGKILL");
  await exited(s.proc, 5000);
  await r;
  const again = await new Server(model).start();
  const ok = await post(again.url + "/v1/completions", { prompt: "Hi", max_tokens: 2 });
  assert.equal(ok.status, 200);
  await again.stop();
});

test("every endpoint but /health needs the key", async () => {
  const get = ["/v1/models", "/metrics", "/v1/responses/resp_x"];
  const postPaths = ["/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/messages/count_tokens",
                     "/v1/responses", "/tokenize", "/detokenize", "/nowhere"];
  for (const p of get) {
    assert.equal((await fetch(srv.url + p)).status, 401, p);
    assert.equal((await fetch(srv.url + p, { headers: { authorization: "Bearer wrong" } })).status, 401, p);
  }
  for (const p of postPaths) {
    assert.equal((await post(srv.url + p, {})).status, 401, p);
    assert.equal((await post(srv.url + p, {}, { "x-api-key": KEY + "x" })).status, 401, p);
  }
  assert.equal((await fetch(srv.url + "/health")).status, 200);
  assert.equal((await fetch(srv.url + "/v1/models", { headers: auth })).status, 200);
  assert.equal((await fetch(srv.url + "/v1/models", { headers: { "x-api-key": KEY } })).status, 200);
});

test("/metrics: refused paths under one label, label values escaped", async () => {
  const reply = await raw(srv.port, "GET /x%22%7D%20666%0Ainjected_total%7Ba%3D%22 HTTP/1.1\r\n" +
                                    "Host: 127.0.0.1\r\nConnection: close\r\n\r\n");
  assert.match(reply, /^HTTP\/1\.1 401/);
  const m = await (await fetch(srv.url + "/metrics", { headers: auth })).text();
  assert.doesNotMatch(m, /^injected_total/m);
  assert.match(m, /tern_requests_total\{endpoint="other",status="401"\} \d+/);
  for (const line of m.split("\n").filter((l) => l && !l.startsWith("#")))
    assert.match(line, /^[a-z_]+(\{[a-z_]+="(?:[^"\\\n]|\\.)*"(,[a-z_]+="(?:[^"\\\n]|\\.)*")*\})? \S+$/, line);
});

test("the Host check: any case, no suffix after [::1], none at all for HTTP/1.0", async () => {
  const ask = (host) => raw(srv.port, `GET /health HTTP/1.1\r\n${host === null ? "" : `Host: ${host}\r\n`}` +
                                      "Connection: close\r\n\r\n");
  assert.match(await ask(`LOCALHOST:${srv.port}`), /^HTTP\/1\.1 200/);
  assert.match(await ask(`[::1]:${srv.port}`), /^HTTP\/1\.1 200/);
  assert.match(await ask("[::1]evil.com"), /^HTTP\/1\.1 403/);
  assert.match(await ask("localhost.evil.com"), /^HTTP\/1\.1 403/);
  assert.match(await ask("127.0.0.1:80x"), /^HTTP\/1\.1 403/);
  assert.match(await raw(srv.port, "GET /health HTTP/1.0\r\n\r\n"), /^HTTP\/1\.1 200/);
});

test("--api-key-file: the key from a file, not the command line", async () => {
  const file = path.join(scratchDir("tern-key-"), "key");
  fs.writeFileSync(file, "sk-from-file\n");
  const s = await new Server(model, ["--api-key-file", file]).start();
  assert.doesNotMatch(fs.readFileSync(`/proc/${s.pid()}/cmdline`, "utf8"), /sk-from-file/);
  assert.equal((await fetch(s.url + "/v1/models")).status, 401);
  assert.equal((await fetch(s.url + "/v1/models", { headers: { authorization: "Bearer sk-from-file" } })).status, 200);
  await s.stop();
});

test("with the default --threads and --max-queue, a full queue answers 429", async () => {
  const s = await new Server(model, ["--ctx-size", "200000"]).start();
  const body = { prompt: "Count", max_tokens: 300, ignore_eos: true };
  // More than the 16 workers: --parallel's default leaves the queue room to fill before them.
  const replies = await Promise.all(Array.from({ length: 20 }, () => post(s.url + "/v1/completions", body)));
  const codes = replies.map((r) => r.status);
  assert.ok(codes.includes(429), codes.join(" "));
  assert.ok(codes.includes(200), codes.join(" "));
  await s.stop();
});

test("a client's tool names are not logged at the default level", async () => {
  const tools = [{ type: "function", function: { name: "evil_tool", parameters: { type: "object",
    properties: { s: { type: "string", pattern: "^INJECTED\n[a-z]+$" } } } } }];
  await post(srv.url + "/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], tools,
                                                 max_tokens: 2 }, auth);
  assert.doesNotMatch(srv.log, /INJECTED|evil_tool/);
});

test("big distinct grammars are not kept: memory stays bounded", async () => {
  const s = await new Server(model).start();
  const base = s.rss();
  for (let i = 0; i < 20; ++i) {
    const r = await post(s.url + "/v1/completions",
                         { prompt: "x", max_tokens: 1, grammar: `root ::= [a-${String.fromCharCode(110 + i)}]{60000}` });
    assert.equal(r.status, 200, r.text);
  }
  const grown = s.rss() - base;
  await s.stop();
  // Each compiled grammar is ~30 MiB: kept, 20 of them would be ~600 MiB.
  assert.ok(grown < 350 * MiB, `RSS grew ${(grown / MiB).toFixed(0)} MiB`);
});

test("long words through /tokenize on several connections: buffers are released", async () => {
  const s = await new Server(model).start();
  const base = s.rss();
  const word = "a".repeat(2 * MiB);
  for (let round = 0; round < 2; ++round)
    await Promise.all(Array.from({ length: 6 }, async () => {
      const r = await post(s.url + "/tokenize", { content: word });
      assert.equal(r.status, 200);
    }));
  await sleep(200);
  const grown = s.rss() - base;
  await s.stop();
  // Kept per thread, 6 threads x ~50 bytes per byte would be ~600 MiB.
  assert.ok(grown < 200 * MiB, `RSS grew ${(grown / MiB).toFixed(0)} MiB`);
});

test("~2,000 varied requests: memory bounded, every one answered", async () => {
  const s = await new Server(model, ["--ctx-size", "4096", "--cache-mem", "32M"]).start();
  const u = s.url;
  const kinds = [
    (i) => post(u + "/v1/completions", { prompt: "p" + i, max_tokens: 2 }),
    (i) => post(u + "/v1/chat/completions", { messages: [{ role: "user", content: "m" + i }], max_tokens: 2 }),
    (i) => post(u + "/v1/messages", { model: "x", max_tokens: 2, messages: [{ role: "user", content: "a" + i }] }),
    (i) => post(u + "/tokenize", { content: "word ".repeat(i % 300) }),
    (i) => post(u + "/v1/completions", "{".repeat(i % 50)),
    (i) => post(u + "/v1/completions", { prompt: "g", max_tokens: 2, grammar: `root ::= "a"{${1 + (i % 40)}}` }),
    (i) => post(u + "/v1/chat/completions", { messages: [{ role: "user", content: "j" }], max_tokens: 2,
      response_format: { type: "json_schema", json_schema: { name: "n", schema: { type: "object",
        properties: { ["k" + (i % 30)]: { type: "integer" } } } } } }),
    (i) => fetch(u + "/nowhere/" + i).then((r) => r.text().then(() => ({ status: r.status }))),
    (i) => post(u + "/v1/completions", { prompt: "x".repeat(5000 + i), max_tokens: 2 }),
  ];
  let base = 0;
  for (let i = 0; i < 2000; i += 8) {
    const replies = await Promise.all(Array.from({ length: 8 }, (_, j) => kinds[(i + j) % kinds.length](i + j)));
    for (const r of replies) assert.ok(r.status >= 200 && r.status < 500 && r.status !== 429, String(r.status));
    if (i === 400) base = s.rss();  // after the first allocations have settled
  }
  const grown = s.rss() - base;
  await s.stop();
  assert.ok(grown < 100 * MiB, `RSS grew ${(grown / MiB).toFixed(0)} MiB`);
});

test("bodies over --max-body are refused whatever their framing, before they are read", async () => {
  const s = await new Server(model, ["--max-body", String(MiB)]).start();
  // Declared too long: refused at once, not read and discarded.
  const t0 = Date.now();
  const declared = await raw(s.port, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
                                     "Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n{");
  assert.match(declared, /^HTTP\/1\.1 413/);
  assert.ok(Date.now() - t0 < 2000);
  // Chunked: counted as it arrives.
  const chunked = await new Promise((resolve) => {
    const sock = net.connect(s.port, "127.0.0.1");
    let out = "";
    sock.setEncoding("latin1");
    sock.on("data", (d) => (out += d));
    sock.on("close", () => resolve(out));
    sock.on("error", () => {});
    sock.write("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
               "Transfer-Encoding: chunked\r\n\r\n");
    const chunk = "x".repeat(64 << 10);
    for (let i = 0; i < 64; ++i) sock.write((64 << 10).toString(16) + "\r\n" + chunk + "\r\n");
    setTimeout(() => sock.destroy(), 5000);
  });
  assert.doesNotMatch(chunked, /^HTTP\/1\.1 400/);  // read whole, it would reach the JSON parser
  assert.match(chunked, /^HTTP\/1\.1 413/);
  const ok = await post(s.url + "/v1/completions", { prompt: "Hi", max_tokens: 2 });
  assert.equal(ok.status, 200);
  await s.stop();
});
