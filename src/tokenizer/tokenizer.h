// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json, with
// the components Qwen models use (see docs/tokenizer.md). Anything else the
// file declares is refused at load time with an Error naming it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tern {

class Tokenizer {
 public:
  // Reads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json
  // (and DIR/chat_template.jinja) for the chat template source and eos token.
  static Tokenizer load(const std::string& dir);
  // Builds from parsed tokenizer.json and tokenizer_config.json contents.
  static Tokenizer from_json(const nlohmann::json& tokenizer,
                             const nlohmann::json& config = nlohmann::json::object());

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Ids of `text` (valid UTF-8, else Error). Added tokens written in the text,
  // special or not, become their ids; no BOS/EOS is added. Thread-safe.
  std::vector<int32_t> encode(std::string_view text) const;
  // From now on, encode() keeps the ids of long segments (SegmentCache)
  // within budget_bytes, for text that comes back (a conversation's history).
  void cache_segments(size_t budget_bytes);
  size_t segment_cache_bytes() const;  // 0 without a cache

  // Text of `ids`; invalid UTF-8 becomes U+FFFD and unknown ids are skipped,
  // as in Hugging Face's decode.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Number of ids, added tokens included (one past the largest id).
  int vocab_size() const;
  // Id of a token given as written in tokenizer.json ("<|im_end|>", "Ġthe").
  std::optional<int32_t> token_id(std::string_view token) const;
  bool is_special(int32_t id) const;
  // An added token (tokenizer.json's added_tokens, special or not: <tool_call>,
  // <think>, <|im_end|>): encode() makes it from its text as one id.
  bool is_added(int32_t id) const;
  // The bytes a token stands for; empty for an unknown id.
  std::string_view token_bytes(int32_t id) const;

  // tokenizer_config.json's chat_template ("" if none). tern renders the
  // Qwen3.5 format natively whatever this says (see chat_template.h).
  const std::string& chat_template_source() const;
  // tokenizer_config.json's eos_token ("" if none).
  const std::string& eos_token() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The chat template source of a checkpoint folder: tokenizer_config.json's
// chat_template, else chat_template.jinja, else "".
std::string read_chat_template_source(const std::string& dir);

}  // namespace tern
