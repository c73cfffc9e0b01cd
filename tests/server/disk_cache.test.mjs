// The session cache's disk tier (--cache-dir) through the official `openai`
// client on a tiny random-weight model: a server restarted between two turns
// of a conversation serves the second from disk; entries truncated, flipped,
// deleted or made for another model between turns are removed (with a
// warning) and never used; under --cache-mem pressure evicted conversations
// come back from disk; every answer (greedy and seeded, token logprobs
// included) equals a server's without any cache; the directory is private
// and holds no prompt text.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { Server, makeDummy, metric, scratchDir, untilIdle, untilMetric } from "./harness.mjs";

const model = makeDummy(1);
const common = ["--ctx-size", "2048", "--snapshot-every", "64"];
let cold;
before(async () => {
  cold = await new Server(model, [...common, "--cache-mem", "0"]).start();
});
after(async () => cold.stop());

const newDir = () => path.join(scratchDir("tern-disk-"), "cache");
const entries = (dir, ext) => fs.readdirSync(dir).filter((f) => f.endsWith(ext)).map((f) => path.join(dir, f));
const withDisk = (dir, ...more) => new Server(model, [...common, "--cache-dir", dir, ...more]);

const request = (messages, sampled, seed) => ({
  messages, max_tokens: 8, logprobs: true, enable_thinking: false,
  ...(sampled ? { temperature: 1, top_p: 0.9, seed } : { temperature: 0 }),
});

// A chat turn on `srv`, checked against the cold server token by token.
async function exact(srv, req, what) {
  const [a, b] = await Promise.all([srv.client().chat.completions.create(req),
                                    cold.client().chat.completions.create(req)]);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content, what);
  assert.deepEqual(a.choices[0].logprobs.content.map((t) => [t.token, t.logprob]),
                   b.choices[0].logprobs.content.map((t) => [t.token, t.logprob]), what);
  return a;
}

// The first turn on a disk-cached server, its next turn's prefix prefilled
// while idle and written, then a stop.
async function firstTurn(dir, sampled) {
  const msgs = [{ role: "system", content: "Be brief." }, { role: "user", content: "Tell me about rivers." }];
  const srv = await withDisk(dir).start();
  try {
    const c = await exact(srv, request(msgs, sampled, 5), "turn 1");
    await untilMetric(srv, "tern_idle_prefills_total", 1);
    await untilIdle(srv);
    msgs.push({ role: "assistant", content: c.choices[0].message.content }, { role: "user", content: "And another?" });
    return { msgs, prompt: c.usage.prompt_tokens };
  } finally {
    await srv.stop();
  }
}

test("a restarted server serves the next turn from disk, exactly", async () => {
  for (const sampled of [false, true]) {
    const dir = newDir();
    const { msgs, prompt } = await firstTurn(dir, sampled);
    const srv = await withDisk(dir).start();
    try {
      const c = await exact(srv, request(msgs, sampled, 6), "turn 2");
      // The idle prefill's snapshot reaches past the whole first prompt.
      assert.ok(c.usage.prompt_tokens_details.cached_tokens > prompt, `cached ${c.usage.prompt_tokens_details.cached_tokens}`);
      assert.equal(await metric(srv, "tern_disk_cache_hits_total"), 1);
      assert.ok(await metric(srv, "tern_disk_cache_loaded_bytes_total") > 0);
      assert.match(srv.log, / cached=(\d+) disk=\1 /);
    } finally {
      await srv.stop();
    }
  }
});

test("damaged, deleted and foreign entries are removed with a warning and never used", async () => {
  // [what, when: before the start (the index finds it) or after (a load does), damage]
  const flip = (f, at) => {
    const fd = fs.openSync(f, "r+");
    const b = Buffer.alloc(1);
    const pos = at < 0 ? fs.fstatSync(fd).size + at : at;
    fs.readSync(fd, b, 0, 1, pos);
    b[0] ^= 0x5a;
    fs.writeSync(fd, b, 0, 1, pos);
    fs.closeSync(fd);
  };
  const cases = [
    ["truncated pieces", "before", (dir) => entries(dir, ".kv").forEach((f) => fs.truncateSync(f, fs.statSync(f).size - 5))],
    ["flipped headers", "before", (dir) => entries(dir, ".state").forEach((f) => flip(f, 30))],
    ["flipped payloads", "after", (dir) => entries(dir, ".kv").forEach((f) => flip(f, -1))],
    ["flipped states", "after", (dir) => entries(dir, ".state").forEach((f) => flip(f, -7))],
    ["deleted pieces", "after", (dir) => entries(dir, ".kv").forEach((f) => fs.rmSync(f))],
    ["deleted states", "after", (dir) => entries(dir, ".state").forEach((f) => fs.rmSync(f))],
  ];
  const first = newDir();
  const { msgs } = await firstTurn(first, true);
  for (const [what, when, damage] of cases) {
    const dir = newDir();
    fs.cpSync(first, dir, { recursive: true });
    fs.chmodSync(dir, 0o700);
    if (when === "before") damage(dir);
    const srv = await withDisk(dir).start();
    try {
      if (when === "after") damage(dir);
      const c = await exact(srv, request(msgs, true, 6), what);
      assert.equal(await metric(srv, "tern_disk_cache_hits_total"), 0, what);
      assert.equal(c.usage.prompt_tokens_details.cached_tokens, 0, what);
      if (!what.startsWith("deleted")) assert.ok(await metric(srv, "tern_disk_cache_removed_total") > 0, what);
      assert.equal(srv.log.split("\n").filter((l) => /warn.*disk cache/.test(l)).length, 1, what + ": one warning\n" + srv.log);
    } finally {
      await srv.stop();
    }
  }
  // Another model's server on the same directory removes its entries at start.
  const dir = newDir();
  fs.cpSync(first, dir, { recursive: true });
  const other = await new Server(makeDummy(2), [...common, "--cache-dir", dir]).start();
  try {
    assert.ok(await metric(other, "tern_disk_cache_removed_total") > 0);
    assert.match(other.log, /warn.*removed \d+ damaged or foreign entries/);
    assert.deepEqual(entries(dir, ".kv"), []);
  } finally {
    await other.stop();
  }
});

test("under --cache-mem pressure, evicted conversations come back from disk, exactly", async () => {
  const dir = newDir();
  // Room in memory for about one conversation's state.
  const srv = await withDisk(dir, "--cache-mem", "2M", "--no-idle-prefill").start();
  try {
    const convs = [0, 1, 2].map((i) => [{ role: "system", content: `Conversation ${i}.` }, { role: "user", content: `Question ${i}?` }]);
    let fromDisk = 0;
    for (let turn = 0; turn < 3; turn++) {
      for (let i = 0; i < convs.length; i++) {
        await untilMetric(srv, "tern_disk_cache_queued", 0).catch(() => {});
        const before = await metric(srv, "tern_disk_cache_hits_total");
        const c = await exact(srv, request(convs[i], i % 2 === 1, 10 * turn + i), `conversation ${i} turn ${turn}`);
        if (turn > 0) {
          assert.ok(c.usage.prompt_tokens_details.cached_tokens > 0, `conversation ${i} turn ${turn} reused nothing`);
          fromDisk += (await metric(srv, "tern_disk_cache_hits_total")) - before;
        }
        convs[i].push({ role: "assistant", content: c.choices[0].message.content }, { role: "user", content: `more ${turn}` });
      }
    }
    assert.ok(fromDisk >= 4, `${fromDisk} turns came from disk`);
    assert.ok((await metric(srv, "tern_cache_bytes")) <= 2 * 1024 * 1024);
  } finally {
    await srv.stop();
  }
});

test("the directory is private, named by hashes, and holds no prompt text", async () => {
  const dir = newDir();
  const srv = await withDisk(dir).start();
  try {
    await srv.client().chat.completions.create(request([{ role: "user", content: "my secret is walrus-7731" }], false));
    await untilIdle(srv);
  } finally {
    await srv.stop();
  }
  assert.equal(fs.statSync(dir).mode & 0o777, 0o700);
  const files = fs.readdirSync(dir).filter((f) => f !== ".tern-lock");
  assert.ok(files.length > 0);
  for (const f of files) {
    assert.match(f, /^[0-9a-f]{16}\.(kv|state)$/);
    assert.equal(fs.statSync(path.join(dir, f)).mode & 0o777, 0o600);
    const bytes = fs.readFileSync(path.join(dir, f));
    assert.equal(bytes.indexOf("walrus"), -1, f);
    assert.equal(bytes.indexOf("secret"), -1, f);
  }
});
