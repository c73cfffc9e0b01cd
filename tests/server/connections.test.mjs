// Connection-level abuse (issue 48): slow heads and bodies, idle
// connections by the hundred, oversized heads, pipelining, half-close and
// Expect: 100-continue, against the tiny dummy on 127.0.0.1. During each
// attack /health and a real request must be answered at once, and the
// attacker's connections must end by the stated deadline.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { Server, makeDummy, metric, post, sleep, untilMetric } from "./harness.mjs";

const KEY = "sk-connections-test";
const auth = { authorization: `Bearer ${KEY}` };
let model, srv;
before(async () => {
  model = makeDummy(5);
  // Short deadlines so the test need not wait the defaults (10 s and 60 s).
  srv = await new Server(model, ["--api-key", KEY, "--header-timeout", "2", "--body-timeout", "2",
                                 "--max-client-connections", "32"]).start();
});
after(async () => srv.stop());

// A raw connection: what it received, and when it closed.
function open(port) {
  const s = net.connect(port, "127.0.0.1");
  const c = { s, out: "", closedAt: null };
  s.setEncoding("latin1");
  s.on("data", (d) => (c.out += d));
  s.on("close", () => (c.closedAt = Date.now()));
  s.on("error", () => {});
  return c;
}
const connected = (c) => new Promise((r) => (c.s.connecting ? c.s.once("connect", r) : r()));

async function waitFor(cond, ms, what) {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error("timed out waiting for " + what);
    await sleep(20);
  }
}

// /health and a completion, each answered quickly while an attack goes on.
async function stillServing(s) {
  const t0 = Date.now();
  const health = await fetch(s.url + "/health");
  assert.equal(health.status, 200);
  assert.ok(Date.now() - t0 < 1000, `/health took ${Date.now() - t0} ms`);
  const t1 = Date.now();
  const r = await post(s.url + "/v1/completions", { prompt: "Hi", max_tokens: 2 }, auth);
  assert.equal(r.status, 200, r.text);
  assert.ok(Date.now() - t1 < 3000, `a completion took ${Date.now() - t1} ms`);
}

test("slow heads hold no worker and are closed by the header deadline", async () => {
  // More of them than there are workers (16) and than one client may open.
  const slow = Array.from({ length: 24 }, () => open(srv.port));
  await Promise.all(slow.map(connected));
  const t0 = Date.now();
  for (const c of slow) c.s.write("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  const drip = setInterval(() => slow.forEach((c) => !c.closedAt && c.s.write("X-Drip: 1\r\n")), 300);
  try {
    await stillServing(srv);
    await waitFor(() => slow.every((c) => c.closedAt), 5000, "the slow heads to be closed");
  } finally {
    clearInterval(drip);
  }
  const last = Math.max(...slow.map((c) => c.closedAt)) - t0;
  assert.ok(last < 3500, `closed after ${last} ms (deadline 2 s)`);
});

test("bodies shorter than declared are closed by the body deadline", async () => {
  const short = Array.from({ length: 24 }, () => open(srv.port));
  await Promise.all(short.map(connected));
  const t0 = Date.now();
  for (const c of short)
    c.s.write(`POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${KEY}\r\n` +
              "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"prompt\":");
  await stillServing(srv);
  await waitFor(() => short.every((c) => c.closedAt), 5000, "the short bodies to be closed");
  const last = Math.max(...short.map((c) => c.closedAt)) - t0;
  assert.ok(last < 3500, `closed after ${last} ms (deadline 2 s)`);
});

test("hundreds of idle connections: the oldest make room, requests are answered", async () => {
  const idle = Array.from({ length: 300 }, () => open(srv.port));
  await Promise.all(idle.map(connected));
  await sleep(200);
  await stillServing(srv);
  // At most 32 from this address stay open: the oldest idle ones were closed.
  const open_ = idle.filter((c) => !c.closedAt).length;
  assert.ok(open_ <= 32, `${open_} idle connections still open`);
  const metrics = await (await fetch(srv.url + "/metrics", { headers: auth })).text();
  assert.ok(Number(metrics.match(/^tern_http_connections_evicted_total (\d+)/m)[1]) >= 268, metrics);
  assert.ok(Number(metrics.match(/^tern_http_connections (\d+)/m)[1]) <= 33, metrics);
  idle.forEach((c) => c.s.destroy());
});

test("a stream being answered is never closed to make room", async () => {
  // A connection of its own: the fetch pool may still hold one from the test
  // before, which that test's evictions can have closed under it.
  const c = open(srv.port);
  await connected(c);
  const body = JSON.stringify({ prompt: "Count", max_tokens: 400, ignore_eos: true, stream: true });
  c.s.write(`POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${KEY}\r\n` +
            `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n` +
            `Connection: close\r\n\r\n${body}`);
  await waitFor(() => c.out.includes("data: "), 10000, "the stream's first event");
  const idle = Array.from({ length: 100 }, () => open(srv.port));
  await Promise.all(idle.map(connected));
  await waitFor(() => c.closedAt, 60000, "the stream to end");
  assert.match(c.out, /^HTTP\/1\.1 200/);
  assert.match(c.out, /data: \[DONE\]\n\n/);
  idle.forEach((x) => x.s.destroy());
});

test("heads over 64 KiB are refused with 431, by size or by line count", async () => {
  const send = async (head) => {
    const c = open(srv.port);
    c.s.write(head);
    await waitFor(() => c.closedAt, 5000, "the connection to close");
    return c.out;
  };
  const big = `GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${"a".repeat(100 << 10)}\r\n\r\n`;
  assert.match(await send(big), /^HTTP\/1\.1 431/);
  const many = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + "X: y\r\n".repeat(20000) + "\r\n";
  assert.match(await send(many), /^HTTP\/1\.1 431/);
  // Fifty ordinary headers are fine.
  const fifty = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
                Array.from({ length: 50 }, (_, i) => `X-H${i}: ${"v".repeat(40)}\r\n`).join("") +
                "Connection: close\r\n\r\n";
  assert.match(await send(fifty), /^HTTP\/1\.1 200/);
});

test("pipelined requests in one packet are all answered, in order", async () => {
  const c = open(srv.port);
  const body = JSON.stringify({ content: "hello" });
  c.s.write("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" +
            `POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${KEY}\r\n` +
            `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}` +
            "GET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + KEY + "\r\n\r\n" +
            "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  await waitFor(() => c.closedAt, 5000, "the connection to close");
  const statuses = [...c.out.matchAll(/HTTP\/1\.1 (\d+)/g)].map((m) => Number(m[1]));
  assert.deepEqual(statuses, [200, 200, 404, 200], c.out);
  assert.match(c.out, /"tokens":\[/);
});

test("half-close: a quick answer still comes; a generation is cancelled", async () => {
  const c = open(srv.port);
  c.s.end(`GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${KEY}\r\n\r\n`);
  await waitFor(() => c.closedAt, 5000, "the connection to close");
  assert.match(c.out, /^HTTP\/1\.1 200[^]*"object":"list"/);
  // As Go's net/http does: a client that stops sending is taken as gone.
  const cancelled = 'tern_generations_total{finish="cancelled"}';
  const before = await metric(srv, cancelled, auth);
  const g = open(srv.port);
  const body = JSON.stringify({ prompt: "Count", max_tokens: 100000, ignore_eos: true });
  g.s.end(`POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${KEY}\r\n` +
          `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  await untilMetric(srv, cancelled, before + 1, auth);
  g.s.destroy();
});

test("Expect: 100-continue gets its interim answer, then the response", async () => {
  const c = open(srv.port);
  const body = JSON.stringify({ content: "hello" });
  c.s.write(`POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${KEY}\r\n` +
            `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n` +
            "Expect: 100-continue\r\nConnection: close\r\n\r\n");
  await waitFor(() => /100 Continue/.test(c.out), 2000, "100 Continue");
  c.s.write(body);
  await waitFor(() => c.closedAt, 5000, "the connection to close");
  assert.match(c.out, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200[^]*"tokens"/);
});

test("SIGTERM with slow clients and idle connections stops within 2 s", async () => {
  const s = await new Server(model).start();
  const conns = Array.from({ length: 40 }, () => open(s.port));
  await Promise.all(conns.map(connected));
  conns.slice(0, 20).forEach((c) => c.s.write("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
  const t0 = Date.now();
  s.proc.kill("SIGTERM");
  const code = await new Promise((r) => s.proc.once("exit", r));
  assert.equal(code, 0, s.log.slice(-2000));
  assert.ok(Date.now() - t0 < 2000, `stopped in ${Date.now() - t0} ms`);
  conns.forEach((c) => c.s.destroy());
});
