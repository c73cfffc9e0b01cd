// The Qwen tool-call grammar: the template's rendering of calls is accepted,
// malformed calls are refused, added tokens are forced for the tags, and
// random walks through the grammar always give a call that tern's parser
// reads back with arguments of the schema's types.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/rng.h"
#include "grammar/json_shape.h"
#include "grammar/tool_grammar.h"
#include "grammar_test_util.h"
#include "tokenizer/tool_call.h"

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
  EXPECT_EQ(
      error_of(ojson::parse(
          R"([{"function": {"name": "f", "parameters": {"properties": {"x": {"enum": [1, 2]}}}}}])")),
      "tool 'f': no value of parameter 'x' can be written in the tool-call format (its schema "
      "needs a type that tern's parser reads)");
  EXPECT_EQ(
      error_of(ojson::parse(
          R"([{"function": {"name": "f", "parameters": {"properties": {}, "required": ["y"]}}}])")),
      "tool 'f': required parameter \"y\" is not among its properties");
  EXPECT_NE(
      error_of(
          ojson::parse(
              R"([{"function": {"name": "f", "parameters": {"properties": {"x": {"type": "string", "not": {}}}}}}])"))
          .find("unsupported keyword 'not'"),
      std::string::npos);
}

}  // namespace
}  // namespace tern::test
