// What the serving benchmarks share: starting `tern serve`, posting JSON,
// reading a streamed answer's events with their times, filler text, medians.
import { spawn } from "node:child_process";

export const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
export const percentile = (a, p) => [...a].sort((x, y) => x - y)[Math.min(a.length - 1, Math.floor(p * a.length))];

const words = ["river", "mountain", "carefully", "seven", "blue", "the", "of", "and", "engine", "question", "because"];
export const text = (n, salt) =>
  Array.from({ length: n }, (_, i) => words[(i * 31 + salt * 17 + (i >> 3)) % words.length]).join(" ");

// `tern serve` on a free port with `args`; resolves once it serves.
export async function startServer(tern, args) {
  const p = spawn(tern, ["serve", "--port", "0", ...args], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  p.stderr.setEncoding("utf8");
  p.stderr.on("data", (d) => (log += d));
  for (;;) {
    const m = log.match(/serving .* on http:\/\/[^:]+:(\d+)/);
    if (m) return { p, url: `http://127.0.0.1:${m[1]}`, log: () => log };
    if (p.exitCode !== null) throw new Error(log);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export const post = (url, body) =>
  fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

// A streamed answer's JSON events, each with the time it came (performance.now()).
export async function events(response) {
  const reader = response.body.getReader();
  const out = [];
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return out;
    buf += new TextDecoder().decode(value);
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (ev.startsWith("data: {")) out.push({ t: performance.now(), j: JSON.parse(ev.slice(6)) });
    }
  }
}
