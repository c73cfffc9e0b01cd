// Several conversations at once (continuous batching, `--parallel`), through
// the official `openai` client against the tiny dummy: eight streamed
// requests are all answered, interleaved (every one's first token before any
// answer ends), and each one's tokens and logprobs equal what the same
// request gets alone; the metrics show the steps they shared.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Server, makeDummy, metric, untilIdle } from "./harness.mjs";

let srv, client;
before(async () => {
  srv = await new Server(makeDummy(5), ["--parallel", "8", "--max-queue", "8", "--cache-mem", "64M"]).start();
  client = srv.client();
});
after(async () => srv.stop());

const ask = (i) => ({
  messages: [{ role: "user", content: `Conversation ${i}: tell me about rivers, ${"and lakes ".repeat(i)}` }],
  max_tokens: 24 + 4 * i,
  ignore_eos: true,
  logprobs: true,
  ...(i % 2 ? { temperature: 0.8, seed: 100 + i } : { temperature: 0 }),
  stream: true,
});

// A streamed answer: its tokens' logprobs and when its first and last chunks came.
async function answer(i, clock) {
  const s = await client.chat.completions.create(ask(i));
  const out = { tokens: [], first: 0, end: 0 };
  for await (const ch of s) {
    for (const l of ch.choices[0]?.logprobs?.content ?? []) {
      if (!out.first) out.first = clock();
      out.tokens.push([l.token, l.logprob]);
    }
  }
  out.end = clock();
  return out;
}

test("eight streams at once: interleaved, each as alone", async () => {
  let tick = 0;
  const clock = () => ++tick;  // order of events, not time
  const together = await Promise.all([...Array(8).keys()].map((i) => answer(i, clock)));
  const firstEnd = Math.min(...together.map((a) => a.end));
  for (const [i, a] of together.entries()) {
    assert.equal(a.tokens.length, 24 + 4 * i, `request ${i}'s tokens`);
    assert.ok(a.first < firstEnd, `request ${i}'s first token came after an answer ended`);
  }
  await untilIdle(srv);
  assert.ok((await metric(srv, 'tern_step_batch_size_bucket{le="8"}')) >
            (await metric(srv, 'tern_step_batch_size_bucket{le="4"}')), "no step carried 5 to 8 requests");
  for (const i of [0, 3, 6, 7]) {
    const alone = await answer(i, clock);
    assert.deepEqual(alone.tokens, together[i].tokens, `request ${i} alone`);
  }
});

// --seq-mem bounds what running requests' sequences may hold: with room for
// one, four requests at once all answer (the others wait in turn, none fails)
// and never run together.
test("--seq-mem: requests that do not fit wait their turn", async () => {
  const small = await new Server(makeDummy(5), ["--parallel", "4", "--seq-mem", "1"]).start();
  try {
    assert.match(small.log, /sequences: 0\.00 GB for running requests \(--seq-mem\)/);
    const c = small.client();
    const answers = await Promise.all([0, 1, 2, 3].map((i) => c.chat.completions.create({ ...ask(i), stream: false })));
    for (const [i, a] of answers.entries()) assert.equal(a.usage.completion_tokens, 24 + 4 * i);
    assert.equal(await metric(small, 'tern_step_batch_size_bucket{le="1"}'),
                 await metric(small, "tern_step_batch_size_count"), "a step carried two requests");
    assert.equal(await metric(small, "tern_sequence_bytes"), 0);
  } finally {
    await small.stop();
  }
});
