// GBNF parsing: the syntax llama.cpp users bring (comments, multi-line rules,
// escapes, classes, repetitions, tokens) and the errors, each naming the
// problem and where it is.
#include <gtest/gtest.h>

#include "core/error.h"
#include "grammar_test_util.h"

namespace tern::test {
namespace {

bool matches(const std::string& gbnf, const std::string& text) {
  return test::matches(compile_gbnf(gbnf), text);
}

std::string error_of(const std::string& gbnf) {
  return test::error_of([&] { compile_gbnf(gbnf); });
}

TEST(Gbnf, Syntax) {
  const std::string g = R"(# a comment
root ::= greeting ws name "!"? # trailing comment
greeting ::= "hi" |
  "hello"
name ::= (
    [A-Z] [a-z]{1,5}
  | "\x41\u00e9\U0001F600"
)
ws ::= [ \t]+)";
  EXPECT_TRUE(matches(g, "hi Bob"));
  EXPECT_TRUE(matches(g, "hello \tAlice!"));
  EXPECT_TRUE(matches(g, "hi Aé😀"));
  EXPECT_FALSE(matches(g, "hi bob"));
  EXPECT_FALSE(matches(g, "hi Bobbbbb"));
  EXPECT_FALSE(matches(g, "hey Bob"));
}

TEST(Gbnf, Repetitions) {
  const std::string g = R"(root ::= "a"{2} "b"{1,} "c"{0,2} "d"{3,4} [xy]*)";
  EXPECT_TRUE(matches(g, "aabddd"));
  EXPECT_TRUE(matches(g, "aabbbccddddxyx"));
  EXPECT_FALSE(matches(g, "abddd"));
  EXPECT_FALSE(matches(g, "aabcccddd"));
  EXPECT_FALSE(matches(g, "aabdd"));
  EXPECT_TRUE(matches(R"(root ::= ("ab" | "c")+ [^\]\\]?)", "abcab]") == false);
  EXPECT_TRUE(matches(R"(root ::= ("ab" | "c")+ [^\]\\]?)", "abcabz"));
  EXPECT_TRUE(matches(R"(root ::= "" | "x")", ""));
}

TEST(Gbnf, RightRecursionRunsDeep) {
  // Right recursion keeps no frames: a long input does not grow the stacks.
  grammar::Matcher m(compile_gbnf(R"(root ::= "a" root | "b")"));
  for (int i = 0; i < 20000; ++i) ASSERT_TRUE(m.accept_bytes("a"));
  EXPECT_TRUE(m.accept_bytes("b"));
  EXPECT_TRUE(m.done());
  // Nesting keeps one frame per level.
  grammar::Matcher n(compile_gbnf(R"G(root ::= "(" root ")" | "x")G"));
  for (int i = 0; i < 20000; ++i) ASSERT_TRUE(n.accept_bytes("("));
  EXPECT_TRUE(n.accept_bytes("x"));
  for (int i = 0; i < 20000; ++i) ASSERT_TRUE(n.accept_bytes(")"));
  EXPECT_TRUE(n.done());
}

TEST(Gbnf, Errors) {
  EXPECT_EQ(error_of("root ::= a\nb ::= \"x\""), "GBNF line 1 column 10: undefined rule 'a'");
  EXPECT_EQ(error_of("start ::= \"x\""), "GBNF: the grammar has no rule named 'root'");
  EXPECT_EQ(error_of("root ::= \"abc"), "GBNF line 1 column 14: unterminated string literal");
  EXPECT_EQ(error_of("root ::= \"\\q\""), "GBNF line 1 column 11: unknown escape '\\q'");
  EXPECT_EQ(error_of("root ::= [a-"), "GBNF line 1 column 10: unterminated character class");
  EXPECT_EQ(error_of("root ::= [z-a]"), "GBNF line 1 column 10: character range is reversed");
  EXPECT_EQ(error_of("root ::= (\"a\""),
            "GBNF line 1 column 14: expected ')' closing the '(' at line 1 column 10");
  EXPECT_EQ(error_of("root ::= * \"a\""), "GBNF line 1 column 10: '*' without an item before it");
  EXPECT_EQ(error_of("root = \"a\""),
            "GBNF line 1 column 6: expected '::=' after rule name 'root'");
  EXPECT_EQ(error_of("root ::= \"a\"\nroot ::= \"b\""),
            "GBNF line 2 column 1: rule 'root' is defined twice");
  EXPECT_EQ(error_of("root ::= \"a\"{3,1}"),
            "GBNF line 1 column 13: repetition {3,1} has max < min");
  EXPECT_EQ(error_of("root ::= \"a\"{1000000}"),
            "GBNF line 1 column 14: repetition count above 100000");
  EXPECT_EQ(error_of("root ::= !<[151657]>"),
            "GBNF line 1 column 10: negated tokens (!<...>) are not supported");
  EXPECT_EQ(error_of("root ::= <nope>"),
            "GBNF line 1 column 10: '<nope>' is not an added token of the vocabulary");
  EXPECT_EQ(error_of("root ::= <[27]>"),
            "GBNF line 1 column 10: token <[27]> is not an added token of the vocabulary");
  EXPECT_EQ(error_of("root ::= \"\\uD800\""),
            "GBNF line 1 column 11: escape \\uD800 is not a Unicode scalar value");
  EXPECT_EQ(
      error_of(std::string("root ::= ") + std::string(300, '(') + "\"a\"" + std::string(300, ')')),
      "GBNF line 1 column 210: groups nest deeper than 200");
}

TEST(Gbnf, GrammarErrors) {
  EXPECT_EQ(error_of("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\""),
            "left recursion: rule 'expr' can reach itself without consuming input (expr -> expr)");
  EXPECT_EQ(error_of("root ::= a\na ::= b? c\nb ::= \"x\"\nc ::= a | \"y\""),
            "left recursion: rule 'a' can reach itself without consuming input (a -> c -> a)");
  EXPECT_EQ(error_of("root ::= \"[\" root \"]\""),
            "no finite text matches the grammar: rule 'root' can never finish (an impossible "
            "constraint, or a recursion without a base case)");
  // A repetition whose expansion is too large is refused, not built.
  EXPECT_NE(error_of("root ::= ((\"a\" [b-z]{1,100}){1,100}){1,100}").find("too large"),
            std::string::npos);
  // Rules that cannot finish but are not needed are dropped.
  EXPECT_TRUE(matches("root ::= \"a\" | x\nx ::= \"(\" x \")\"", "a"));
}

}  // namespace
}  // namespace tern::test
