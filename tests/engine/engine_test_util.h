// Helpers of the engine tests: the tiny dummy with the Qwen3 tokenizer, chat
// prompts rendered and encoded, an engine run collected into one result.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/reference/reference_backend.h"
#include "chat/chat_template.h"
#include "checkpoint/dummy.h"
#include "engine/engine.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace tern::test {

// The tiny dummy checkpoint with the Qwen3 tokenizer.
inline std::string tiny_with_tokenizer(uint64_t seed) {
  DummyOptions o;
  o.preset = "tiny";
  o.seed = seed;
  o.tokenizer_dir = TERN_QWEN3_TOKENIZER;
  return shared_dummy("tiny_tok_" + std::to_string(seed), o);
}

struct TinyModel {
  explicit TinyModel(uint64_t seed)
      : dir(tiny_with_tokenizer(seed)),
        tok(Tokenizer::load(dir)),
        be(load_model(dir, WeightMode::q4)) {}
  std::string dir;
  Tokenizer tok;
  ReferenceBackend be;

  std::vector<int32_t> chat(const nlohmann::ordered_json& messages, bool thinking = false) const {
    nlohmann::ordered_json req = {
        {"messages", messages}, {"add_generation_prompt", true}, {"enable_thinking", thinking}};
    return tok.encode(render_chat(req));
  }
};

// A run's whole output.
struct Output {
  Result result;
  std::string content, reasoning, text;
  std::vector<ToolCall> tool_calls;
  std::vector<TokenLogprob> logprobs;
};

inline Output run_all(Engine& e, const Request& r) {
  Output out;
  out.result = e.run(r, [&](Delta&& d) {
    out.content += d.chat.content;
    out.reasoning += d.chat.reasoning;
    out.text += d.text;
    for (auto& c : d.chat.tool_calls) out.tool_calls.push_back(std::move(c));
    for (auto& l : d.logprobs) out.logprobs.push_back(std::move(l));
  });
  return out;
}

// One to five random words (the conversations of the cache tests).
inline std::string random_words(std::mt19937& g) {
  const char* words[] = {"rivers", "cats", "why?", "again", "more", "tea", "Paris", "no"};
  std::string s;
  for (int i = 0, n = 1 + int(g() % 5); i < n; ++i) s += std::string(words[g() % 8]) + " ";
  return s;
}

// A new conversation: a system prompt and a user message of random words.
inline nlohmann::ordered_json new_conversation(std::mt19937& g) {
  return nlohmann::ordered_json::array({{{"role", "system"}, {"content", "sys " + random_words(g)}},
                                        {{"role", "user"}, {"content", random_words(g)}}});
}

// A request for `prompt` asking for logprobs, greedy or sampled with `seed`.
inline Request request(std::vector<int32_t> prompt, uint64_t seed, bool sampled,
                       int max_tokens = 10) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.logprobs = 0;
  if (sampled) r.sampling = chat_sampling(seed);
  return r;
}

// The ids and logprobs two runs chose (logprobs requested), their text and finish.
inline void expect_same(const Output& a, const Output& b, const std::string& what) {
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << what;
  for (size_t i = 0; i < a.logprobs.size(); ++i) {
    EXPECT_EQ(a.logprobs[i].token, b.logprobs[i].token) << what << " token " << i;
    EXPECT_EQ(a.logprobs[i].logprob, b.logprobs[i].logprob) << what << " token " << i;
  }
  EXPECT_EQ(a.content, b.content) << what;
  EXPECT_EQ(a.reasoning, b.reasoning) << what;
  EXPECT_EQ(a.result.finish, b.result.finish) << what;
}

}  // namespace tern::test
