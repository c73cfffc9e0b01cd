// The grammar's view of a tern::Tokenizer: every id's bytes, added tokens
// apart. Header-only so that tern_grammar itself needs no tokenizer; the
// callers (CLI, server, tests) link tern_tokenizer anyway.
#pragma once

#include <algorithm>
#include <memory>

#include "grammar/vocab.h"
#include "tokenizer/tokenizer.h"

namespace tern::grammar {

// `ids`: the model's vocabulary size (ids past the tokenizer's are never allowed).
inline std::shared_ptr<const Vocab> vocab_of(const Tokenizer& tok, int ids) {
  const int n = std::max(ids, tok.vocab_size());
  std::vector<std::string> text(static_cast<size_t>(n));
  std::vector<uint8_t> added(static_cast<size_t>(n), 0);
  for (int id = 0; id < tok.vocab_size(); ++id) {
    text[size_t(id)] = std::string(tok.token_bytes(id));
    added[size_t(id)] = tok.is_added(id) ? 1 : 0;
  }
  return std::make_shared<const Vocab>(std::move(text), std::move(added));
}

}  // namespace tern::grammar
