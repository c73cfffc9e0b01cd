// Helpers shared by the grammar tests: the Qwen3 vocabulary, compiling, and
// the brute-force mask (every token tried on the matcher) that the fast mask
// must equal.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/compiled_grammar.h"
#include "grammar/gbnf.h"
#include "grammar/matcher.h"
#include "grammar/tokenizer_vocab.h"
#include "tokenizer/tokenizer.h"

namespace tern::test {

inline const Tokenizer& qwen3_tokenizer() {
  static const Tokenizer tok = Tokenizer::load(TERN_QWEN3_TOKENIZER);
  return tok;
}

inline std::shared_ptr<const grammar::Vocab> qwen3_vocab() {
  static const auto vocab = grammar::vocab_of(qwen3_tokenizer(), qwen3_tokenizer().vocab_size());
  return vocab;
}

inline std::shared_ptr<const grammar::CompiledGrammar> compile_gbnf(
    const std::string& text, std::shared_ptr<const grammar::Vocab> vocab = qwen3_vocab()) {
  return std::make_shared<const grammar::CompiledGrammar>(grammar::parse_gbnf(text, vocab.get()),
                                                          vocab);
}

// Whether the grammar's matcher takes text as a whole sentence.
inline bool matches(const std::shared_ptr<const grammar::CompiledGrammar>& g,
                    const std::string& text) {
  grammar::Matcher m(g);
  return (text.empty() || m.accept_bytes(text)) && m.can_end();
}

// The message of the tern::Error that f throws ("" when none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline std::vector<uint32_t> fast_mask(grammar::Matcher& m) {
  std::vector<uint32_t> words((size_t(m.grammar().vocab().size()) + 31) / 32);
  m.fill_mask(words);
  return words;
}

// Every token tried with accept() and rolled back.
inline std::vector<uint32_t> brute_mask(grammar::Matcher& m) {
  const int n = m.grammar().vocab().size();
  std::vector<uint32_t> words((size_t(n) + 31) / 32, 0);
  for (int32_t id = 0; id < n; ++id)
    if (m.accept(id)) {
      words[size_t(id) / 32] |= 1u << (id % 32);
      m.rollback(1);
    }
  return words;
}

inline std::vector<int32_t> mask_ids(const std::vector<uint32_t>& words) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < words.size() * 32; ++i)
    if (words[i / 32] >> (i % 32) & 1) ids.push_back(int32_t(i));
  return ids;
}

}  // namespace tern::test
