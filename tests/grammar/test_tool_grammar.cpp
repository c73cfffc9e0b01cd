// The Qwen tool-call grammar: the template's rendering of calls is accepted,
// malformed calls are refused, added tokens are forced for the tags, and
// random walks through the grammar always give a call that tern's parser
// reads back with arguments of the schema's types.
#include <gtest/gtest.h>

#include <random>

#include "chat/tool_call.h"
#include "core/error.h"
#include "core/rng.h"
#include "grammar/json_shape.h"
#include "grammar/tool_grammar.h"
#include "grammar_test_util.h"

namespace tern::test {
namespace {

using grammar::ojson;

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer", "minimum": 1, "maximum": 14},
                   "unit": {"enum": ["celsius", "fahrenheit"]}, "hourly": {"type": "boolean"},
                   "coords": {"type": "object", "properties": {"lat": {"type": "number", "minimum": -90, "maximum": 90}},
                              "required": ["lat"], "additionalProperties": false},
                   "note": {"type": ["string", "null"], "maxLength": 5}},
    "required": ["city"]}}},
  {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}
])");

std::shared_ptr<const grammar::CompiledGrammar> tool_grammar(grammar::ToolGrammarOptions o = {}) {
  return std::make_shared<const grammar::CompiledGrammar>(
      grammar::tool_call_grammar(kTools, o, *qwen3_vocab()), qwen3_vocab());
}

// Feeds text as the tokenizer encodes it (added tokens as their ids).
bool feed(grammar::Matcher& m, const std::string& text) {
  for (int32_t id : qwen3_tokenizer().encode(text))
    if (!m.accept(id)) return false;
  return true;
}

TEST(ToolGrammar, TemplateRenderingAccepted) {
  auto g = tool_grammar();
  grammar::Matcher m(g);
  EXPECT_TRUE(
      feed(m,
           "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
           "<parameter=days>\n3\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n"
           "<parameter=coords>\n{\"lat\": 48.85}\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(feed(m, "\n<tool_call>\n<function=ping>\n</function>\n</tool_call>"));
  EXPECT_TRUE(m.can_end());
}

TEST(ToolGrammar, MalformedRefused) {
  auto refused = [&](const std::string& text, grammar::ToolGrammarOptions o = {}) {
    grammar::Matcher m(tool_grammar(o));
    return !feed(m, text) || !m.can_end();
  };
  const std::string call = "<tool_call>\n<function=ping>\n</function>\n</tool_call>";
  EXPECT_FALSE(refused(call));
  EXPECT_TRUE(refused("<tool_call>\n<function=nope>\n</function>\n</tool_call>"));
  // Required parameter missing; a duplicate </parameter> (llama.cpp #24807); a bad type.
  EXPECT_TRUE(refused("<tool_call>\n<function=get_weather>\n</function>\n</tool_call>"));
  EXPECT_TRUE(
      refused("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
              "</parameter>\n</function>\n</tool_call>"));
  EXPECT_TRUE(
      refused("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
              "<parameter=days>\n30\n</parameter>\n</function>\n</tool_call>"));
  // One call only without parallel calls; only the named function when one is named.
  EXPECT_TRUE(refused(call + "\n" + call, {"", false, false}));
  EXPECT_TRUE(refused("<tool_call>\n<function=ping>\n</function>\n</tool_call>",
                      {"get_weather", true, false}));
  // The tags are the added tokens: their spelling in bytes is refused.
  grammar::Matcher m(tool_grammar());
  EXPECT_FALSE(m.accept_bytes("<tool_call>"));
}

// Random walks (tokens drawn uniformly from the mask) until the grammar is
// done; the text must parse to a call whose arguments have the schema's types.
TEST(ToolGrammar, RandomCallsParse) {
  auto g = tool_grammar({"", false, false});
  const grammar::Vocab& vocab = *qwen3_vocab();
  ToolSchemas schemas(kTools);
  grammar::SchemaDocument doc(kTools[0]["function"]["parameters"]);
  int parsed = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    grammar::Matcher m(g);
    CounterRng rng(seed);
    std::string text;
    for (int step = 0; step < 400 && !m.done(); ++step) {
      const auto ids = mask_ids(fast_mask(m));
      ASSERT_FALSE(ids.empty());
      const int32_t id = ids[size_t(rng.next_u64() % ids.size())];
      ASSERT_TRUE(m.accept(id));
      text += vocab.added(id) ? std::string("<") + (vocab.bytes(id) == "<tool_call>" ? "o>" : "c>")
                              : std::string(vocab.bytes(id));
    }
    if (!m.done()) continue;  // a long string value; the walk is cut
    ASSERT_TRUE(text.find("<o>") != std::string::npos && text.ends_with("<c>")) << text;
    const std::string block = text.substr(text.find("<o>") + 3, text.size() - text.find("<o>") - 6);
    auto call = parse_tool_call(block, schemas);
    ASSERT_TRUE(call) << block;
    ++parsed;
    if (call->name != "get_weather") continue;
    EXPECT_TRUE(doc.check(doc.shape(&doc.root()), call->arguments)) << call->arguments_json();
  }
  EXPECT_GT(parsed, 20);
}

TEST(ToolGrammar, Errors) {
  auto error_of = [](const ojson& tools, grammar::ToolGrammarOptions o = {}) -> std::string {
    try {
      grammar::tool_call_grammar(tools, o, *qwen3_vocab());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of(kTools, {"nope", true, false}),
            "tool_choice names function 'nope', which is not among the tools");
  EXPECT_EQ(
      error_of(ojson::parse(R"([{"type": "function", "function": {"name": "a>b"}}])")),
      "tool call format: function name 'a>b' cannot be written as <function=NAME> (it must be "
      "non-empty, without '>' or newlines, and not start or end with whitespace)");
}

// What each tool schema leaves unenforced, as "parameter:keyword".
std::vector<std::string> degraded(const ojson& tools) {
  std::vector<grammar::ToolDegradation> d;
  grammar::CompiledGrammar(grammar::tool_call_grammar(tools, {}, *qwen3_vocab(), &d),
                           qwen3_vocab());
  std::vector<std::string> out;
  for (const auto& x : d) out.push_back(x.parameter + ":" + x.keyword);
  return out;
}

ojson one_tool(const std::string& properties, const std::string& extra = "") {
  return ojson::parse(fmt::format(
      R"([{{"type": "function", "function": {{"name": "f", "parameters": {{"type": "object",
          "properties": {}{}}}}}}}])",
      properties, extra));
}

TEST(ToolGrammar, SchemasDegrade) {
  using V = std::vector<std::string>;
  // Dropped: each names its parameter and keyword.
  const std::pair<const char*, const char*> dropped[] = {
      {R"({"type": "string", "format": "iri"})", "format"},
      {R"({"type": "string", "maxLength": 524288})", "maxLength"},
      {R"({"type": "array", "items": {"type": "string"}, "maxItems": 100000})", "maxItems"},
      {R"({"type": "object", "patternProperties": {"^a": {"type": "integer"}},
           "additionalProperties": false})",
       "patternProperties"},
      {R"({"type": "integer", "multipleOf": 0.5})", "multipleOf"},
      {R"({"type": "object", "maxProperties": 100})", "maxProperties"},
      {R"({"type": "array", "contains": {"type": "integer"}})", "contains"},
      {R"({"type": "string", "not": {"const": "x"}})", "not"},
      {R"({"type": "string", "if": {"minLength": 2}})", "if"},
      {R"({"type": "object", "dependentRequired": {"a": ["b"]}})", "dependentRequired"},
      {R"({"type": "string", "pattern": "(?=a)b"})", "pattern"},
      {R"({"$ref": "https://example.com/x.json"})", "$ref"},
      {R"({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]})", "oneOf"},
  };
  for (const auto& [schema, keyword] : dropped)
    EXPECT_EQ(degraded(one_tool(fmt::format(R"({{"p": {}}})", schema))),
              (V{std::string("p:") + keyword}))
        << schema;
  // Supported in both modes: nothing is dropped.
  for (
      const char* schema :
      {R"({"type": "object", "propertyNames": {"type": "string"}, "additionalProperties": {"type": "string"}})",
       R"({"type": "object", "propertyNames": {"enum": ["a", "b"]}, "additionalProperties": true})",
       R"({"type": "string", "format": "uri"})", R"({"type": "string", "format": "uri-reference"})",
       R"({"type": "string", "format": "hostname"})", R"({"type": "string", "format": "ipv6"})",
       R"({"type": "object", "minProperties": 1, "maxProperties": 3})",
       R"({"type": "array", "uniqueItems": true})", R"({"type": "integer", "multipleOf": 5})"})
    EXPECT_EQ(degraded(one_tool(fmt::format(R"({{"p": {}}})", schema))), V{}) << schema;
  // A schema too large for the grammar: the parameter becomes any array.
  std::string many = "[";
  for (int i = 0; i < 300; ++i) many += fmt::format("{}\"value number {}\"", i ? "," : "", i);
  EXPECT_EQ(
      degraded(one_tool(fmt::format(
          R"({{"p": {{"type": "array", "items": {{"type": "string", "enum": {}]}}, "maxItems": 100}}}})",
          many))),
      V{"p:schema"});
  // Unreadable arguments: any parameters; a required name that is not a property is dropped.
  EXPECT_EQ(degraded(ojson::parse(R"([{"function": {"name": "f", "parameters": [1]}}])")),
            V{":parameters"});
  EXPECT_EQ(degraded(one_tool("{}", R"(, "required": ["y"])")), V{":required"});
  EXPECT_EQ(degraded(one_tool(R"({"x": {"enum": [1, 2]}})")), V{"x:schema"});
}

// A degraded parameter still parses back: any text of its declared type.
TEST(ToolGrammar, DegradedValuesParse) {
  const ojson tools = one_tool(
      R"({"url": {"type": "string", "format": "iri", "maxLength": 524288},
          "n": {"type": "integer", "not": {"const": 3}},
          "rec": {"type": "object", "propertyNames": {"type": "string"}, "additionalProperties": {"type": "number"}}})",
      R"(, "required": ["url"])");
  auto g = std::make_shared<const grammar::CompiledGrammar>(
      grammar::tool_call_grammar(tools, {}, *qwen3_vocab()), qwen3_vocab());
  grammar::Matcher m(g);
  EXPECT_TRUE(
      feed(m,
           "<tool_call>\n<function=f>\n<parameter=rec>\n{\"a b\": 1.5}\n</parameter>\n"
           "<parameter=url>\nanything at all\n</parameter>\n<parameter=n>\n3\n</parameter>\n"
           "</function>\n</tool_call>"));
  EXPECT_TRUE(m.can_end());
}

// Parameters in any order, each once, the required ones present.
TEST(ToolGrammar, ParametersInAnyOrder) {
  const uint64_t seed = (uint64_t(std::random_device()()) << 32) | std::random_device()();
  SCOPED_TRACE(seed);
  CounterRng rng(seed);
  const std::vector<std::pair<std::string, std::string>> params = {
      {"city", "Paris"},          {"days", "3"},   {"unit", "celsius"}, {"hourly", "true"},
      {"coords", "{\"lat\": 1}"}, {"note", "null"}};
  auto g = tool_grammar();
  auto accepted = [&](const std::vector<size_t>& order) {
    std::string text = "<tool_call>\n<function=get_weather>\n";
    for (size_t i : order)
      text += "<parameter=" + params[i].first + ">\n" + params[i].second + "\n</parameter>\n";
    grammar::Matcher m(g);
    return feed(m, text + "</function>\n</tool_call>") && m.can_end();
  };
  for (int round = 0; round < 20; ++round) {
    std::vector<size_t> order;
    for (size_t i = 0; i < params.size(); ++i)
      if (i == 0 || rng.next_u64() % 2) order.push_back(i);
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.next_u64() % i]);
    EXPECT_TRUE(accepted(order)) << ::testing::PrintToString(order);
    std::vector<size_t> twice = order;  // one of them again, anywhere
    twice.insert(twice.begin() + long(rng.next_u64() % (twice.size() + 1)),
                 order[rng.next_u64() % order.size()]);
    EXPECT_FALSE(accepted(twice)) << ::testing::PrintToString(twice);
    std::vector<size_t> missing;  // without the required "city"
    for (size_t i : order)
      if (i != 0) missing.push_back(i);
    EXPECT_FALSE(accepted(missing)) << ::testing::PrintToString(missing);
  }
  // Beyond kAnyOrderParameters, the schema's order.
  std::string props = "{";
  for (int i = 0; i <= grammar::kAnyOrderParameters; ++i)
    props += fmt::format(R"({}"p{}": {{"type": "integer"}})", i ? "," : "", i);
  auto big = std::make_shared<const grammar::CompiledGrammar>(
      grammar::tool_call_grammar(one_tool(props + "}"), {}, *qwen3_vocab()), qwen3_vocab());
  auto call = [&](const std::vector<int>& order) {
    std::string text = "<tool_call>\n<function=f>\n";
    for (int i : order) text += fmt::format("<parameter=p{}>\n{}\n</parameter>\n", i, i);
    grammar::Matcher m(big);
    return feed(m, text + "</function>\n</tool_call>") && m.can_end();
  };
  EXPECT_TRUE(call({0, 1, 2}));
  EXPECT_FALSE(call({1, 0}));
}

}  // namespace
}  // namespace tern::test
