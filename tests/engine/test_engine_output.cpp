// What the engine streams: end tokens and max_tokens, stop strings (never in
// the output, also split across tokens; not matched in reasoning), logprobs,
// cancellation, and with the scripted backend what depends on what the
// model says: reasoning, content and tool calls parsed apart.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/scripted_backend.h"
#include "engine_test_util.h"

namespace tern::test {
namespace {

using json = nlohmann::ordered_json;

struct Scripted {
  explicit Scripted(std::vector<ScriptEntry> script)
      : m(51), be(m.be.config(), m.tok, std::move(script)), engine(be, &m.tok, EngineOptions{}) {}
  TinyModel m;
  ScriptedBackend be;
  Engine engine;
  Output ask(const std::string& user, bool thinking, std::vector<std::string> stop = {},
             const json& tools = nullptr) {
    json req = {{"messages", json::array({{{"role", "user"}, {"content", user}}})},
                {"add_generation_prompt", true},
                {"enable_thinking", thinking}};
    if (!tools.is_null()) req["tools"] = tools;
    const std::string prompt = render_chat(req);
    Request r;
    r.prompt = m.tok.encode(prompt);
    r.max_tokens = 200;
    r.stop = std::move(stop);
    r.in_reasoning = prompt_opens_reasoning(prompt);
    r.tools = tools;
    return run_all(engine, r);
  }
};

TEST(EngineOutput, ReasoningContentAndEndToken) {
  Scripted s(std::vector<ScriptEntry>{{"capital", "The capital is Paris.</think>\n\nParis."}});
  const Output r = s.ask("What is the capital of France?", true);
  EXPECT_EQ(r.reasoning, "The capital is Paris.");
  EXPECT_EQ(r.content, "Paris.");
  EXPECT_EQ(r.result.finish, Finish::stop);
  EXPECT_FALSE(r.result.stop_string);
}

TEST(EngineOutput, StopStringsSplitAcrossTokensNeverShowAndSkipReasoning) {
  Scripted s(std::vector<ScriptEntry>{{"count", "one END two</think>\n\nalpha beta ENDgamma"}});
  const Output r = s.ask("count", true, {"END"});
  EXPECT_EQ(r.reasoning, "one END two");  // not matched inside reasoning
  EXPECT_EQ(r.content, "alpha beta ");
  EXPECT_TRUE(r.result.stop_string);
  EXPECT_EQ(r.result.finish, Finish::stop);
  // A stop string no token boundary falls inside is still caught.
  const Output q = s.ask("count", true, {"a be"});
  EXPECT_EQ(q.content, "alph");
}

TEST(EngineOutput, ToolCallsAreParsedAndFinishAsToolCalls) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"},
      "days": {"type": "integer"}}, "required": ["city"]}}}])");
  Scripted s(std::vector<ScriptEntry>{
      {"weather",
       "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n"
       "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"}});
  const Output r = s.ask("weather in Oslo?", false, {}, tools);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.tool_calls[0].arguments, json::parse(R"({"city": "Oslo", "days": 3})"));
  EXPECT_EQ(r.content, "Let me check.");
  EXPECT_EQ(r.result.finish, Finish::tool_calls);
}

TEST(EngineOutput, ATagOnlyMentionedInProseIsText) {
  Scripted s(std::vector<ScriptEntry>{{"tags", "Use the <tool_call> tag to call tools."}});
  const Output r = s.ask("tags?", false);
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.result.finish, Finish::stop);
}

TEST(EngineOutput, MaxTokensEndsWithLength) {
  Scripted s(std::vector<ScriptEntry>{{"", "a b c d e f g h i j k l m n o p"}});
  Request r;
  r.prompt = s.m.tok.encode("<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
  r.max_tokens = 3;
  const Output out = run_all(s.engine, r);
  EXPECT_EQ(out.result.finish, Finish::length);
  EXPECT_EQ(out.result.completion_tokens, 3);
}

TEST(EngineOutput, LogprobsAreTheLogSoftmaxOfTheRawLogits) {
  TinyModel m(52);
  Engine e(m.be, &m.tok, EngineOptions{});
  Request r;
  r.prompt = m.tok.encode("Hello there");
  r.max_tokens = 5;
  r.logprobs = 3;
  r.ignore_eos = true;
  const Output out = run_all(e, r);
  ASSERT_EQ(out.logprobs.size(), 5u);
  // Against a direct computation for the first token.
  auto seq = m.be.new_sequence();
  std::vector<float> l;
  m.be.forward(*seq, r.prompt, Logits::last, l);
  double sum = 0;
  const float mx = *std::max_element(l.begin(), l.end());
  for (float x : l) sum += std::exp(double(x) - mx);
  const TokenLogprob& first = out.logprobs[0];
  EXPECT_EQ(first.token, argmax(l));  // greedy
  EXPECT_NEAR(first.logprob, double(l[size_t(first.token)]) - mx - std::log(sum), 1e-5);
  ASSERT_EQ(first.top.size(), 3u);
  EXPECT_EQ(first.top[0].first, first.token);
  EXPECT_GE(first.top[0].second, first.top[1].second);
}

TEST(EngineOutput, CancellationStopsWithinAStep) {
  TinyModel m(53);
  Engine e(m.be, &m.tok, EngineOptions{});
  Request r;
  r.prompt = m.tok.encode("Hello there");
  r.max_tokens = 100;
  r.ignore_eos = true;
  r.logprobs = 0;
  r.cancelled = std::make_shared<std::atomic<bool>>(false);
  int tokens = 0;
  const Result res = e.run(r, [&](Delta&& d) {
    tokens += int(d.logprobs.size());
    if (tokens >= 3) r.cancelled->store(true);
  });
  EXPECT_EQ(res.finish, Finish::cancelled);
  EXPECT_LE(res.completion_tokens, 4);
  // Cancelled before it starts: nothing is generated.
  r.cancelled->store(true);
  EXPECT_EQ(run_all(e, r).result.completion_tokens, 0);
}

TEST(EngineOutput, BadPromptsAreErrors) {
  TinyModel m(54);
  EngineOptions o;
  o.ctx_size = 16;
  Engine e(m.be, &m.tok, o);
  Request r;
  EXPECT_THROW(run_all(e, r), Error);  // empty
  r.prompt = std::vector<int32_t>(16, 5);
  EXPECT_THROW(run_all(e, r), Error);  // as long as the context
  r.prompt = {1, 2, -3};
  EXPECT_THROW(run_all(e, r), Error);
}

}  // namespace
}  // namespace tern::test
