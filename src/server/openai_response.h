// OpenAI response bodies from the engine's output: a whole chat.completion /
// text_completion, or the stream's chunks (the role first, content,
// reasoning_content and tool-call deltas, a final chunk with finish_reason,
// the usage chunk when asked for).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "engine/request.h"
#include "tokenizer/tokenizer.h"

namespace tern::server {

using ojson = nlohmann::ordered_json;

// "chatcmpl-…", "cmpl-…", "call_…": a prefix and random hex.
std::string random_id(const std::string& prefix, int hex_digits = 24);

ojson usage_json(const Result& r);
const char* openai_finish(const Result& r);  // "stop", "length" or "tool_calls"

class OpenAiOutput {
 public:
  // chat: chat.completion(.chunk); else text_completion.
  OpenAiOutput(const Tokenizer& tok, std::string model, bool chat);

  // Streaming.
  ojson first_chunk() const;  // the role (chat)
  std::vector<ojson> chunks(const Delta& d);
  ojson final_chunk(const Result& r) const;
  ojson usage_chunk(const Result& r) const;

  // Whole response: add every delta, then response().
  void add(const Delta& d);
  ojson response(const Result& r, const std::string& echo) const;

  const std::string& id() const { return id_; }

 private:
  ojson chunk(ojson delta_or_text, const ojson& logprobs) const;
  ojson logprobs_json(const std::vector<TokenLogprob>& lps);

  const Tokenizer& tok_;
  std::string model_, id_;
  bool chat_;
  int64_t created_;
  int calls_ = 0;  // tool calls streamed so far (their index)
  // Accumulated for the whole response.
  std::string content_, reasoning_, text_;
  ojson tool_calls_ = ojson::array();
  ojson logprobs_ = ojson::array();
  size_t text_offset_ = 0;
};

}  // namespace tern::server
