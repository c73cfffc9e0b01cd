// Reasoning / content / tool-call parsing of generated text, fed whole and in
// random chunks: the result must not depend on how the text was split.
#include <gtest/gtest.h>

#include <random>

#include "chat/output_parser.h"

namespace tern {
namespace {

using ojson = nlohmann::ordered_json;

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "celsius": {"type": "boolean"},
    "lat": {"type": "number"}, "tags": {"type": "array"}, "opts": {"type": "object"},
    "note": {"type": ["string", "null"]}}}}},
  {"name": "flat_tool", "parameters": {"properties": {"n": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}}
])");

struct Expected {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments JSON
};

// Feeds `text` in chunks of 1..max_chunk bytes. What has been released must
// always be a prefix of the final result: nothing released is taken back, so
// no piece of a tag ever went out as text.
ParsedDelta parse_in_chunks(std::string_view text, bool in_reasoning, std::mt19937& rng,
                            size_t max_chunk, const ParsedDelta& final_result) {
  OutputParser p(in_reasoning, kTools);
  ParsedDelta all;
  for (size_t i = 0; i < text.size();) {
    size_t n = std::min<size_t>(1 + rng() % max_chunk, text.size() - i);
    all.append(p.push(text.substr(i, n)));
    EXPECT_TRUE(final_result.content.starts_with(all.content)) << all.content;
    EXPECT_TRUE(final_result.reasoning.starts_with(all.reasoning)) << all.reasoning;
    i += n;
  }
  all.append(p.finish());
  return all;
}

void check(const std::string& text, bool in_reasoning, const Expected& want) {
  std::mt19937 rng(uint32_t(text.size()));
  ParsedDelta final_result{want.reasoning, want.content, {}};
  for (int round = 0; round < 60; ++round) {
    ParsedDelta got =
        round == 0 ? parse_output(text, in_reasoning, kTools)
                   : parse_in_chunks(text, in_reasoning, rng, 1 + size_t(round % 9), final_result);
    EXPECT_EQ(got.reasoning, want.reasoning) << text;
    EXPECT_EQ(got.content, want.content) << text;
    ASSERT_EQ(got.tool_calls.size(), want.calls.size()) << text;
    for (size_t i = 0; i < want.calls.size(); ++i) {
      EXPECT_EQ(got.tool_calls[i].name, want.calls[i].first);
      EXPECT_EQ(got.tool_calls[i].arguments_json(), want.calls[i].second);
    }
  }
}

TEST(OutputParser, ReasoningThenContent) {
  check("Let me think.\nStep 2.\n</think>\n\nThe answer is 4.", true,
        {"Let me think.\nStep 2.", "The answer is 4.", {}});
  check("\nabc\n\n</think>\n\nx < y </thin", true, {"abc", "x < y </thin", {}});
  check("still thinking <thi", true, {"still thinking <thi", "", {}});
  check("no reasoning here", false, {"", "no reasoning here", {}});
  check("<think>\nself-opened\n</think>\n\nhi", false, {"self-opened", "hi", {}});
  check("  <thin", false, {"", "  <thin", {}});
  check("", true, {"", "", {}});
}

TEST(OutputParser, QwenToolCallsTypedBySchema) {
  const std::string call =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n<parameter=celsius>\nTrue\n</parameter>\n"
      "<parameter=lat>\n37.5\n</parameter>\n<parameter=tags>\n[\"a\", 1]\n</parameter>\n"
      "<parameter=opts>\n{\"x\": {\"y\": "
      "null}}\n</parameter>\n<parameter=note>\nnull\n</parameter>\n"
      "<parameter=extra>\n  two\nlines \n</parameter>\n</function>\n</tool_call>";
  const std::string args =
      R"({"city":"San Francisco","days":3,"celsius":true,"lat":37.5,"tags":["a",1],"opts":{"x":{"y":null}},)"
      R"("note":null,"extra":"  two\nlines "})";
  check("Need weather.\n</think>\n\nLet me check.\n\n" + call, true,
        {"Need weather.", "Let me check.", {{"get_weather", args}}});
  check(call + "\n" + call, false, {"", "", {{"get_weather", args}, {"get_weather", args}}});
  // Values that do not fit the schema stay strings; the flat tool form and anyOf work.
  check(
      "<tool_call>\n<function=get_weather>\n<parameter=days>\nmany\n</parameter>\n</function>\n</"
      "tool_call>",
      false, {"", "", {{"get_weather", R"({"days":"many"})"}}});
  check(
      "<tool_call>\n<function=flat_tool>\n<parameter=n>\n7\n</parameter>\n</function>\n</"
      "tool_call>",
      false, {"", "", {{"flat_tool", R"({"n":7})"}}});
  // Qwen3's JSON form.
  check("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1]}}\n</tool_call>", false,
        {"", "", {{"f", R"({"a":[1]})"}}});
}

TEST(OutputParser, MalformedToolCallsBecomeContent) {
  check(
      "a "
      "<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\ngarbage</function>\n</tool_call> "
      "b",
      false,
      {"",
       "a "
       "<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\ngarbage</function>\n</"
       "tool_call> b",
       {}});
  check("<tool_call>{not json}</tool_call>", false, {"", "<tool_call>{not json}</tool_call>", {}});
  check("ok <tool_call>\n<function=f>\n<parameter=x>\nunfinished", false,
        {"", "ok <tool_call>\n<function=f>\n<parameter=x>\nunfinished", {}});
  check("<tool_call></tool_call>", false, {"", "<tool_call></tool_call>", {}});
  check("<tool_call>\n<function=>\n</function>\n</tool_call>", false,
        {"", "<tool_call>\n<function=>\n</function>\n</tool_call>", {}});
}

// Qwen3.6 sometimes calls a tool before closing <think>: still a call, and
// the reasoning goes on after it; a mention of the tag in the reasoning that
// is no call stays reasoning.
TEST(OutputParser, ToolCallInsideReasoningIsACall) {
  const std::string call =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n"
      "</tool_call>";
  check("I should look it up.\n" + call + "\ndone</think>\n\nIt is cold.", true,
        {"I should look it up.\ndone", "It is cold.", {{"get_weather", R"({"city":"Oslo"})"}}});
  check("I could use <tool_call> here, but no.</think>\n\nNo.", true,
        {"I could use <tool_call> here, but no.", "No.", {}});
  check("Use <tool_call> tags.", false, {"", "Use <tool_call> tags.", {}});
}

// With tool calls off (tool_choice "none"), a call block is plain content.
TEST(OutputParser, ToolCallsOffKeepsTheText) {
  const std::string text =
      "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
      "</function>\n</tool_call>";
  OutputParser p(false, kTools, false);
  ParsedDelta d = p.push(text);
  d.append(p.finish());
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_EQ(d.content, text);
}

TEST(OutputParser, PromptOpensReasoning) {
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
}

TEST(OutputParser, RandomGarbageNeverCrashes) {
  const char* parts[] = {"<tool_call>",
                         "</tool_call>",
                         "<function=f>",
                         "</function>",
                         "<parameter=p>",
                         "</parameter>",
                         "<think>",
                         "</think>",
                         "\n",
                         " ",
                         "x",
                         "{",
                         "}",
                         "<",
                         ">",
                         "é"};
  std::mt19937 rng(3);
  for (int round = 0; round < 500; ++round) {
    std::string text;
    for (int k = 0; k < 20; ++k) text += parts[rng() % std::size(parts)];
    ParsedDelta whole = parse_output(text, round % 2 == 0, kTools);
    ParsedDelta chunked = parse_in_chunks(text, round % 2 == 0, rng, 5, whole);
    EXPECT_EQ(whole.reasoning, chunked.reasoning);
    EXPECT_EQ(whole.content, chunked.content);
    EXPECT_EQ(whole.tool_calls.size(), chunked.tool_calls.size());
  }
}

}  // namespace
}  // namespace tern
