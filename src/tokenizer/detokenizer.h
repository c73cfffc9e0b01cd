// Incremental detokenizer for streaming: emits only whole UTF-8 characters,
// and the pieces concatenate to exactly Tokenizer::decode of all the ids.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace tern {

class StreamDecoder {
 public:
  // `tok` must outlive the decoder.
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = false)
      : tok_(&tok), skip_special_(skip_special) {}

  // Text completed by this id (possibly empty while a character is incomplete).
  std::string push(int32_t id);
  // The rest: a character left incomplete at the end becomes U+FFFD.
  std::string finish();

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete character
};

}  // namespace tern
