// The engine's one request type and what it streams back: every API (OpenAI
// chat and completions, Anthropic messages, OpenAI responses) and every
// command (run, chat) translates to and from these.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/constraint.h"
#include "backend/sampler.h"
#include "chat/output_parser.h"
#include "engine/logprobs.h"

namespace tern {

struct Request {
  std::string id;  // for the log
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 256;
  std::vector<std::string> stop;  // stop strings, matched in the content only
  bool ignore_eos = false;
  // chat: reasoning, content and tool calls parsed apart; text: raw text.
  enum class Output { chat, text } output = Output::chat;
  bool in_reasoning = false;     // chat: the prompt opened <think>
  nlohmann::ordered_json tools;  // chat: the request's tools (types the arguments)
  bool tool_calls = true;        // chat: <tool_call> blocks are calls (else text)
  int logprobs = -1;             // -1: none; else the top alternatives wanted (0..20)
  std::shared_ptr<TokenConstraint> constraint;   // optional
  std::shared_ptr<std::atomic<bool>> cancelled;  // set by the client's side to stop it
  // chat: the prompt a next turn of this conversation would start with, given
  // this request's answer: through the next message's <|im_start|> (empty when
  // unknown). Not the engine's: the server prefills it while idle.
  std::function<std::vector<int32_t>(const ParsedDelta& answer)> next_turn;
};

// A request that only prefills `prompt` (no generation): work done ahead of a
// likely request, whose snapshots the session cache keeps.
inline Request prefill_only(std::vector<int32_t> prompt) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = 0;
  r.output = Request::Output::text;
  return r;
}

// Output that became certain, with the log-probabilities of the tokens
// generated since the previous delta.
struct Delta {
  ParsedDelta chat;  // Output::chat
  std::string text;  // Output::text
  std::vector<TokenLogprob> logprobs;
  // Only in the first delta, sent once the prompt is prefilled: the prompt
  // tokens served from the session cache (APIs that report them up front).
  std::optional<int64_t> cached_tokens;
  bool empty() const { return chat.empty() && text.empty() && logprobs.empty() && !cached_tokens; }
};

enum class Finish { stop, length, tool_calls, cancelled };
const char* finish_name(Finish f);  // "stop", "length", "tool_calls", "cancelled"

struct Result {
  Finish finish = Finish::stop;
  bool stop_string = false;   // finish stop: by a stop string (else an end token)
  std::string stop_sequence;  // ... which one
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  int64_t disk_tokens = 0;  // of cached_tokens, those loaded from the disk cache
  // Where the prompt left the session cache: its longest common prefix with
  // a cached conversation (reuse stops at the snapshot at or before it).
  int64_t cache_left_at = 0;
  double prefill_s = 0, ttft_s = 0, decode_s = 0;  // decode: first token to last
  std::vector<float> token_gaps;                   // seconds between successive tokens
  int tool_calls = 0;
  double decode_tok_s() const {
    return completion_tokens > 1 && decode_s > 0 ? double(completion_tokens - 1) / decode_s : 0;
  }
};

}  // namespace tern
