// The matcher: strings accepted and refused, rollback, completion, and the
// fast mask (precomputed classifications + checks against the stack) equal
// to trying every token, along random walks through several grammars.
#include <gtest/gtest.h>

#include "core/rng.h"
#include "grammar/json_schema.h"
#include "grammar_test_util.h"

namespace tern::test {
namespace {

using grammar::Matcher;

bool accepts(const std::string& gbnf, const std::string& text) {
  return matches(compile_gbnf(gbnf), text);
}

TEST(Matcher, AcceptsAndRefuses) {
  const std::string g = R"(root ::= "a" b* "c"
b ::= [x-z] | "q" b)";
  EXPECT_TRUE(accepts(g, "ac"));
  EXPECT_TRUE(accepts(g, "axyzc"));
  EXPECT_TRUE(accepts(g, "aqqxc"));
  EXPECT_FALSE(accepts(g, "aqc"));
  EXPECT_FALSE(accepts(g, "abc"));
  EXPECT_FALSE(accepts(g, "a"));
  Matcher m(compile_gbnf(g));
  EXPECT_TRUE(m.accept_bytes("axy"));
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.accept_bytes("w"));
  EXPECT_TRUE(m.accept_bytes("c"));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.done());
}

TEST(Matcher, Utf8Classes) {
  const std::string g = R"(root ::= [^a]{2} "." [α-ω]+)";
  EXPECT_TRUE(accepts(g, "é€.αβ"));
  EXPECT_TRUE(accepts(g, "😀b.ω"));
  EXPECT_FALSE(accepts(g, "ab.α"));
  EXPECT_FALSE(accepts(g, "xy.a"));
  EXPECT_FALSE(accepts(g, "x\xff.α"));          // not UTF-8
  EXPECT_FALSE(accepts(g, "\xed\xa0\x80x.α"));  // a surrogate
}

TEST(Matcher, RollbackRestoresState) {
  Matcher m(compile_gbnf(R"(root ::= ("[" root "]")* "x")"));
  ASSERT_TRUE(m.accept_bytes("[["));
  ASSERT_TRUE(m.accept_bytes("x"));
  EXPECT_FALSE(m.can_end());
  ASSERT_TRUE(m.accept_bytes("]"));
  m.rollback(2);
  EXPECT_EQ(m.steps(), 1u);
  EXPECT_FALSE(m.accept_bytes("]"));
  ASSERT_TRUE(m.accept_bytes("x]x]x"));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.done());
}

TEST(Matcher, AddedTokensOnlyWhole) {
  const auto vocab = qwen3_vocab();
  const int32_t open = *vocab->added_token("<tool_call>");
  Matcher m(compile_gbnf(R"(root ::= <tool_call> "a" <[151658]>)"));
  EXPECT_FALSE(m.accept_bytes("<tool_call>"));  // the text is not the token
  const auto mask = mask_ids(fast_mask(m));
  ASSERT_EQ(mask, std::vector<int32_t>{open});
  ASSERT_TRUE(m.accept(open));
  ASSERT_TRUE(m.accept_bytes("a"));
  EXPECT_TRUE(m.accept(151658));
  EXPECT_TRUE(m.done());
}

// A random walk: at each step the fast mask equals the brute-force one, and a
// random allowed token is taken.
void random_walk(std::shared_ptr<const grammar::CompiledGrammar> g, uint64_t seed, int steps) {
  Matcher m(std::move(g));
  CounterRng rng(seed);
  for (int s = 0; s < steps; ++s) {
    const auto fast = fast_mask(m);
    ASSERT_EQ(mask_ids(fast), mask_ids(brute_mask(m))) << "step " << s << " seed " << seed;
    const auto ids = mask_ids(fast);
    if (ids.empty()) {
      EXPECT_TRUE(m.done());
      return;
    }
    ASSERT_TRUE(m.accept(ids[size_t(rng.next_u64() % ids.size())]));
  }
}

const char* kJson = R"(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
)";

TEST(Matcher, MaskEqualsBruteForceJson) {
  for (uint64_t seed = 1; seed <= 3; ++seed) random_walk(compile_gbnf(kJson), seed, 25);
}

TEST(Matcher, MaskEqualsBruteForceMisc) {
  random_walk(compile_gbnf(R"(root ::= (line "\n"){1,4}
line ::= [a-z ]{0,12} ("!" | "?")?)"),
              7, 20);
  random_walk(compile_gbnf(R"G(root ::= expr
expr ::= term (("+" | "-") term)*
term ::= [0-9]+ | "(" expr ")")G"),
              8, 30);
  random_walk(compile_gbnf(R"(root ::= "say " ("hi" | "hello" | "hey") (" " [^\n]{1,3})* "\n")"), 9,
              20);
}

// JSON Schema grammars: strings are rules without calls (the plain walk and
// masks shared between grammars), bounded lengths, numbers, nested objects.
TEST(Matcher, MaskEqualsBruteForceJsonSchema) {
  static const auto schema = grammar::ojson::parse(R"({"type": "object", "properties": {
      "s": {"type": "string", "maxLength": 5}, "t": {"type": "string"},
      "n": {"type": "number", "minimum": -2.5, "maximum": 40},
      "o": {"type": "object", "properties": {"k": {"enum": ["x", 1, null]}}}},
      "required": ["s", "t", "n"], "additionalProperties": {"type": "integer"}})");
  auto g = std::make_shared<const grammar::CompiledGrammar>(grammar::json_schema_grammar(schema),
                                                            qwen3_vocab());
  for (uint64_t seed = 1; seed <= 4; ++seed) random_walk(g, seed, 30);
}

}  // namespace
}  // namespace tern::test
