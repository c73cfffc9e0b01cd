// tern chat driven through its stdin: turns stream and reuse the previous
// turn's state; /think, /system, /reset work; Ctrl-C (SIGINT) stops the
// current answer and the chat goes on; end of input ends it; the last answer
// is prefilled while the user types.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { TERN, makeDummy, sleep } from "../server/harness.mjs";

test("tern chat: turns, commands, Ctrl-C", async () => {
  const proc = spawn(TERN, ["chat", "--model", makeDummy(4), "--max-tokens", "3000"], { stdio: ["pipe", "pipe", "pipe"] });
  let out = "";
  proc.stdout.setEncoding("utf8");
  proc.stdout.on("data", (d) => (out += d));
  proc.stderr.resume();
  const until = async (re, ms = 60000) => {
    const t0 = Date.now();
    while (!re.test(out)) {
      if (Date.now() - t0 > ms) throw new Error("timed out waiting for " + re + " in " + out);
      await sleep(20);
    }
  };
  await until(/^> /);  // loaded
  proc.stdin.write("Tell me a very long story\n");
  const grown = async (n) => {
    const len = out.length;
    while (out.length < len + n) await sleep(10);
  };
  await grown(40);  // it is answering
  proc.kill("SIGINT");
  await until(/tokens, [\d.]+ tok\/s, \d+ cached, stopped\)/);
  assert.equal(proc.exitCode, null, "still running after Ctrl-C");
  proc.stdin.write("/think off\n");
  proc.stdin.write("And now?\n");
  await grown(40);
  proc.kill("SIGINT");
  await until(/cached, stopped\)[\s\S]*cached, stopped\)/);
  const cached = [...out.matchAll(/, (\d+) cached/g)].map((m) => Number(m[1]));
  assert.ok(cached[1] > 10, "the second turn reused the first: " + cached);
  proc.stdin.write("/system You are terse.\n/reset\n/nope\n");
  await until(/unknown command/);
  proc.stdin.end();
  const code = await new Promise((r) => proc.once("exit", r));
  assert.equal(code, 0);
});

// Two turns, the second typed after a pause; the second turn's cached tokens.
async function secondTurnCached(extra) {
  const proc = spawn(TERN, ["chat", "--model", makeDummy(4), "--max-tokens", "8", "--no-thinking", ...extra], { stdio: ["pipe", "pipe", "pipe"] });
  let out = "";
  proc.stdout.setEncoding("utf8");
  proc.stdout.on("data", (d) => (out += d));
  proc.stderr.resume();
  const until = async (re) => {
    const t0 = Date.now();
    while (!re.test(out)) {
      if (Date.now() - t0 > 60000) throw new Error("timed out waiting for " + re + " in " + out);
      await sleep(20);
    }
  };
  await until(/^> /);
  proc.stdin.write("Tell me about rivers\n");
  await until(/cached\)/);
  await sleep(500);  // typing
  proc.stdin.write("And mountains?\n");
  await until(/cached\)[\s\S]*cached\)/);
  proc.stdin.end();
  await new Promise((r) => proc.once("exit", r));
  return [...out.matchAll(/, (\d+) cached/g)].map((m) => Number(m[1]))[1];
}

test("tern chat prefills the last answer while the user types", async () => {
  const idle = await secondTurnCached([]);
  const none = await secondTurnCached(["--no-idle-prefill"]);
  // Without it the second turn starts at the first's generation prompt; with
  // it, past the answer, at the new message.
  assert.ok(idle > none && none > 0, `cached ${idle} with idle prefill, ${none} without`);
});
