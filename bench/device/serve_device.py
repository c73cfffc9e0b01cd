#!/usr/bin/env python3
"""The serving path on the GPU machine (issues 22 and 24), standard library
only (the device has no node): starts `tern serve --dummy 35b-a3b --backend
cuda`, then through /v1/chat/completions, streamed, times

  * a fresh prompt of ~N tokens (time to first token: the GPU prefill),
  * the next turn of that conversation (~200 new tokens on a cache hit),
    against a fresh ~200-token prompt: the session cache's payoff,
  * decode tok/s seen by the client at ~4K context (ignore_eos), against
    `tern bench` at the same context (the server's cost per token),
  * the same decode under a JSON schema (a long string field the answer
    cannot close within the tokens asked for): the grammar's cost per token.

  python3 bench/device/serve_device.py --tern BIN --tokenizer DIR [--json OUT]
"""
import argparse
import random
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request

WORDS = ("river stone light paper garden window silver morning cloud engine market "
         "quiet orange signal forest number winter table letter bridge").split()


def text_of(n_words, seed):
    """Words in an order of their own for each seed (distinct prompts miss the cache)."""
    r = random.Random(seed)
    return " ".join(r.choice(WORDS) for _ in range(n_words))


class Server:
    def __init__(self, tern, tokenizer, source):
        self.proc = subprocess.Popen(
            [tern, "serve", *source.split(), "--tokenizer", tokenizer,
             "--port", "0", "--ctx-size", "40000"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log = []
        deadline = time.time() + 120
        while True:
            line = self.proc.stderr.readline()
            if not line:
                raise SystemExit("tern serve exited:\n" + "".join(self.log))
            self.log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.url = f"http://127.0.0.1:{m.group(1)}"
                break
            if time.time() > deadline:
                raise SystemExit("tern serve did not start")
        # Keep reading the log, or a full pipe would stall the server.
        threading.Thread(target=lambda: [self.log.append(l) for l in self.proc.stderr],
                         daemon=True).start()
        while True:  # 503 while loading
            try:
                urllib.request.urlopen(self.url + "/health", timeout=5)
                break
            except Exception:
                time.sleep(0.2)

    def chat(self, messages, max_tokens, **extra):
        """Streams one completion: (ttft_s, decode_tok_s seen by the client, usage, text)."""
        body = {"messages": messages, "max_tokens": max_tokens, "stream": True,
                "stream_options": {"include_usage": True},
                "chat_template_kwargs": {"enable_thinking": False}, **extra}
        req = urllib.request.Request(self.url + "/v1/chat/completions", json.dumps(body).encode(),
                                     {"content-type": "application/json"})
        t0 = time.perf_counter()
        first = last = None
        usage, text = {}, ""
        with urllib.request.urlopen(req, timeout=600) as r:
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for c in chunk.get("choices", []):
                    piece = c.get("delta", {}).get("content") or ""
                    if piece:
                        now = time.perf_counter()
                        first = first or now
                        last = now
                        text += piece
        n = usage.get("completion_tokens", 0)
        ttft = (first or time.perf_counter()) - t0
        tok_s = (n - 1) / (last - first) if first and last and last > first and n > 1 else 0.0
        return ttft, tok_s, usage, text

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tern", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--json", default="")
    ap.add_argument("--rev", default="")
    ap.add_argument("--source", default="--dummy 35b-a3b --backend cuda",
                    help="the model and backend flags of tern serve")
    ap.add_argument("--idle-ms", type=float, default=300,
                    help="the client's time between an answer and its next turn")
    a = ap.parse_args()
    s = Server(a.tern, a.tokenizer, a.source)
    out = {"rev": a.rev, "idle_ms": a.idle_ms, "sessions": []}
    try:
        s.chat([{"role": "user", "content": "warm up"}], 8)
        med = lambda v: sorted(v)[len(v) // 2]
        # Issue 22's case: a turn adding ~200 tokens to a ~4K and a ~30K-token
        # conversation against a fresh ~200-token prompt, three conversations each.
        for words in (3000, 30000):
            rows = []
            for rep in range(3):
                conv = [{"role": "user", "content": text_of(words, 1 + 10 * rep)}]
                ttft_full, _, u1, reply = s.chat(conv, 16, ignore_eos=True)
                conv += [{"role": "assistant", "content": reply},
                         {"role": "user", "content": text_of(175, 2 + 10 * rep)}]
                time.sleep(a.idle_ms / 1000)
                ttft_turn, _, u2, _ = s.chat(conv, 16, ignore_eos=True)
                ttft_fresh, _, u3, _ = s.chat(
                    [{"role": "user", "content": text_of(190, 3 + words + rep)}], 16,
                    ignore_eos=True)
                rows.append({"prompt_tokens": u1["prompt_tokens"], "ttft_full_s": ttft_full,
                             "turn2_prompt_tokens": u2["prompt_tokens"],
                             "turn2_cached_tokens": u2["prompt_tokens_details"]["cached_tokens"],
                             "ttft_turn2_s": ttft_turn, "fresh_prompt_tokens": u3["prompt_tokens"],
                             "ttft_fresh_s": ttft_fresh})
            row = dict(rows[0])
            for k in ("ttft_full_s", "ttft_turn2_s", "ttft_fresh_s"):
                row[k] = med([r[k] for r in rows])
            row["turn2_over_fresh"] = row["ttft_turn2_s"] / row["ttft_fresh_s"]
            row["runs"] = rows
            out["sessions"].append(row)
            print(json.dumps(row), flush=True)
        ctx = [{"role": "user", "content": text_of(3000, 5)}]
        plain = [s.chat(ctx, 128, ignore_eos=True)[1] for _ in range(3)]
        schema = {"type": "object", "properties": {"story": {"type": "string", "minLength": 4000}},
                  "required": ["story"]}
        fmt = {"type": "json_schema", "json_schema": {"name": "story", "schema": schema}}
        constrained = [s.chat(ctx, 128, response_format=fmt) for _ in range(3)]
        obj = [s.chat(ctx, 128, response_format={"type": "json_object"}) for _ in range(3)]
        out["decode_4k"] = {
            "server_tok_s": med(plain),
            "json_schema_tok_s": med([c[1] for c in constrained]),
            "json_schema_tokens": [c[2]["completion_tokens"] for c in constrained],
            "json_object_tok_s": med([c[1] for c in obj]),
            "json_object_tokens": [c[2]["completion_tokens"] for c in obj],
        }
        d = out["decode_4k"]
        d["json_schema_cost"] = 1 - d["json_schema_tok_s"] / d["server_tok_s"]
        print(json.dumps(d), flush=True)
    finally:
        s.stop()
    # Every request's log line: the engine's own time to first token beside the client's.
    out["server_requests"] = [l.rstrip() for l in s.log if " request id=" in l]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
