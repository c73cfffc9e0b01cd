#include "tokenizer/detokenizer.h"

#include "tokenizer/utf8.h"

namespace tern {

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_ && tok_->is_special(id)) return {};
  pending_ += tok_->token_bytes(id);
  std::string out;
  pending_.erase(0, utf8::append_lossy(out, pending_, false));
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  utf8::append_lossy(out, pending_, true);
  pending_.clear();
  return out;
}

}  // namespace tern
