"""Random JSON Schemas of tern's supported subset, with a generator of valid
instances for each (in tern's normal form), for the grammar cross-checks.

bounded=True keeps every string, array and object finite (maxLength,
maxItems, additionalProperties: false), so that a random-weight model, which
only the grammar steers, reaches the end of every value."""
import json
import random
import string

FORMATS = ["date", "time", "date-time", "uuid", "email", "ipv4"]


class Pattern:
    """A random regular expression, as an ECMA-262 pattern and as the Python
    pattern with the same meaning (tern's dialect), with a string generator."""

    PIECES = [
        ("[a-z]", "[a-z]", string.ascii_lowercase),
        ("[0-9]", "[0-9]", string.digits),
        ("\\d", "[0-9]", string.digits),
        ("[A-F]", "[A-F]", "ABCDEF"),
        ("\\w", "[A-Za-z0-9_]", string.ascii_letters + string.digits + "_"),
        ("x", "x", "x"),
        ("-", "-", "-"),
        ("\\.", "\\.", "."),
        ("(?:ab|cd)", "(?:ab|cd)", None),
    ]

    def __init__(self, rng):
        self.parts = []
        for _ in range(rng.randint(1, 4)):
            piece = rng.choice(self.PIECES)
            lo = rng.randint(0, 2)
            hi = lo + rng.randint(0, 3)
            self.parts.append((piece, lo, hi))
        self.anchored_start = rng.random() < 0.7
        self.anchored_end = rng.random() < 0.7

    def ecma(self):
        body = "".join(f"{p[0]}{{{lo},{hi}}}" for p, lo, hi in self.parts)
        return ("^" if self.anchored_start else "") + body + ("$" if self.anchored_end else "")

    def python(self):
        body = "".join(f"(?:{p[1]}){{{lo},{hi}}}" for p, lo, hi in self.parts)
        return ("^" if self.anchored_start else "") + body + ("\\Z" if self.anchored_end else "")

    def sample(self, rng):
        out = ""
        for (_, _, chars), lo, hi in self.parts:
            for _ in range(rng.randint(lo, hi)):
                out += rng.choice(["ab", "cd"]) if chars is None else rng.choice(chars)
        return out

    def min_len(self):
        return sum(lo * (2 if p[2] is None else 1) for p, lo, _ in self.parts)

    def max_len(self):
        """The longest match, or None when unanchored text may surround it."""
        if not (self.anchored_start and self.anchored_end):
            return None
        return sum(hi * (2 if p[2] is None else 1) for p, _, hi in self.parts)


def format_sample(fmt, rng):
    d = f"{rng.randint(1, 9999):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    t = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    t += rng.choice(["Z", "+05:30", "-01:00", ".5Z"])
    if fmt == "date":
        return d
    if fmt == "time":
        return t
    if fmt == "date-time":
        return d + "T" + t
    if fmt == "uuid":
        h = "".join(rng.choice("0123456789abcdefABCDEF") for _ in range(32))
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    if fmt == "email":
        return rng.choice(["a", "bob.x", "z+1"]) + "@" + rng.choice(["ex.com", "a-b.co.uk"])
    return ".".join(str(rng.randint(0, 255)) for _ in range(4))


class Gen:
    def __init__(self, rng, bounded):
        self.rng = rng
        self.bounded = bounded
        self.defs = {}

    def text(self, max_len=6):
        alphabet = string.ascii_letters + string.digits + " é😀\"\\/\n"
        return "".join(self.rng.choice(alphabet) for _ in range(self.rng.randint(0, max_len)))

    def string_schema(self):
        r = self.rng
        s = {"type": "string"}
        kind = r.random()
        if kind < 0.25:
            s["format"] = r.choice(FORMATS)
            if self.bounded:  # an e-mail's parts, a time's fraction are unbounded
                s["maxLength"] = 40
        elif kind < 0.5:
            p = Pattern(r)
            s["pattern"] = p.ecma()
            s["x-pattern"] = p  # stripped before use
        if "format" not in s:
            p = s.get("x-pattern")
            shortest = p.min_len() if p else 0
            if self.bounded or r.random() < 0.5:
                s["maxLength"] = r.randint(shortest, shortest + 10)
            if r.random() < 0.3:
                longest = min(x for x in (s.get("maxLength", 5), p and p.max_len()) if x is not None)
                s["minLength"] = r.randint(0, longest)
        return s

    def number_schema(self, integer):
        r = self.rng
        s = {"type": "integer" if integer else "number"}
        if r.random() < 0.6:
            lo = r.randint(-1000, 1000) if integer else round(r.uniform(-100, 100), r.randint(0, 3))
            s["exclusiveMinimum" if r.random() < 0.3 else "minimum"] = lo
            if r.random() < 0.7:
                hi = lo + (r.randint(1, 2000) if integer else round(r.uniform(0.5, 300), 2))
                s["exclusiveMaximum" if r.random() < 0.3 else "maximum"] = hi
        elif r.random() < 0.5:
            s["maximum"] = r.randint(-50, 50)
        return s

    def scalar(self):
        r = self.rng
        k = r.randrange(7)
        if k == 0:
            return {"type": "boolean"}
        if k == 1:
            return {"type": "null"}
        if k == 2:
            return self.number_schema(True)
        if k == 3:
            return self.number_schema(False)
        if k == 4:
            values = r.sample(["red", "green", "x y", 3, -1, None, True, "é"], r.randint(1, 4))
            return {"enum": values}
        if k == 5:
            return {"const": r.choice(["on", 7, False, "a\"b"])}
        return self.string_schema()

    def schema(self, depth=0):
        r = self.rng
        k = r.random()
        if depth >= 3 or k < 0.45:
            return self.scalar()
        if k < 0.65:
            return self.object_schema(depth)
        if k < 0.8:
            s = {"type": "array", "items": self.schema(depth + 1)}
            if r.random() < 0.3:
                s["prefixItems"] = [self.schema(depth + 1) for _ in range(r.randint(1, 2))]
                if r.random() < 0.3:
                    s["items"] = False
            s["maxItems"] = r.randint(0, 3) if self.bounded or r.random() < 0.5 else None
            if s["maxItems"] is None:
                del s["maxItems"]
            if r.random() < 0.3:
                s["minItems"] = r.randint(0, s.get("maxItems", 2))
            return s
        if k < 0.9:
            # anyOf / oneOf over distinct types: the branch is the value's JSON type.
            kinds = r.sample(["string", "integer", "boolean", "null", "object", "array"], r.randint(2, 3))
            branches = []
            for t in kinds:
                if t == "string":
                    branches.append(self.string_schema())
                elif t == "integer":
                    branches.append(self.number_schema(True))
                elif t == "object":
                    branches.append(self.object_schema(depth + 1))
                elif t == "array":
                    branches.append({"type": "array", "items": self.scalar(), "maxItems": 2})
                else:
                    branches.append({"type": t})
            return {r.choice(["anyOf", "oneOf"]): branches}
        name = f"d{len(self.defs)}"
        self.defs[name] = None  # reserved while its body is made
        self.defs[name] = self.object_schema(depth + 1)
        if not self.bounded and r.random() < 0.3:
            # A recursive definition, with a base case: the reference is optional.
            self.defs[name]["properties"]["next"] = {"anyOf": [{"$ref": f"#/$defs/{name}"}, {"type": "null"}]}
        return {"$ref": f"#/$defs/{name}"}

    def object_schema(self, depth):
        r = self.rng
        names = r.sample(["id", "name", "é", "a\"q", "items", "x", "value", "z-1"], r.randint(0, 4))
        props = {n: self.schema(depth + 1) for n in names}
        s = {"type": "object", "properties": props}
        req = [n for n in names if r.random() < 0.5]
        if req:
            s["required"] = req
        if self.bounded:
            s["additionalProperties"] = False
        else:
            c = r.random()
            s["additionalProperties"] = False if c < 0.4 else True if c < 0.6 else self.scalar()
            if s["additionalProperties"] is True and r.random() < 0.5:
                del s["additionalProperties"]
        return s

    def root(self):
        s = self.schema() if self.rng.random() < 0.4 else self.object_schema(0)
        if self.defs:
            s = dict(s)
            s["$defs"] = self.defs
        return s


def random_schema(seed, bounded):
    g = Gen(random.Random(seed), bounded)
    return g.root()


def resolve(s, root):
    while isinstance(s, dict) and "$ref" in s:
        node = root
        for step in s["$ref"][2:].split("/") if s["$ref"] != "#" else []:
            node = node[step]
        s = node
    return s


def gap(rng):
    k = rng.random()
    if k < 0.5:
        return ""
    if k < 0.75:
        return " "
    return "\n" + "".join(rng.choice(" \t") for _ in range(rng.randint(0, 20)))


def json_string(text, rng):
    """text as a JSON string, with a random choice of the escapes JSON allows."""
    out = '"'
    short = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b", "\f": "\\f"}
    for ch in text:
        cp = ord(ch)
        if ch in short and (ch in '"\\' or cp < 0x20 or rng.random() < 0.8):
            out += short[ch]
        elif cp < 0x20 or (cp < 0x10000 and not 0xD800 <= cp <= 0xDFFF and rng.random() < 0.1):
            out += "\\u%04x" % cp if rng.random() < 0.5 else "\\u%04X" % cp
        elif ch == "/" and rng.random() < 0.5:
            out += "\\/"
        else:
            out += ch
    return out + '"'


def any_value(rng, depth=0):
    k = rng.randrange(6 if depth < 2 else 4)
    if k == 0:
        return rng.choice(["null", "true", "false"])
    if k == 1:
        return rng.choice(["0", "-12", "3.5", "1e-3", "-0"])
    if k == 2:
        return json_string("".join(rng.choice("ab é😀\"") for _ in range(rng.randint(0, 4))), rng)
    if k == 3:
        return "[]"
    if k == 4:
        return "[" + gap(rng) + ("," + gap(rng)).join(any_value(rng, depth + 1) for _ in range(rng.randint(1, 2))) + gap(rng) + "]"
    members = [json_string(rng.choice(["k", "é", "x y"]) + str(i), rng) + ":" + gap(rng) + any_value(rng, depth + 1)
               for i in range(rng.randint(1, 2))]
    return "{" + gap(rng) + ("," + gap(rng)).join(members) + gap(rng) + "}"


def number_in(s, rng, integer):
    from decimal import Decimal, ROUND_FLOOR, ROUND_CEILING
    lo = hi = None
    for key, side in (("minimum", "lo"), ("exclusiveMinimum", "lo"), ("maximum", "hi"), ("exclusiveMaximum", "hi")):
        if key in s:
            v = Decimal(repr(s[key])) if isinstance(s[key], float) else Decimal(s[key])
            if side == "lo":
                lo = (v, key.startswith("exclusive"))
            else:
                hi = (v, key.startswith("exclusive"))
    bounded = lo is not None or hi is not None
    a = lo[0] if lo else (hi[0] - 1000 if hi else Decimal(-10 ** rng.randint(0, 12)))
    b = hi[0] if hi else a + (1000 if bounded else 10 ** rng.randint(0, 12))
    for _ in range(50):
        places = 0 if integer else rng.randint(0, 3)
        q = Decimal(1).scaleb(-places)
        x = (a + (b - a) * Decimal(rng.random())).quantize(q, rounding=ROUND_FLOOR if rng.random() < 0.5 else ROUND_CEILING)
        if integer:
            x = x.to_integral_value()
        if lo and (x < lo[0] or (lo[1] and x == lo[0])):
            continue
        if hi and (x > hi[0] or (hi[1] and x == hi[0])):
            continue
        text = format(x, "f")
        if text.startswith("-") and x == 0:
            continue
        if bounded and not integer and sum(c.isdigit() for c in text) > 15:
            continue
        if not bounded and not integer and rng.random() < 0.2:
            text += rng.choice(["e3", "E-2", "e+0"])
        return text
    return None


def instance(s, rng, root, depth=0):
    """A valid instance of s as JSON text in tern's normal form, or None."""
    s = resolve(s, root)
    if s is True or s == {}:
        return any_value(rng)
    if s is False or depth > 8:
        return None
    for key in ("anyOf", "oneOf"):
        if key in s:
            return instance(rng.choice(s[key]), rng, root, depth + 1)
    if "enum" in s or "const" in s:
        values = s["enum"] if "enum" in s else [s["const"]]
        return json.dumps(rng.choice(values), separators=(",", ":"), ensure_ascii=False)
    types = s.get("type", ["null", "boolean", "integer", "number", "string", "array", "object"])
    t = rng.choice([types] if isinstance(types, str) else types)
    if t == "null":
        return "null"
    if t == "boolean":
        return rng.choice(["true", "false"])
    if t in ("integer", "number"):
        return number_in(s, rng, t == "integer")
    if t == "string":
        lo = s.get("minLength", 0)
        hi = s.get("maxLength", lo + 6)
        for _ in range(30):
            if "x-pattern" in s:
                text = s["x-pattern"].sample(rng)
            elif "format" in s:
                text = format_sample(s["format"], rng)
            else:
                text = "".join(rng.choice(string.ascii_letters + " é😀\"\\/\n\x01")
                               for _ in range(rng.randint(lo, max(lo, hi))))
            if lo <= len(text) <= s.get("maxLength", 10 ** 9):
                return json_string(text, rng)
        return None
    if t == "array":
        prefix = s.get("prefixItems", [])
        lo = s.get("minItems", 0)
        hi = s.get("maxItems", lo + 3)
        if s.get("items", True) is False:
            hi = min(hi, len(prefix))
        items = []
        for i in range(rng.randint(lo, max(lo, hi))):
            v = instance(prefix[i] if i < len(prefix) else s.get("items", True), rng, root, depth + 1)
            if v is None:
                return None
            items.append(v)
        return "[" + gap(rng) + ("," + gap(rng)).join(items) + gap(rng) + "]" if items else "[" + gap(rng) + "]"
    if t == "object":
        props = s.get("properties", {})
        required = s.get("required", [])
        members = []
        for name, sub in props.items():
            if name in required or rng.random() < 0.6:
                v = instance(sub, rng, root, depth + 1)
                if v is None:
                    if name in required:
                        return None
                    continue
                members.append(json.dumps(name, ensure_ascii=False) + ":" + gap(rng) + v)
        additional = s.get("additionalProperties", True if not props else False)
        if additional is not False:
            for i in range(rng.randint(0, 2)):
                name = rng.choice(["extra", "é", "n"]) + str(i)
                if name in props:
                    continue
                v = instance(additional, rng, root, depth + 1)
                if v is not None:
                    members.append(json_string(name, rng) + ":" + gap(rng) + v)
        return "{" + gap(rng) + ("," + gap(rng)).join(members) + gap(rng) + "}" if members else "{" + gap(rng) + "}"
    return None


MUTATION_CHARS = '{}[]",:0123456789-.eE aZtfnul\\\n\t/'


def mutate(text, rng):
    """text with a random small edit."""
    if not text:
        return rng.choice(MUTATION_CHARS)
    i = rng.randrange(len(text))
    k = rng.randrange(6)
    if k == 0:
        return text[:i] + text[i + 1:]
    if k == 1:
        return text[:i] + rng.choice(MUTATION_CHARS) + text[i:]
    if k == 2:
        return text[:i] + rng.choice(MUTATION_CHARS) + text[i + 1:]
    if k == 3:
        j = min(len(text), i + rng.randint(1, 6))
        return text[:j] + text[i:j] + text[j:]
    if k == 4:
        return text[:i] + rng.choice([" ", "\n", "\n  ", "\t", "  "]) + text[i:]
    return "".join(c for c in text if c not in " \n\t") if rng.random() < 0.5 else text[:i]


class RandomGbnf:
    """A random GBNF grammar without recursion, as GBNF text and as the Python
    regular expression with the same language, with a sampler of its strings."""

    ALPHABET = "ab-é\""

    def __init__(self, rng):
        self.rng = rng
        self.rules = {}
        self.root = self.node(0)

    def node(self, depth):
        r = self.rng
        k = r.randrange(7) if depth < 3 else r.randrange(2)
        if k == 0:
            return ("lit", "".join(r.choice(self.ALPHABET) for _ in range(r.randint(1, 3))))
        if k == 1:
            chars = sorted(set(r.sample(self.ALPHABET, r.randint(1, 3))))
            return ("cls", chars, r.random() < 0.3)
        if k == 2:
            return ("seq", [self.node(depth + 1) for _ in range(r.randint(2, 3))])
        if k == 3:
            return ("alt", [self.node(depth + 1) for _ in range(r.randint(2, 3))])
        if k == 4:
            lo = r.randint(0, 2)
            return ("rep", self.node(depth + 1), lo, r.choice([lo, lo + 1, lo + 2, None]))
        if k == 5:
            name = f"r{len(self.rules)}"
            self.rules[name] = None
            self.rules[name] = self.node(depth + 1)
            return ("ref", name)
        return ("lit", "")

    @staticmethod
    def gbnf_char(c):
        return {'"': '\\"', "\\": "\\\\", "-": "\\-", "]": "\\]", "^": "\\^", "[": "\\["}.get(c, c)

    def render(self, n, gbnf):
        """n as GBNF text, or as a Python regular expression."""
        import re as _re
        kind = n[0]
        if kind == "lit":
            return '"' + "".join({'"': '\\"', "\\": "\\\\"}.get(c, c) for c in n[1]) + '"' if gbnf else _re.escape(n[1])
        if kind == "cls":
            body = "".join(self.gbnf_char(c) if gbnf else _re.escape(c) for c in n[1])
            return "[" + ("^" if n[2] else "") + body + "]"
        open_ = "(" if gbnf else "(?:"
        if kind in ("seq", "alt"):
            sep = (" " if gbnf else "") if kind == "seq" else (" | " if gbnf else "|")
            return open_ + sep.join(self.render(x, gbnf) for x in n[1]) + ")"
        if kind == "rep":
            hi = "" if n[3] is None else str(n[3])
            return open_ + self.render(n[1], gbnf) + "){" + str(n[2]) + "," + hi + "}"
        return n[1] if gbnf else open_ + self.render(self.rules[n[1]], gbnf) + ")"

    def text(self):
        lines = ["root ::= " + self.render(self.root, True)]
        for name, body in self.rules.items():
            lines.append(f"{name} ::= {self.render(body, True)}")
        return "\n".join(lines)

    def regex(self):
        return self.render(self.root, False)

    def sample(self, n=None):
        r = self.rng
        n = self.root if n is None else n
        kind = n[0]
        if kind == "lit":
            return n[1]
        if kind == "cls":
            return r.choice(n[1]) if not n[2] else r.choice([c for c in "xyz🙂\n" + self.ALPHABET if c not in n[1]])
        if kind == "seq":
            return "".join(self.sample(x) for x in n[1])
        if kind == "alt":
            return self.sample(r.choice(n[1]))
        if kind == "rep":
            return "".join(self.sample(n[1]) for _ in range(r.randint(n[2], n[3] if n[3] is not None else n[2] + 3)))
        return self.sample(self.rules[n[1]])
