// GrammarConstraint and request handling: the phases of an answer (reasoning
// left free, tool_choice "auto" triggered by <tool_call>), stop tokens where
// the grammar may end and only them when it is done, completion reporting,
// and the request fields with their errors.
#include <fmt/format.h>

#include <gtest/gtest.h>

#include "core/error.h"
#include "grammar/request.h"
#include "grammar_test_util.h"

namespace tern::test {
namespace {

using grammar::ConstraintRequest;
using grammar::GrammarConstraint;
using ojson = nlohmann::ordered_json;

int32_t id(const char* token) {
  return *qwen3_tokenizer().token_id(token);
}

std::vector<uint32_t> mask_of(GrammarConstraint& c) {
  std::vector<uint32_t> w((size_t(qwen3_vocab()->size()) + 31) / 32);
  c.allowed(w);
  return w;
}

bool allows(GrammarConstraint& c, int32_t token) {
  const auto w = mask_of(c);
  return w[size_t(token) / 32] >> (token % 32) & 1;
}

// Accepts the tokens of text, each one allowed by the mask first.
void feed(GrammarConstraint& c, const std::string& text) {
  for (int32_t t : qwen3_tokenizer().encode(text)) {
    ASSERT_TRUE(c.unconstrained() || allows(c, t)) << "token " << t << " in " << text;
    c.accept(t);
  }
}

grammar::GrammarCache& cache() {
  static grammar::GrammarCache c(qwen3_vocab());
  return c;
}

std::unique_ptr<GrammarConstraint> constraint_in(grammar::GrammarCache& c, const ojson& body) {
  return grammar::make_constraint(grammar::chat_constraints(body), c, false, {id("<|im_end|>")});
}

std::unique_ptr<GrammarConstraint> constraint(const ojson& body, bool thinking) {
  return grammar::make_constraint(grammar::chat_constraints(body), cache(), thinking,
                                  {id("<|im_end|>")});
}

const ojson kSchemaBody = ojson::parse(R"({"response_format": {"type": "json_schema", "json_schema":
    {"name": "n", "strict": true, "schema": {"type": "object", "properties": {"n": {"type": "integer"}},
     "required": ["n"], "additionalProperties": false}}}})");

TEST(Constraint, AnswerGrammarAndStop) {
  auto c = constraint(kSchemaBody, false);
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->unconstrained());
  EXPECT_FALSE(allows(*c, id("<|im_end|>")));
  feed(*c, "{\"n\": 12");
  EXPECT_FALSE(c->completed());
  feed(*c, "}");
  EXPECT_TRUE(c->completed());
  EXPECT_TRUE(c->done());
  EXPECT_EQ(mask_ids(mask_of(*c)), std::vector<int32_t>{id("<|im_end|>")});
  c->accept(id("<|im_end|>"));
  EXPECT_TRUE(c->completed());
  EXPECT_THROW(c->accept(id("{")), Error);
}

TEST(Constraint, StopWhereTheGrammarMayEnd) {
  auto body = ojson::parse(
      R"({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "integer"}}}})");
  auto c = constraint(body, false);
  feed(*c, "12");
  EXPECT_TRUE(allows(*c, id("<|im_end|>")));  // 12 is complete, but digits may follow
  EXPECT_TRUE(allows(*c, id("3")));
  EXPECT_FALSE(c->done());
  c->accept(id("<|im_end|>"));
  EXPECT_TRUE(c->done());
  EXPECT_TRUE(c->completed());
  EXPECT_THROW(constraint(body, false)->accept(id("x")), Error);
}

TEST(Constraint, AfterReasoning) {
  auto c = constraint(kSchemaBody, true);
  EXPECT_TRUE(c->unconstrained());
  feed(*c, "Let me think. { not JSON");
  EXPECT_TRUE(c->unconstrained());
  EXPECT_FALSE(c->completed());
  c->accept(id("</think>"));
  EXPECT_FALSE(c->unconstrained());
  feed(*c, "\n\n{\"n\": 1}");  // the newlines after </think> are allowed
  EXPECT_TRUE(c->done());
}

const ojson kTools = ojson::parse(R"([{"type": "function", "function": {"name": "f", "parameters":
    {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}])");

TEST(Constraint, ToolChoiceAuto) {
  ojson body = {{"tools", kTools}, {"parallel_tool_calls", false}};
  auto c = constraint(body, false);
  EXPECT_TRUE(c->unconstrained());
  feed(*c, "Sure, calling it.\n\n");
  c->accept(id("<tool_call>"));
  EXPECT_TRUE(c->in_grammar());
  EXPECT_FALSE(c->completed());
  EXPECT_FALSE(allows(*c, id("<|im_end|>")));  // a started call completes
  feed(*c, "\n<function=f>\n<parameter=x>\n5\n</parameter>\n</function>\n");
  c->accept(id("</tool_call>"));
  EXPECT_TRUE(c->completed());
  EXPECT_EQ(c->triggered(), 1);
  // parallel_tool_calls false: no second call.
  EXPECT_FALSE(c->unconstrained());
  EXPECT_FALSE(allows(*c, id("<tool_call>")));
  EXPECT_TRUE(allows(*c, id("<|im_end|>")));
}

TEST(Constraint, ToolChoiceRequiredAndNamed) {
  ojson body = {{"tools", kTools}, {"tool_choice", "required"}};
  auto c = constraint(body, false);
  // "\n", "\n\n" or <tool_call>.
  EXPECT_EQ(mask_ids(mask_of(*c)), (std::vector<int32_t>{id("Ċ"), id("ĊĊ"), id("<tool_call>")}));
  c->accept(id("<tool_call>"));
  feed(*c, "\n<function=f>\n<parameter=x>\n-3\n</parameter>\n</function>\n");
  c->accept(id("</tool_call>"));
  EXPECT_TRUE(c->completed());
  EXPECT_TRUE(allows(*c, id("<|im_end|>")));  // or another call
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "g"}}}};
  EXPECT_THROW(constraint(body, false), Error);
}

std::string chat_error(const std::string& body) {
  try {
    grammar::chat_constraints(ojson::parse(body));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Constraint, RequestFields) {
  auto r = grammar::chat_constraints(kSchemaBody);
  EXPECT_EQ(r.answer, ConstraintRequest::Answer::json_schema);
  EXPECT_EQ(
      grammar::chat_constraints(ojson::parse(R"({"response_format": {"type": "json_object"}})"))
          .answer,
      ConstraintRequest::Answer::json_object);
  EXPECT_TRUE(
      grammar::chat_constraints(ojson::parse(R"({"response_format": {"type": "text"}})")).empty());
  EXPECT_TRUE(grammar::chat_constraints(ojson{{"tools", kTools}, {"tool_choice", "none"}}).empty());
  EXPECT_EQ(grammar::chat_constraints(ojson{{"tools", kTools}}).tools,
            ConstraintRequest::Tools::automatic);
  EXPECT_EQ(chat_error(R"({"response_format": {"type": "yaml"}})"),
            "response_format type 'yaml' is not supported (text, json_object, json_schema)");
  EXPECT_EQ(
      chat_error(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})"),
      "response_format.json_schema.schema must be a JSON Schema (an object)");
  EXPECT_EQ(chat_error(R"({"tool_choice": "required"})"),
            "tool_choice \"required\" needs a non-empty tools list");
  EXPECT_EQ(chat_error(R"({"tools": [], "tool_choice": "sometimes"})"),
            "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
            "\"function\": {\"name\": ...}}");
  EXPECT_EQ(chat_error(R"({"parallel_tool_calls": "no"})"),
            "parallel_tool_calls must be a boolean");
  auto completion_error = [](const std::string& body) -> std::string {
    try {
      grammar::completion_constraints(ojson::parse(body));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(completion_error(R"({"grammar": "root ::= \"a\"", "json_schema": {}})"),
            "give at most one of grammar, json_schema and response_format");
  EXPECT_EQ(completion_error(R"({"grammar": 3})"), "grammar must be a string (GBNF)");
  auto g = grammar::completion_constraints(ojson::parse(R"({"grammar": "root ::= [a-c]+"})"));
  auto c = grammar::make_constraint(g, cache(), false, {id("<|im_end|>")});
  feed(*c, "abc");
  EXPECT_TRUE(c->completed());
  EXPECT_THROW(grammar::make_constraint(
                   grammar::completion_constraints(ojson::parse(R"({"grammar": "root ::= x"})")),
                   cache(), false, {}),
               Error);
}

TEST(Constraint, CacheKeepsOnlyUsedGrammarsWithinItsBytes) {
  auto make_a = [] { return grammar::parse_gbnf("root ::= \"a\"", nullptr); };
  const size_t one = grammar::CompiledGrammar(make_a(), qwen3_vocab()).memory() + 2 * 2;
  grammar::GrammarCache c(qwen3_vocab(), 8 * one);  // eight grammars of two-letter keys
  int built = 0;
  auto make = [&] {
    ++built;
    return make_a();
  };
  auto a = c.get("k0", make);
  EXPECT_NE(c.get("k0", make), a);  // not used yet: not kept
  EXPECT_EQ(c.bytes(), 0u);
  c.keep("k0", a);
  EXPECT_EQ(c.get("k0", make), a);
  for (int i = 1; i <= 8; ++i) {
    const std::string key = fmt::format("k{}", i);
    c.keep(key, c.get(key, make));
  }
  EXPECT_EQ(c.bytes(), 8 * one);  // "k0", the least recently used, dropped
  EXPECT_NE(c.get("k0", make), a);
  EXPECT_EQ(built, 11);
}

TEST(Constraint, CacheDoesNotKeepAGrammarOverAnEighthOfItsBytes) {
  grammar::GrammarCache c(qwen3_vocab(), 64 << 10);
  auto big = c.get("big", [] { return grammar::parse_gbnf("root ::= [a-z]{2000}", nullptr); });
  ASSERT_GT(big->memory(), size_t(8) << 10);
  c.keep("big", big);
  EXPECT_EQ(c.bytes(), 0u);
}

TEST(Constraint, TheCacheKeepsAGrammarWhenGenerationFirstUsesIt) {
  grammar::GrammarCache c(qwen3_vocab());
  auto k = constraint_in(c, kSchemaBody);
  EXPECT_EQ(c.bytes(), 0u);  // compiled for a request not (yet) served
  std::vector<uint32_t> words(size_t(qwen3_vocab()->size() + 31) / 32);
  k->allowed(words);
  EXPECT_GT(c.bytes(), 0u);
}

}  // namespace
}  // namespace tern::test
