// JSON Schema compilation: documents accepted and refused for each supported
// keyword, the normal form (property order, bounded whitespace), and the
// errors naming unsupported keywords and impossible schemas.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "core/rng.h"
#include "grammar/json_schema.h"
#include "grammar_test_util.h"

namespace tern::test {
namespace {

using grammar::ojson;

std::shared_ptr<const grammar::CompiledGrammar> compile_schema(const std::string& schema) {
  static std::vector<std::unique_ptr<ojson>> keep;  // schemas outlive their grammars' compilers
  keep.push_back(std::make_unique<ojson>(ojson::parse(schema)));
  return std::make_shared<const grammar::CompiledGrammar>(
      grammar::json_schema_grammar(*keep.back()), qwen3_vocab());
}

std::string error_of(const std::string& schema) {
  return test::error_of([&] { compile_schema(schema); });
}

struct Case {
  const char* schema;
  std::vector<const char*> good, bad;
};

void check(const Case& c) {
  auto g = compile_schema(c.schema);
  for (const char* d : c.good) EXPECT_TRUE(matches(g, d)) << c.schema << " should accept " << d;
  for (const char* d : c.bad) EXPECT_FALSE(matches(g, d)) << c.schema << " should refuse " << d;
}

TEST(JsonSchema, Types) {
  check({R"({"type": "null"})", {"null"}, {"nul", "0", "\"null\""}});
  check({R"({"type": "boolean"})", {"true", "false"}, {"True", "1"}});
  check({R"({"type": "integer"})",
         {"0", "-7", "-0", "12345678901234567890"},
         {"01", "1.0", "1e3", "+1"}});
  check(
      {R"({"type": "number"})", {"0", "-0.5", "1e-7", "3.25E+10", "10"}, {".5", "1.", "01", "1e"}});
  check({R"({"type": "string"})",
         {R"("")", R"("a\"b\\c\/\n\u00e9")", "\"日本\""},
         {"\"a", R"("\x")", "\"\x01\"", R"("\ud800")"}});
  check({R"({"type": ["string", "null"]})", {"null", "\"x\""}, {"1"}});
  check({R"({})", {"null", "[1, {\"a\": [true]}]", "\"s\"", "-1.5"}, {"[1,]", "{\"a\"}"}});
  check({R"(true)", {"{}", "3"}, {"x"}});
}

TEST(JsonSchema, Objects) {
  const char* person = R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
      "required": ["name"], "additionalProperties": false})";
  check({person,
         {R"({"name": "Al"})", R"({"name":"Al","age":3})", R"({ "name": "Al", "tags": [ "x" ] })",
          "{\n  \"name\": \"Al\",\n  \"age\": 3\n}", R"({"name": "Al", "age": 3, "tags": []})"},
         {R"({})", R"({"age": 3})", R"({"age": 3, "name": "Al"})", R"({"name": "Al", "x": 1})",
          R"({"name": "Al",})", R"({"name": "Al", "name": "B"})", "{\n\n\"name\": \"Al\"}",
          R"({"name" : "Al"})", R"({"name": "Al" , "age": 3})",
          "{\"name\":                       \"Al\"}"}});
  // Additional properties: names the schema lists are not additional.
  check(
      {R"({"properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}})",
       {R"({"a": 1, "b": true})", R"({"b": false, "c": true})", "\"not an object\""},
       {R"({"b": 1})", R"({"a": true})", R"({"b": true, "a": 1})", R"({"\u0061": true})"}});
  check({R"({"type": "object", "required": ["x"]})",
         {R"({"x": null})", R"({"x": 1, "y": 2})"},
         {"{}"}});
}

TEST(JsonSchema, Arrays) {
  check({R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})",
         {"[1]", "[1, 2, 3]", "[ 1,2 ]", "[\n  1,\n  2\n]"},
         {"[]", "[1, 2, 3, 4]", "[1,]", "[\"a\"]"}});
  check(
      {R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false})",
       {"[]", "[\"a\"]", "[\"a\", 1]"},
       {"[1]", "[\"a\", 1, 2]"}});
  check({R"({"type": "array", "prefixItems": [{"const": 1}], "minItems": 2})",
         {"[1, 2]", "[1, \"x\", null]"},
         {"[1]", "[2, 2]"}});
}

TEST(JsonSchema, Enums) {
  check({R"({"enum": ["red", "green", 3, null, {"a": [1]}]})",
         {"\"red\"", "3", "null", "{\"a\":[1]}"},
         {"\"blue\"", "4", "{\"a\": [1]}"}});
  check(
      {R"({"type": "string", "enum": ["a", 1, "b"], "maxLength": 1})", {"\"a\"", "\"b\""}, {"1"}});
  check({R"({"const": "x"})", {"\"x\""}, {"\"y\""}});
}

TEST(JsonSchema, Strings) {
  check({R"({"type": "string", "minLength": 2, "maxLength": 3})",
         {"\"ab\"", "\"abc\"", "\"é😀\"", R"("\n\t")", R"("\u0041b")"},
         {"\"a\"", "\"abcd\"", "\"\""}});
  check({R"({"type": "string", "pattern": "^[a-z]+-[0-9]{2}$"})",
         {"\"ab-12\"", "\"z-00\""},
         {"\"ab-1\"", "\"Ab-12\"", "\"ab-123\"", "\"-12\""}});
  check({R"({"type": "string", "pattern": "ab"})", {"\"ab\"", "\"xxabyy\""}, {"\"a\"", "\"ba\""}});
  check(
      {R"({"type": "string", "pattern": "^a\"b$"})", {R"("a\"b")", R"("a\u0022b")"}, {R"("ab")"}});
  check(
      {R"({"type": "string", "format": "date"})",
       {"\"2024-02-29\"", "\"2023-12-31\"", "\"2000-02-29\""},
       {"\"2023-02-29\"", "\"1900-02-29\"", "\"2023-13-01\"", "\"2023-04-31\"", "\"0000-01-01\""}});
  check({R"({"type": "string", "format": "date-time"})",
         {"\"2024-05-01T12:30:00Z\"", "\"2024-05-01T23:59:59.123+05:30\""},
         {"\"2024-05-01 12:30:00Z\"", "\"2024-05-01T24:00:00Z\"", "\"2024-05-01T12:30:00\""}});
  check({R"({"type": "string", "format": "time"})", {"\"08:00:00Z\""}, {"\"8:00:00Z\""}});
  check({R"({"type": "string", "format": "uuid"})",
         {"\"123e4567-e89b-12d3-a456-426614174000\""},
         {"\"123e4567e89b12d3a456426614174000\""}});
  check({R"({"type": "string", "format": "email"})",
         {"\"a.b+c@ex-ample.co.uk\""},
         {"\"a@b\"", "\"@b.c\"", "\"a b@c.d\""}});
  check({R"({"type": "string", "format": "ipv4"})",
         {"\"192.168.0.1\""},
         {"\"256.1.1.1\"", "\"01.1.1.1\""}});
}

TEST(JsonSchema, Numbers) {
  check({R"({"type": "integer", "minimum": -5, "maximum": 120})",
         {"-5", "0", "7", "99", "120"},
         {"-6", "121", "1000", "-10"}});
  check({R"({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10.5})",
         {"1", "10"},
         {"0", "11", "-1"}});
  check({R"({"type": "number", "minimum": 0.5, "maximum": 2})",
         {"0.5", "0.75", "1", "2", "2.0", "1.999"},
         {"0.49", "2.01", "-1", "0", "3", "1e0"}});
  check({R"({"type": "number", "exclusiveMinimum": -1.25, "exclusiveMaximum": 0})",
         {"-1.2", "-0.001", "-1.24999"},
         {"-1.25", "0", "0.0", "-2", "1", "-0"}});
  check({R"({"type": "number", "minimum": 100})", {"100", "100.5", "123456"}, {"99.9", "-100"}});
}

TEST(JsonSchema, Combinators) {
  check({R"({"anyOf": [{"type": "string", "maxLength": 1}, {"type": "integer", "minimum": 10}]})",
         {"\"a\"", "10", "99"},
         {"\"ab\"", "9"}});
  check(
      {R"({"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind"]},
                      {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}}, "required": ["kind"]}]})",
       {R"({"kind": "a", "x": 1})", R"({"kind": "b", "y": "s"})"},
       {R"({"kind": "c"})", R"({"kind": "a", "x": "s"})"}});
  check(
      {R"({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                      {"properties": {"b": {"type": "string"}}, "required": ["b"]}]})",
       {R"({"a": 1, "b": "x"})"},
       {R"({"a": 1})", R"({"b": "x", "a": 1})"}});
  // allOf with additionalProperties false on one side: the other's property is not allowed.
  check(
      {R"({"allOf": [{"properties": {"a": {}}, "additionalProperties": false}, {"properties": {"b": {}}}]})",
       {R"({"a": 1})", "{}"},
       {R"({"a": 1, "b": 2})"}});
}

TEST(JsonSchema, References) {
  const char* tree = R"({"$defs": {"node": {"type": "object", "properties": {
      "value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["value"], "additionalProperties": false}}, "$ref": "#/$defs/node"})";
  check({tree,
         {R"({"value": 1})",
          R"({"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}]})"},
         {R"({"children": []})", R"({"value": 1, "children": [{}]})"}});
  check(
      {R"({"definitions": {"s": {"type": "string"}}, "type": "array", "items": {"$ref": "#/definitions/s"}})",
       {"[\"a\"]"},
       {"[1]"}});
}

TEST(JsonSchema, Errors) {
  EXPECT_EQ(error_of(R"({"type": "string", "not": {"const": "a"}})"),
            "JSON Schema: unsupported keyword 'not' at #");
  EXPECT_EQ(error_of(R"({"properties": {"a": {"type": "number", "multipleOf": 0.5}}})"),
            "JSON Schema: multipleOf 0.5 at #/properties/a is not supported (tern enforces "
            "integer divisors from 1 to 1000)");
  // A response format names the keyword and its JSON pointer.
  for (const char* kw : {"not", "if", "patternProperties", "contains", "dependentRequired"})
    EXPECT_EQ(
        error_of(fmt::format(R"({{"properties": {{"x": {{"type": "object", "properties":
                 {{"y/z": {{"{}": {{}}}}}}}}}}}})",
                             kw)),
        fmt::format("JSON Schema: unsupported keyword '{}' at #/properties/x/properties/y~1z", kw));
  EXPECT_EQ(error_of(R"({"properties": {"a": {"type": "string", "maxLength": 524288}}})"),
            "JSON Schema: 'maxLength' 524288 at #/properties/a is above tern's limit of 10000");
  EXPECT_EQ(error_of(R"({"type": "strin"})"),
            "JSON Schema: 'type' at # must be a type name (null, boolean, integer, number, string, "
            "array, object) or a list of them");
  EXPECT_EQ(error_of(R"({"type": "array", "minItems": 1000000000})"),
            "JSON Schema: 'minItems' 1000000000 at # is above tern's limit of 10000");
  EXPECT_EQ(error_of(R"({"$ref": "#/$defs/missing"})"),
            "JSON Schema: $ref '#/$defs/missing' at # does not resolve");
  EXPECT_EQ(error_of(R"({"$ref": "https://example.com/s.json"})"),
            "JSON Schema: $ref 'https://example.com/s.json' at #: only local references (#/...) "
            "are supported");
  EXPECT_EQ(
      error_of(
          R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})"),
      "JSON Schema: $ref '#/$defs/a' at #/$defs/b refers back to itself with nothing in between");
  EXPECT_EQ(
      error_of(R"({"type": "string", "format": "iri"})"),
      "JSON Schema: format 'iri' at # is not supported (tern enforces date, time, date-time, uuid, "
      "email, hostname, ipv4, ipv6, uri, uri-reference)");
  EXPECT_EQ(error_of(R"({"properties": {"p": {"type": "string", "pattern": "(?=a)b"}}})"),
            "JSON Schema at #/properties/p: pattern '(?=a)b': lookaround assertions are not "
            "supported (at offset 2)");
  EXPECT_EQ(error_of(R"({"type": "string", "pattern": "(a)\\1"})"),
            "JSON Schema at #: pattern '(a)\\1': backreferences are not supported (at offset 4)");
  EXPECT_EQ(error_of(R"({"type": "integer", "minimum": 5, "maximum": 4})"),
            "JSON Schema: no value satisfies the schema at #");
  EXPECT_NE(
      error_of(R"({"type": "object", "properties": {"self": {"$ref": "#"}}, "required": ["self"]})")
          .find("can never finish"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]})")
                .find("oneOf at #/oneOf"),
            std::string::npos);
  EXPECT_EQ(error_of(R"({"type": "array", "uniqueItems": 1})"),
            "JSON Schema: 'uniqueItems' at # must be a boolean");
  EXPECT_EQ(error_of(R"({"type": "object", "maxProperties": 17})"),
            "JSON Schema: 'maxProperties' 17 at # is not supported (tern enforces 0 to 16)");
  EXPECT_EQ(
      error_of(R"({"minimum": true})"),
      "JSON Schema: boolean 'minimum' at # (draft 4) is not supported; give the bound itself");
}

// Fresh inputs each run; the seed is printed on a failure.
uint64_t fresh_seed() {
  static std::random_device device;
  return (uint64_t(device()) << 32) | device();
}

std::string hex_group(CounterRng& rng, int digits) {
  std::string g;
  for (int i = 0; i < digits; ++i) g += "0123456789abcdefABCDEF"[rng.next_u64() % 22];
  return g;
}

TEST(JsonSchema, Formats) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  CounterRng rng(seed);
  auto ipv6 = compile_schema(R"({"type": "string", "format": "ipv6"})");
  auto host = compile_schema(R"({"type": "string", "format": "hostname"})");
  auto uri = compile_schema(R"({"type": "string", "format": "uri"})");
  auto ref = compile_schema(R"({"type": "string", "format": "uri-reference"})");
  auto quoted = [](const std::string& s) { return ojson(s).dump(); };
  for (int round = 0; round < 40; ++round) {
    // Eight groups, a random run of them written "::", the last two maybe an IPv4 address.
    std::vector<std::string> groups;
    for (int i = 0; i < 8; ++i) groups.push_back(hex_group(rng, 1 + int(rng.next_u64() % 4)));
    const bool v4 = rng.next_u64() % 3 == 0;
    const int width = v4 ? 7 : 8;  // the IPv4 address is the last two groups
    if (v4)
      groups[6] = fmt::format("{}.{}.{}.{}", rng.next_u64() % 256, rng.next_u64() % 256,
                              rng.next_u64() % 256, rng.next_u64() % 256);
    groups.resize(size_t(width));
    const int from = int(rng.next_u64() % size_t(width + 1)),
              to = from + int(rng.next_u64() % size_t(width - from + 1));
    std::string text;
    for (int i = 0; i < width; ++i) {
      if (from < to && i >= from && i < to) {
        if (i == from) text += "::";
        continue;
      }
      if (!text.empty() && !text.ends_with(":")) text += ":";
      text += groups[size_t(i)];
    }
    EXPECT_TRUE(matches(ipv6, quoted(text))) << text;
    EXPECT_FALSE(matches(ipv6, quoted(text + ":" + hex_group(rng, 5)))) << text;
    EXPECT_FALSE(matches(ipv6, quoted("::" + text + "::"))) << text;
    // Host names of labels up to 63 characters; a 64-character label or a leading hyphen is out.
    std::string name;
    for (int l = 0, n = 1 + int(rng.next_u64() % 3); l < n; ++l) {
      std::string label = hex_group(rng, 1 + int(rng.next_u64() % 63));
      if (label.size() > 2) label[1 + rng.next_u64() % (label.size() - 2)] = '-';
      name += (l ? "." : "") + label;
    }
    EXPECT_TRUE(matches(host, quoted(name))) << name;
    EXPECT_FALSE(matches(host, quoted("-" + name))) << name;
    EXPECT_FALSE(matches(host, quoted(hex_group(rng, 64) + "." + name))) << name;
    EXPECT_FALSE(matches(host, quoted(name + ".."))) << name;
    // URIs: a scheme, characters of the set or percent escapes, a fragment.
    const std::string chars = "abcXYZ019-._~!$&'()*+,;=:@/?";
    std::string rest;
    for (int i = 0, n = int(rng.next_u64() % 20); i < n; ++i) {
      if (rng.next_u64() % 8) {
        rest += chars[rng.next_u64() % chars.size()];
      } else {
        rest += '%';  // appended apart: GCC 12 warns falsely (-Wrestrict) on "%" + string
        rest += hex_group(rng, 2);
      }
    }
    const std::string full = fmt::format("h{}:{}#{}", hex_group(rng, 2), rest, rest);
    EXPECT_TRUE(matches(uri, quoted(full))) << full;
    EXPECT_TRUE(matches(ref, quoted(full))) << full;
    EXPECT_TRUE(matches(ref, quoted("/" + rest))) << rest;
    EXPECT_FALSE(matches(uri, quoted("/" + rest))) << rest;
    EXPECT_FALSE(matches(uri, quoted(full + " x"))) << full;
    EXPECT_FALSE(matches(uri, quoted(full + "#"))) << full;
    EXPECT_FALSE(matches(ref, quoted("1" + full))) << full;  // a colon in a first segment
  }
}

TEST(JsonSchema, MultipleOf) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  CounterRng rng(seed);
  for (int m : {1, 2, 3, 7, 10, 25, 1000}) {
    auto plain = compile_schema(fmt::format(R"({{"type": "integer", "multipleOf": {}}})", m));
    auto bounded = compile_schema(fmt::format(
        R"({{"type": "number", "multipleOf": {}, "minimum": -500, "exclusiveMaximum": 5000}})", m));
    for (int i = 0; i < 40; ++i) {
      const int64_t v = int64_t(rng.next_u64() % 20000) - 10000;
      const bool multiple = v % m == 0;
      EXPECT_EQ(matches(plain, std::to_string(v)), multiple) << m << " " << v;
      EXPECT_EQ(matches(bounded, std::to_string(v)), multiple && v >= -500 && v < 5000)
          << m << " " << v;
    }
  }
}

TEST(JsonSchema, PropertyNamesAndCounts) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  CounterRng rng(seed);
  auto names = compile_schema(
      R"({"type": "object", "propertyNames": {"pattern": "^[a-c]+$", "maxLength": 3},
          "additionalProperties": {"type": "integer"}})");
  auto counted = compile_schema(
      R"({"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a"],
          "minProperties": 2, "maxProperties": 4, "additionalProperties": {"type": "integer"}})");
  // zod 4's records: propertyNames {"type": "string"}.
  auto record = compile_schema(
      R"({"type": "object", "propertyNames": {"type": "string"},
          "additionalProperties": {"type": "boolean"}})");
  for (int i = 0; i < 40; ++i) {
    std::string key;
    for (int n = 1 + int(rng.next_u64() % 5); n > 0; --n) key += "abcd"[rng.next_u64() % 4];
    const bool named = key.size() <= 3 && key.find('d') == std::string::npos;
    EXPECT_EQ(matches(names, fmt::format(R"({{"{}": 1}})", key)), named) << key;
    EXPECT_TRUE(matches(record, fmt::format(R"({{"{}": true}})", key))) << key;
    EXPECT_FALSE(matches(record, fmt::format(R"({{"{}": 1}})", key))) << key;
    // "a", maybe "b", then extra members x0, x1, ...: 2 to 4 in all.
    const bool b = rng.next_u64() % 2;
    const int extra = int(rng.next_u64() % 5), total = 1 + int(b) + extra;
    std::string doc = R"({"a": null)";
    if (b) doc += R"(, "b": "s")";
    for (int x = 0; x < extra; ++x) doc += fmt::format(R"(, "x{}": {})", x, x);
    doc += "}";
    EXPECT_EQ(matches(counted, doc), total >= 2 && total <= 4) << doc;
  }
  // uniqueItems is an annotation: accepted, not enforced.
  check({R"({"type": "array", "uniqueItems": true})", {"[1, 1]", "[]"}, {"{}"}});
}

}  // namespace
}  // namespace tern::test
