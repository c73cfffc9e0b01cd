"""Cross-checks of tern's grammar engine against python-jsonschema (Debian's,
not tern's own validator), run by CTest:

  dummy    constrained completions of a tiny random-weight model (where only
           the grammar can make the output valid), sampled at temperature 1:
           every JSON answer must parse and validate against its schema, every
           tool call under tool_choice "required" or a named function must
           parse (tern's parser, as the server) and its arguments validate.
           --fixed: a fixed set of schemas and tool lists, three seeds each;
           --random N --offset K: N random schemas and tool lists.
  matcher  the matcher accepts exactly what the reference accepts
           (json_reference.py): valid instances in tern's normal form and
           random mutations of them, for random and fixed schemas; and for
           random GBNF grammars without recursion, exactly what Python's re
           accepts for the same language.

usage: fuzz_grammar.py DRIVER TOKENIZER_DIR WORK_DIR dummy|matcher [--fixed]
       [--random N] [--offset K]"""
import argparse
import json
import os
import random
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import json_reference  # noqa: E402
import schema_gen  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


class Driver:
    def __init__(self, binary, tokenizer, work):
        self.p = subprocess.Popen([binary, tokenizer, work], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def ask(self, job):
        self.p.stdin.write(json.dumps(job) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("the driver stopped")
        return json.loads(line)


def fixed_schemas():
    with open(os.path.join(HERE, "..", "data", "grammar", "bounded_schemas.json")) as f:
        return json.load(f)


def fixed_tools():
    with open(os.path.join(HERE, "..", "data", "grammar", "tools.json")) as f:
        return json.load(f)


def random_tools(rng):
    gen = schema_gen.Gen(rng, bounded=True)
    tools = []
    for i in range(rng.randint(1, 3)):
        props = {}
        for name in rng.sample(["city", "n", "flag", "when", "opts", "tags", "mode", "note"], rng.randint(0, 4)):
            k = rng.randrange(8)
            props[name] = (gen.string_schema() if k == 0 else gen.number_schema(True) if k == 1
                           else gen.number_schema(False) if k == 2 else {"type": "boolean"} if k == 3
                           else {"type": "string", "enum": ["a", "b c", "true"]} if k == 4
                           else gen.object_schema(1) if k == 5
                           else {"type": "array", "items": gen.scalar(), "maxItems": 2} if k == 6
                           else {"type": ["string", "null"], "maxLength": 4})
        params = {"type": "object", "properties": props}
        if gen.defs:
            params["$defs"] = dict(gen.defs)
        req = [n for n in props if rng.random() < 0.5]
        if req:
            params["required"] = req
        tools.append({"type": "function", "function": {"name": f"tool_{i}", "parameters": params}})
    return tools


def check_answer(schema, result, failures, what):
    if "error" in result:
        failures.append(f"{what}: {result['error']}")
        return
    if not (result["completed"] and result["stopped"]):
        failures.append(f"{what}: not completed in {result['tokens']} tokens: {result['text']!r}")
        return
    try:
        value = json.loads(result["text"])
    except ValueError as e:
        failures.append(f"{what}: not JSON ({e}): {result['text']!r}")
        return
    v = json_reference.Reference(schema)
    if not v.validator.is_valid(value):
        err = next(v.validator.iter_errors(value)).message
        failures.append(f"{what}: invalid ({err}): {result['text']!r}")


def check_calls(tools, choice, parallel, result, failures, what):
    if "error" in result:
        failures.append(f"{what}: {result['error']}")
        return
    calls = result["tool_calls"]
    if not (result["completed"] and result["stopped"]) or not calls:
        failures.append(f"{what}: no complete call: {result['text']!r}")
        return
    if not parallel and len(calls) != 1:
        failures.append(f"{what}: {len(calls)} calls with parallel_tool_calls false")
    by_name = {t["function"]["name"]: t["function"].get("parameters", {}) for t in tools}
    for call in calls:
        if isinstance(choice, dict) and call["name"] != choice["function"]["name"]:
            failures.append(f"{what}: called {call['name']}, not the named function")
        if call["name"] not in by_name:
            failures.append(f"{what}: unknown function {call['name']}")
            continue
        v = json_reference.Reference(by_name[call["name"]])
        if not v.validator.is_valid(call["arguments"]):
            err = next(v.validator.iter_errors(call["arguments"])).message
            failures.append(f"{what}: arguments invalid ({err}): {result['text']!r}")


def dummy(driver, args):
    failures = []
    jobs = 0
    if args.fixed:
        cases = [(f"fixed schema {i}", s, seed) for i, s in enumerate(fixed_schemas()) for seed in (1, 2, 3)]
        tool_cases = [(f"fixed tools {i}", c["tools"], c["tool_choice"], c.get("parallel", True), seed)
                      for i, c in enumerate(fixed_tools()) for seed in (1, 2, 3)]
    else:
        cases, tool_cases = [], []
        for k in range(args.offset, args.offset + args.random):
            rng = random.Random(k)
            cases.append((f"random schema {k}", schema_gen.random_schema(k, bounded=True), k))
            if k % 5 == 0:
                tools = json_reference.strip(random_tools(rng))
                choice = "required" if rng.random() < 0.5 else {
                    "type": "function", "function": {"name": rng.choice(tools)["function"]["name"]}}
                tool_cases.append((f"random tools {k}", tools, choice, rng.random() < 0.5, k))
    for what, schema, seed in cases:
        clean = json_reference.strip(schema)
        body = {"prompt": "Reply in JSON.",
                "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": clean}}}
        check_answer(schema, driver.ask({"op": "generate", "body": body, "seed": seed, "max_tokens": 600}),
                     failures, what)
        jobs += 1
    for what, tools, choice, parallel, seed in tool_cases:
        body = {"prompt": "Call a tool.", "tools": tools, "tool_choice": choice, "parallel_tool_calls": parallel}
        check_calls(tools, choice, parallel,
                    driver.ask({"op": "generate", "body": body, "seed": seed, "max_tokens": 600}),
                    failures, what)
        jobs += 1
    return jobs, failures


def matcher(driver, args):
    failures = []
    checked = accepted = 0
    with open(os.path.join(HERE, "..", "data", "grammar", "schemas.json")) as f:
        realistic = [c["schema"] for c in json.load(f)]
    schemas = realistic + [schema_gen.random_schema(1000 + k, bounded=False) for k in range(args.random)]
    for i, schema in enumerate(schemas):
        rng = random.Random(i)
        ref = json_reference.Reference(schema)
        texts = set()
        for _ in range(30):
            t = schema_gen.instance(schema, rng, schema)
            if t is not None:
                texts.add(t)
                for _ in range(4):
                    t = schema_gen.mutate(t, rng)
                    texts.add(t)
        texts = sorted(texts)
        if not texts:
            continue
        result = driver.ask({"op": "accept", "schema": json_reference.strip(schema), "texts": texts})
        if "error" in result:
            failures.append(f"schema {i}: {result['error']}")
            continue
        for text, got in zip(texts, result["accepted"]):
            want = ref.accepts(text)
            checked += 1
            accepted += want
            if got != want:
                failures.append(f"schema {i}: tern {'accepts' if got else 'refuses'} {text!r}, the "
                                f"reference {'accepts' if want else 'refuses'} it; schema "
                                f"{json.dumps(json_reference.strip(schema))}")
    # GBNF: random regular grammars against Python's re with the same language.
    for k in range(args.random):
        rng = random.Random(5000 + k)
        g = schema_gen.RandomGbnf(rng)
        pattern = re.compile(g.regex(), re.DOTALL)
        texts = set()
        for _ in range(20):
            t = g.sample()
            texts.add(t)
            for _ in range(3):
                t = schema_gen.mutate(t, rng)
                texts.add(t)
        texts = sorted(texts)
        result = driver.ask({"op": "accept", "gbnf": g.text(), "texts": texts})
        if "error" in result:
            failures.append(f"gbnf {k}: {result['error']}\n{g.text()}")
            continue
        for text, got in zip(texts, result["accepted"]):
            want = pattern.fullmatch(text) is not None
            checked += 1
            accepted += want
            if got != want:
                failures.append(f"gbnf {k}: tern {'accepts' if got else 'refuses'} {text!r}, re "
                                f"{'accepts' if want else 'refuses'} it; grammar:\n{g.text()}")
    print(f"{accepted} of the {checked} texts are valid")
    return checked, failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("driver")
    ap.add_argument("tokenizer")
    ap.add_argument("work")
    ap.add_argument("mode", choices=["dummy", "matcher"])
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--random", type=int, default=0)
    ap.add_argument("--offset", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    driver = Driver(args.driver, args.tokenizer, args.work)
    count, failures = (dummy if args.mode == "dummy" else matcher)(driver, args)
    for f in failures[:20]:
        print("FAIL:", f)
    print(f"{args.mode}: {count} checked, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
