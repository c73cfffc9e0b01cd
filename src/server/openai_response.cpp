#include "server/openai_response.h"

#include <chrono>
#include <mutex>
#include <random>

namespace tern::server {

std::string random_id(const std::string& prefix, int hex_digits) {
  static std::mt19937_64 g{std::random_device{}()};
  static std::mutex m;
  std::lock_guard lock(m);
  std::string s = prefix;
  for (int i = 0; i < hex_digits; ++i) s += "0123456789abcdef"[g() % 16];
  return s;
}

ojson usage_json(const Result& r) {
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens},
          {"total_tokens", r.prompt_tokens + r.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
}

const char* openai_finish(const Result& r) {
  return r.finish == Finish::length       ? "length"
         : r.finish == Finish::tool_calls ? "tool_calls"
                                          : "stop";
}

OpenAiOutput::OpenAiOutput(const Tokenizer& tok, std::string model, bool chat)
    : tok_(tok),
      model_(std::move(model)),
      id_(random_id(chat ? "chatcmpl-" : "cmpl-")),
      chat_(chat),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count()) {}

namespace {

ojson bytes_of(std::string_view b) {
  ojson out = ojson::array();
  for (unsigned char c : b) out.push_back(int(c));
  return out;
}

ojson call_json(const ToolCall& c, int index, bool stream) {
  ojson j = ojson::object();
  if (stream) j["index"] = index;
  j["id"] = random_id("call_");
  j["type"] = "function";
  j["function"] = {{"name", c.name}, {"arguments", stream ? std::string() : c.arguments_json()}};
  return j;
}

}  // namespace

// Chat: {"content": [{token, logprob, bytes, top_logprobs}]}; completions: the
// legacy {tokens, token_logprobs, top_logprobs, text_offset}.
ojson OpenAiOutput::logprobs_json(const std::vector<TokenLogprob>& lps) {
  if (chat_) {
    ojson content = ojson::array();
    for (const TokenLogprob& lp : lps) {
      ojson top = ojson::array();
      for (const auto& [id, l] : lp.top)
        top.push_back({{"token", tok_.decode(std::span(&id, 1))},
                       {"logprob", l},
                       {"bytes", bytes_of(tok_.token_bytes(id))}});
      content.push_back({{"token", tok_.decode(std::span(&lp.token, 1))},
                         {"logprob", lp.logprob},
                         {"bytes", bytes_of(tok_.token_bytes(lp.token))},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  ojson tokens = ojson::array(), logprobs = ojson::array(), tops = ojson::array(),
        offsets = ojson::array();
  for (const TokenLogprob& lp : lps) {
    const std::string t = tok_.decode(std::span(&lp.token, 1));
    tokens.push_back(t);
    logprobs.push_back(lp.logprob);
    ojson top = ojson::object();
    for (const auto& [id, l] : lp.top) top[tok_.decode(std::span(&id, 1))] = l;
    tops.push_back(top);
    offsets.push_back(text_offset_);
    text_offset_ += t.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", logprobs},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

ojson OpenAiOutput::chunk(ojson delta_or_text, const ojson& logprobs) const {
  ojson choice = {{"index", 0}};
  if (chat_)
    choice["delta"] = std::move(delta_or_text);
  else
    choice["text"] = std::move(delta_or_text);
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = nullptr;
  return {{"id", id_},
          {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", model_},
          {"choices", ojson::array({choice})}};
}

ojson OpenAiOutput::first_chunk() const {
  return chunk({{"role", "assistant"}, {"content", ""}}, nullptr);
}

std::vector<ojson> OpenAiOutput::chunks(const Delta& d) {
  std::vector<ojson> out;
  const ojson lp = d.logprobs.empty() ? ojson(nullptr) : logprobs_json(d.logprobs);
  if (!chat_) {
    if (!d.text.empty() || !lp.is_null()) out.push_back(chunk(d.text, lp));
    return out;
  }
  ojson delta = ojson::object();
  if (!d.chat.reasoning.empty()) delta["reasoning_content"] = d.chat.reasoning;
  if (!d.chat.content.empty()) delta["content"] = d.chat.content;
  if (!delta.empty() || !lp.is_null()) out.push_back(chunk(delta, lp));
  for (const ToolCall& c : d.chat.tool_calls) {  // the call's name, then its arguments
    out.push_back(chunk({{"tool_calls", ojson::array({call_json(c, calls_, true)})}}, nullptr));
    out.push_back(chunk(
        {{"tool_calls",
          ojson::array({{{"index", calls_}, {"function", {{"arguments", c.arguments_json()}}}}})}},
        nullptr));
    ++calls_;
  }
  return out;
}

ojson OpenAiOutput::final_chunk(const Result& r) const {
  ojson c = chunk(chat_ ? ojson::object() : ojson(""), nullptr);
  c["choices"][0]["finish_reason"] = openai_finish(r);
  return c;
}

ojson OpenAiOutput::usage_chunk(const Result& r) const {
  return {{"id", id_},
          {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", model_},
          {"choices", ojson::array()},
          {"usage", usage_json(r)}};
}

void OpenAiOutput::add(const Delta& d) {
  content_ += d.chat.content;
  reasoning_ += d.chat.reasoning;
  text_ += d.text;
  for (const ToolCall& c : d.chat.tool_calls) tool_calls_.push_back(call_json(c, 0, false));
  if (!d.logprobs.empty()) {
    const ojson lp = logprobs_json(d.logprobs);
    if (chat_) {
      for (const ojson& x : lp["content"]) logprobs_.push_back(x);
    } else {
      if (logprobs_.empty())
        logprobs_ = {{"tokens", ojson::array()},
                     {"token_logprobs", ojson::array()},
                     {"top_logprobs", ojson::array()},
                     {"text_offset", ojson::array()}};
      for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
        for (const ojson& x : lp[k]) logprobs_[k].push_back(x);
    }
  }
}

ojson OpenAiOutput::response(const Result& r, const std::string& echo) const {
  ojson choice = {{"index", 0}};
  const bool any_lp = !logprobs_.empty();
  if (chat_) {
    ojson msg = {
        {"role", "assistant"},
        {"content", content_.empty() && !tool_calls_.empty() ? ojson(nullptr) : ojson(content_)}};
    if (!reasoning_.empty()) msg["reasoning_content"] = reasoning_;
    if (!tool_calls_.empty()) msg["tool_calls"] = tool_calls_;
    choice["message"] = msg;
    choice["logprobs"] = any_lp ? ojson{{"content", logprobs_}} : ojson(nullptr);
  } else {
    choice["text"] = echo + text_;
    choice["logprobs"] = any_lp ? logprobs_ : ojson(nullptr);
  }
  choice["finish_reason"] = openai_finish(r);
  return {{"id", id_},
          {"object", chat_ ? "chat.completion" : "text_completion"},
          {"created", created_},
          {"model", model_},
          {"choices", ojson::array({choice})},
          {"usage", usage_json(r)}};
}

}  // namespace tern::server
