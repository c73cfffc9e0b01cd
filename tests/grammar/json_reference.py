"""The reference tern's JSON grammars are checked against: a value is accepted
when it parses, python-jsonschema (Debian's, not tern) validates it, and its
text is in tern's normal form (docs/grammar.md): whitespace only after
{ [ , : and before } ], each gap "", " " or a newline and up to 20 spaces or
tabs; object members in the schema's property order, then the additional
ones (when additionalProperties is given, or no property is listed), whose
names the schema does not list; known names written as
json.dumps writes them; integers (type integer alone) without fraction or
exponent; bounded numbers without exponent, at most 15 digits, no negative
zero; enum and const values as compact json.dumps; no surrogate escapes;
patterns with tern's (ECMA-262) meaning and formats as RFC 3339 etc."""
import datetime
import ipaddress
import json
import re

import jsonschema

GAP = re.compile(r"( |\n[ \t]{0,20})?\Z")
INT = re.compile(r"-?(0|[1-9][0-9]*)\Z")
NUM = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?\Z")
SURROGATE = re.compile(r"(?<!\\)(\\\\)*\\u[dD][89abAB]", re.ASCII)
EMAIL = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@"
                   r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+\Z")
TIME = re.compile(r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])\Z")
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")


def _date(s):
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", s):
        return False
    try:
        datetime.date.fromisoformat(s)
        return True
    except ValueError:
        return False


def format_ok(fmt, s):
    if fmt == "date":
        return _date(s)
    if fmt == "time":
        return bool(TIME.match(s))
    if fmt == "date-time":
        return "T" in s and _date(s.split("T", 1)[0]) and bool(TIME.match(s.split("T", 1)[1]))
    if fmt == "uuid":
        return bool(UUID.match(s))
    if fmt == "email":
        return bool(EMAIL.match(s))
    if fmt == "ipv4":
        try:
            ipaddress.IPv4Address(s)
            return True
        except ValueError:
            return False
    return True


def checker():
    c = jsonschema.FormatChecker()
    for fmt in ["date", "time", "date-time", "uuid", "email", "ipv4"]:
        c.checks(fmt)(lambda s, fmt=fmt: not isinstance(s, str) or format_ok(fmt, s))
    return c


def strip(s):
    """The schema without the generator's x- annotations."""
    if isinstance(s, dict):
        return {k: strip(v) for k, v in s.items() if not k.startswith("x-")}
    if isinstance(s, list):
        return [strip(v) for v in s]
    return s


class Raw:
    """JSON text parsed with its spelling kept; None when the whitespace is not tern's."""

    def __init__(self, text):
        self.s, self.i = text, 0

    def parse(self):
        try:
            node = self.value()
        except (ValueError, IndexError):
            return None
        return node if node is not None and self.i == len(self.s) else None

    def gap(self):
        j = self.i
        while self.i < len(self.s) and self.s[self.i] in " \t\n\r":
            self.i += 1
        if not GAP.match(self.s[j:self.i]):
            raise ValueError("whitespace")

    def string(self):
        j = self.i
        assert self.s[self.i] == '"'
        self.i += 1
        while self.s[self.i] != '"':
            self.i += 2 if self.s[self.i] == "\\" else 1
        self.i += 1
        raw = self.s[j:self.i]
        if SURROGATE.search(raw):
            raise ValueError("surrogate")
        return ("string", raw, json.loads(raw))

    def items(self, close, item):
        """A comma-separated list up to `close` (the opening bracket read)."""
        self.i += 1
        self.gap()
        out = []
        if self.s[self.i] != close:
            while True:
                out.append(item())
                if self.s[self.i] != ",":
                    break
                self.i += 1
                self.gap()
        self.gap()
        if self.s[self.i] != close:
            raise ValueError(close)
        self.i += 1
        return out

    def member(self):
        key = self.string()
        if self.s[self.i] != ":":
            raise ValueError("colon")
        self.i += 1
        self.gap()
        return (key[1], key[2], self.value())

    def value(self):
        c = self.s[self.i]
        if c == "{":
            return ("object", self.items("}", self.member))
        if c == "[":
            return ("array", self.items("]", self.value))
        if c == '"':
            return self.string()
        m = re.compile(r"true|false|null|-?[0-9][0-9.eE+-]*").match(self.s, self.i)
        if not m:
            raise ValueError("value")
        self.i = m.end()
        tok = m.group()
        return (tok, tok, None) if tok in ("true", "false", "null") else ("number", tok, None)


class Reference:
    def __init__(self, schema):
        self.schema = schema
        self.clean = strip(schema)
        cls = jsonschema.Draft202012Validator
        self.validator = cls(self.clean, format_checker=checker())

    def resolve(self, s):
        while isinstance(s, dict) and "$ref" in s:
            node = self.schema
            for step in s["$ref"][2:].split("/") if s["$ref"] != "#" else []:
                node = node[step.replace("~1", "/").replace("~0", "~")]
            s = node
        return s

    def valid(self, sub, value):
        return self.validator.evolve(schema=strip(sub)).is_valid(value)

    def accepts(self, text):
        try:
            value = json.loads(text)
        except ValueError:
            return False
        if not self.validator.is_valid(value):
            return False
        node = Raw(text).parse()
        return node is not None and self.canonical(self.schema, node, value)

    def canonical(self, s, node, value):
        s = self.resolve(s)
        if s is True or s == {}:
            return self.any(node)
        if s is False:
            return False
        for key in ("anyOf", "oneOf"):
            if key in s:
                return any(self.valid(b, value) and self.canonical(b, node, value) for b in s[key])
        if "enum" in s or "const" in s:
            values = s.get("enum", [s.get("const")]) if "enum" in s else [s["const"]]
            return node[1] in [json.dumps(v, separators=(",", ":"), ensure_ascii=False) for v in values]
        types = s.get("type", ["null", "boolean", "integer", "number", "string", "array", "object"])
        types = [types] if isinstance(types, str) else types
        kind = node[0]
        if kind == "number":
            bounded = any(k in s for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"))
            raw = node[1]
            if "number" not in types:
                return bool(INT.match(raw)) and not (bounded and raw.startswith("-0"))
            if not bounded:
                return bool(NUM.match(raw))
            return ("e" not in raw.lower() and sum(c.isdigit() for c in raw) <= 15
                    and not re.fullmatch(r"-0(\.0*)?", raw))
        if kind == "string":
            p = s.get("x-pattern")
            return p is None or re.search(p.python(), value) is not None
        if kind == "array":
            prefix = s.get("prefixItems", [])
            for i, (item, v) in enumerate(zip(node[1], value)):
                sub = prefix[i] if i < len(prefix) else s.get("items", True)
                if not self.canonical(sub, item, v):
                    return False
            return True
        if kind == "object":
            props = s.get("properties", {})
            order = list(props)
            pos, extra, seen = -1, False, set()
            # Absent additionalProperties: members beyond the listed ones only when none is listed.
            additional = s.get("additionalProperties", True if not props else False)
            for raw_key, key, item in node[1]:
                sub_value = _value(item)
                if key in props:
                    if extra or key in seen or order.index(key) <= pos:
                        return False
                    if raw_key != json.dumps(key, ensure_ascii=False):
                        return False
                    pos = order.index(key)
                    seen.add(key)
                    if not self.canonical(props[key], item, sub_value):
                        return False
                else:
                    extra = True
                    if additional is False or not self.valid(additional, sub_value):
                        return False
                    if not self.canonical(additional, item, sub_value):
                        return False
            return True
        return True

    def any(self, node):
        if node[0] == "object":
            return all(self.any(item) for _, _, item in node[1])
        if node[0] == "array":
            return all(self.any(item) for item in node[1])
        return True


def _value(node):
    """The Python value of a raw node."""
    kind = node[0]
    if kind == "object":
        return {key: _value(item) for _, key, item in node[1]}
    if kind == "array":
        return [_value(item) for item in node[1]]
    if kind == "string":
        return node[2]
    return json.loads(node[1])
