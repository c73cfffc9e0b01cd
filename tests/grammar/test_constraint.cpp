// GrammarConstraint and request handling: the phases of an answer (reasoning
// left free, tool_choice "auto" triggered by <tool_call>), stop tokens where
// the grammar may end and only them when it is done, completion reporting,
// and the response_format and completion fields with their errors (tool_choice
// is the server's: tests/server), and the grammar cache's bounds.
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

std::unique_ptr<GrammarConstraint> constraint(const ConstraintRequest& r, bool thinking,
                                              grammar::GrammarCache& c = cache()) {
  return grammar::make_constraint(r, c, thinking, {id("<|im_end|>")});
}

ConstraintRequest answer_schema(const std::string& schema) {
  ConstraintRequest r;
  r.answer = ConstraintRequest::Answer::json_schema;
  r.schema = ojson::parse(schema);
  return r;
}

const ConstraintRequest kSchema = answer_schema(
    R"({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
        "additionalProperties": false})");

TEST(Constraint, AnswerGrammarAndStop) {
  auto c = constraint(kSchema, false);
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
  const ConstraintRequest body = answer_schema(R"({"type": "integer"})");
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
  auto c = constraint(kSchema, true);
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

ConstraintRequest tools(ConstraintRequest::Tools mode, const std::string& function = "") {
  ConstraintRequest r;
  r.tools = mode;
  r.tool_list = kTools;
  r.function = function;
  return r;
}

TEST(Constraint, ToolChoiceAuto) {
  ConstraintRequest body = tools(ConstraintRequest::Tools::automatic);
  body.parallel = false;
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
  auto c = constraint(tools(ConstraintRequest::Tools::required), false);
  // "\n", "\n\n" or <tool_call>.
  EXPECT_EQ(mask_ids(mask_of(*c)), (std::vector<int32_t>{id("Ċ"), id("ĊĊ"), id("<tool_call>")}));
  c->accept(id("<tool_call>"));
  feed(*c, "\n<function=f>\n<parameter=x>\n-3\n</parameter>\n</function>\n");
  c->accept(id("</tool_call>"));
  EXPECT_TRUE(c->completed());
  EXPECT_TRUE(allows(*c, id("<|im_end|>")));  // or another call
  EXPECT_THROW(constraint(tools(ConstraintRequest::Tools::named, "g"), false), Error);
}

ConstraintRequest format(const std::string& response_format) {
  ConstraintRequest r;
  grammar::response_format(ojson::parse(response_format), "response_format", r);
  return r;
}

std::string format_error(const std::string& response_format) {
  try {
    format(response_format);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Constraint, RequestFields) {
  const auto r = format(
      R"({"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "integer"}}})");
  EXPECT_EQ(r.answer, ConstraintRequest::Answer::json_schema);
  EXPECT_EQ(r.schema, ojson({{"type", "integer"}}));
  // The Responses API's text.format: name and schema beside type.
  EXPECT_EQ(format(R"({"type": "json_schema", "name": "n", "schema": {"type": "string"}})").schema,
            ojson({{"type", "string"}}));
  EXPECT_EQ(format(R"({"type": "json_object"})").answer, ConstraintRequest::Answer::json_object);
  EXPECT_TRUE(format(R"({"type": "text"})").empty());
  EXPECT_EQ(format_error(R"({"type": "yaml"})"),
            "response_format type 'yaml' is not supported (text, json_object, json_schema)");
  EXPECT_EQ(format_error(R"({"type": "json_schema", "json_schema": {"name": "x"}})"),
            "response_format.json_schema.schema must be a JSON Schema (an object)");
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
  auto k = constraint(kSchema, false, c);
  EXPECT_EQ(c.bytes(), 0u);  // compiled for a request not (yet) served
  std::vector<uint32_t> words(size_t(qwen3_vocab()->size() + 31) / 32);
  k->allowed(words);
  EXPECT_GT(c.bytes(), 0u);
}

}  // namespace
}  // namespace tern::test
