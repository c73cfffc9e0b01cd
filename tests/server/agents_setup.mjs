// The real coding agents (Claude Code, Codex, Qwen Code, OpenCode; npm, pinned
// in scripts/setup.sh) configured against a running `tern serve`, exactly as
// the README's recipes say, each in a scratch folder with its own HOME and
// every network feature but the model's turned off. A recording proxy sits
// between an agent and tern: it keeps every request and tern's answer, so a
// refusal is reported with the message tern sent (its log omits it), and with
// TERN_AGENT_CAPTURES=DIR each exchange is also written to DIR/<agent>-<n>.json.
import { spawn } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import zlib from "node:zlib";

const here = path.dirname(new URL(import.meta.url).pathname);
// Where setup.sh installs the npm packages (TERN_AGENTS_NPM overrides it).
export const NPM = process.env.TERN_AGENTS_NPM || path.resolve(here, "../../third_party/npm/node_modules");
export const bin = (name) => path.join(NPM, ".bin", name);

// The model name the agents are configured with; tern serves it under
// --served-model-name.
export const MODEL = "qwen3.6";

// Forwards everything to `target` (http://host:port) and records each
// exchange: method, path, headers (less credentials), the JSON body, tern's
// status and its answer (streams too, whole, up to a limit).
export class Recorder {
  constructor(target, { dir = process.env.TERN_AGENT_CAPTURES, limit = 1 << 20 } = {}) {
    this.target = new URL(target);
    this.dir = dir;
    this.limit = limit;
    this.records = [];
    this.label = "agent";
    this.counter = new Map();
  }
  // Names the captures of what follows (agent-1.json, agent-2.json, ...).
  as(label) {
    this.label = label;
    this.records = [];
    return this;
  }
  async start() {
    this.server = http.createServer((req, res) => this.#forward(req, res));
    await new Promise((r) => this.server.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${this.server.address().port}`;
    if (this.dir) fs.mkdirSync(this.dir, { recursive: true });
    return this;
  }
  async stop() {
    this.server?.closeAllConnections?.();
    await new Promise((r) => (this.server ? this.server.close(r) : r()));
  }
  #forward(req, res) {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const raw = Buffer.concat(chunks);
      const rec = { label: this.label, method: req.method, path: req.url, headers: redact(req.headers), body: null,
                    status: 0, response_headers: null, response: "" };
      const text = raw.toString("utf8");
      try {
        rec.body = text ? JSON.parse(text) : null;
      } catch {
        rec.body = text;
      }
      this.records.push(rec);
      const n = (this.counter.get(this.label) ?? 0) + 1;
      this.counter.set(this.label, n);
      let saved = false;
      const body = [];
      let size = 0, encoding;
      const save = (note) => {  // once: at the answer's end, or when either side gives up
        if (saved) return;
        saved = true;
        rec.response = decode(Buffer.concat(body), encoding) + (note ? `\n(${note})` : "");
        if (this.dir) fs.writeFileSync(path.join(this.dir, `${this.label}-${n}.json`), JSON.stringify(rec, null, 1));
      };
      const headers = { ...req.headers, host: this.target.host };
      const up = http.request({ host: this.target.hostname, port: this.target.port, method: req.method, path: req.url, headers },
                              (ur) => {
        rec.status = ur.statusCode;
        rec.response_headers = ur.headers;
        encoding = ur.headers["content-encoding"];
        res.writeHead(ur.statusCode, ur.headers);
        ur.on("data", (c) => {
          if ((size += c.length) <= this.limit) body.push(c);
          res.write(c);
        });
        ur.on("end", () => {
          res.end();
          save();
        });
        ur.on("error", () => res.destroy());
      });
      up.on("error", (e) => {
        if (rec.status === 0) {
          rec.status = 502;
          body.push(Buffer.from("proxy: " + e.message));
          res.writeHead(502, { "content-type": "text/plain" });
          res.end("proxy: " + e.message);
        }
        save();
      });
      res.on("close", () => {  // the agent gave up (or was killed): so does tern's request
        save(res.writableFinished ? "" : "the client closed the connection before the answer's end");
        up.destroy();
      });
      up.end(raw);
    });
  }
  // The exchanges tern refused or failed (status >= 400), with its message.
  failures() {
    return this.records.filter((r) => r.status >= 400)
      .map((r) => `${r.method} ${r.path} -> ${r.status}: ${r.response.slice(0, 400)}`);
  }
  // The tool names of the requests' tool lists, as the agent sent them.
  toolNames() {
    const names = new Set();
    for (const r of this.records)
      for (const t of r.body?.tools ?? []) names.add(t.name ?? t.function?.name ?? t.type);
    return [...names];
  }
}

// The answer's text, as tern compressed it or not (a cut stream may not decode).
function decode(buf, encoding) {
  try {
    if (encoding === "br") return zlib.brotliDecompressSync(buf, { finishFlush: zlib.constants.BROTLI_OPERATION_FLUSH }).toString("utf8");
    if (encoding === "gzip") return zlib.gunzipSync(buf, { finishFlush: zlib.constants.Z_SYNC_FLUSH }).toString("utf8");
    if (encoding === "deflate") return zlib.inflateSync(buf, { finishFlush: zlib.constants.Z_SYNC_FLUSH }).toString("utf8");
  } catch (e) {
    return `(${encoding} answer of ${buf.length} bytes that does not decode: ${e.message})`;
  }
  return buf.toString("utf8");
}

function redact(h) {
  const out = {};
  for (const [k, v] of Object.entries(h))
    out[k] = /^(authorization|x-api-key|cookie)$/i.test(k) ? "<redacted>" : v;
  return out;
}

// Each agent's recipe: files under HOME or the work folder, environment and
// command line. `url` is the server's root (http://127.0.0.1:PORT), `prompt`
// the task. Everything beyond the model's API is off: telemetry, update
// checks, error reports, feedback surveys, IDE detection, model catalogs.
export const agents = {
  claude: {
    // Claude Code: Anthropic Messages at ANTHROPIC_BASE_URL.
    // -p on a fresh HOME needs no login nor ~/.claude.json (no onboarding).
    recipe: ({ url, prompt }) => ({
      env: {
        ANTHROPIC_BASE_URL: url,
        ANTHROPIC_AUTH_TOKEN: "none",
        ANTHROPIC_MODEL: MODEL,
        ANTHROPIC_SMALL_FAST_MODEL: MODEL,
        ANTHROPIC_DEFAULT_HAIKU_MODEL: MODEL,
        DISABLE_TELEMETRY: "1",
        DISABLE_AUTOUPDATER: "1",
        DISABLE_ERROR_REPORTING: "1",
        DISABLE_BUG_COMMAND: "1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
        CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL: "1",
      },
      // As root, --dangerously-skip-permissions is refused: allow the two tools instead.
      cmd: bin("claude"),
      args: ["-p", prompt, "--permission-mode", "acceptEdits", "--allowedTools", "Write", "Bash"],
    }),
  },
  codex: {
    // Codex: OpenAI Responses through a custom provider in ~/.codex/config.toml.
    recipe: ({ url, home, prompt }) => ({
      files: {
        [path.join(home, ".codex", "config.toml")]: [
          `model = "${MODEL}"`,
          `model_provider = "tern"`,
          `check_for_update_on_startup = false`,
          `[analytics]`,
          `enabled = false`,
          `[feedback]`,
          `enabled = false`,
          `[features]`,
          `plugins = false`,  // no curated plugin sync from GitHub or chatgpt.com
          `[model_providers.tern]`,
          `name = "tern"`,
          `base_url = "${url}/v1"`,
          `wire_api = "responses"`,
          ``,
        ].join("\n"),
      },
      env: {},
      cmd: bin("codex"),
      args: ["exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", prompt],
    }),
  },
  qwen: {
    // Qwen Code: OpenAI chat completions at OPENAI_BASE_URL.
    recipe: ({ url, home, prompt }) => ({
      files: {
        [path.join(home, ".qwen", "settings.json")]: JSON.stringify({
          security: { auth: { selectedType: "openai" } },
          privacy: { usageStatisticsEnabled: false },
          general: { disableAutoUpdate: true, disableUpdateNag: true },
          ide: { enabled: false },
          tools: { useRipgrep: false },
        }, null, 2),
      },
      env: { OPENAI_BASE_URL: `${url}/v1`, OPENAI_API_KEY: "none", OPENAI_MODEL: MODEL,
             QWEN_CODE_SUPPRESS_YOLO_WARNING: "1" },
      cmd: bin("qwen"),
      args: ["-p", prompt, "--approval-mode", "yolo"],
    }),
  },
  opencode: {
    // OpenCode: OpenAI chat completions through @ai-sdk/openai-compatible.
    recipe: ({ url, home, prompt }) => ({
      files: {
        [path.join(home, ".config", "opencode", "opencode.json")]: JSON.stringify({
          $schema: "https://opencode.ai/config.json",
          autoupdate: false,
          share: "disabled",
          model: `tern/${MODEL}`,
          small_model: `tern/${MODEL}`,
          permission: { edit: "allow", bash: "allow" },
          provider: {
            tern: {
              npm: "@ai-sdk/openai-compatible",
              name: "tern",
              options: { baseURL: `${url}/v1`, apiKey: "none" },
              models: { [MODEL]: { name: "Qwen3.6 35B-A3B (tern)", tool_call: true, reasoning: true } },
            },
          },
        }, null, 2),
        // OpenCode installs @opencode-ai/plugin (for local plugins) into its
        // config folder from the npm registry unless that folder has a
        // node_modules and a lockfile that lists it: offline, it has these.
        [path.join(home, ".config", "opencode", "package-lock.json")]: JSON.stringify({
          lockfileVersion: 3, packages: { "": { dependencies: { "@opencode-ai/plugin": "*" } } } }),
        [path.join(home, ".config", "opencode", "node_modules", ".keep")]: "",
      },
      env: {
        OPENCODE_DISABLE_AUTOUPDATE: "1",
        OPENCODE_DISABLE_MODELS_FETCH: "1",
        OPENCODE_DISABLE_DEFAULT_PLUGINS: "1",
        OPENCODE_DISABLE_LSP_DOWNLOAD: "1",
        OPENCODE_DISABLE_SHARE: "1",
      },
      cmd: bin("opencode"),
      args: ["run", prompt],
    }),
  },
};

// A fresh scratch folder for one run: HOME and the work folder (the agent's
// cwd) inside it.
export function prepareAgent(name, root = os.tmpdir()) {
  const base = fs.mkdtempSync(path.join(root, `tern-${name}-`));
  const run = { base, home: path.join(base, "home"), work: path.join(base, "work"), tmp: path.join(base, "tmp") };
  for (const d of [run.home, run.work, run.tmp]) fs.mkdirSync(d, { recursive: true });
  return run;
}

// Runs one agent to completion (or `timeout` ms, then its whole process group
// is killed) in `run` (prepareAgent's; a new one by default). Returns its exit
// code, output and folders.
export async function runAgent(name, { url, prompt, timeout = 120000, run = prepareAgent(name) } = {}) {
  const { base, home, work } = run;
  const r = agents[name].recipe({ url, home, work, prompt });
  for (const [file, text] of Object.entries(r.files ?? {})) {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, text);
  }
  const env = {
    PATH: `${path.dirname(process.execPath)}:/usr/local/bin:/usr/bin:/bin`,
    HOME: home,
    USER: os.userInfo().username,
    LANG: "C.UTF-8",
    TERM: "dumb",
    NO_COLOR: "1",
    TMPDIR: run.tmp,
    XDG_CONFIG_HOME: path.join(home, ".config"),
    XDG_DATA_HOME: path.join(home, ".local", "share"),
    XDG_CACHE_HOME: path.join(home, ".cache"),
    XDG_STATE_HOME: path.join(home, ".local", "state"),
    ...r.env,
  };
  const t0 = Date.now();
  const child = spawn(r.cmd, r.args, { cwd: work, env, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "", stderr = "", timedOut = false;
  child.stdout.setEncoding("utf8").on("data", (d) => (stdout += d));
  child.stderr.setEncoding("utf8").on("data", (d) => (stderr += d));
  const killGroup = () => {
    try {
      process.kill(-child.pid, "SIGKILL");
    } catch {}
  };
  const timer = setTimeout(() => {
    timedOut = true;
    killGroup();
  }, timeout);
  const code = await new Promise((res) => {
    child.on("error", (e) => ((stderr += String(e)), res(-1)));
    child.on("close", (c, sig) => res(c ?? sig));
  });
  clearTimeout(timer);
  killGroup();  // whatever it left behind
  return { code, stdout, stderr, timedOut, home, work, base, seconds: (Date.now() - t0) / 1000, cmd: r.cmd, args: r.args };
}
