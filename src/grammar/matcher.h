// The state of one constrained generation: which stacks of the grammar's
// pushdown automaton the tokens so far leave, the mask of tokens allowed
// next, and rollback of accepted tokens. Not thread-safe (one per request);
// the CompiledGrammar it reads may be shared.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/walker.h"

namespace tern::grammar {

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Consumes a token; false (and no change) when the grammar does not allow it.
  bool accept(int32_t token);
  // Consumes bytes as one step (tests and validation); false (no change) when refused.
  bool accept_bytes(std::string_view bytes);
  // Undoes the last n steps.
  void rollback(size_t n);
  size_t steps() const { return walker_.top_level(); }

  // The text so far is a complete sentence of the grammar.
  bool can_end() const { return walker_.flags() & kEnded; }
  // ... and nothing may follow it.
  bool done() const { return can_end() && walker_.top().empty(); }

  // Sets exactly the bits of the tokens allowed next (bit i % 32 of words[i / 32]);
  // words must cover the vocabulary. Stop tokens are the caller's to add.
  void fill_mask(std::span<uint32_t> words);

  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  // Adds to `out` the ids of the candidates (trie nodes of a vocabulary part)
  // the current stacks accept.
  void check(int part, const std::vector<int32_t>& candidates, std::span<const uint32_t> words,
             std::vector<int32_t>& out);

  std::shared_ptr<const CompiledGrammar> grammar_;
  Walker walker_;
  // The accepted candidates' ids by state (the stacks, as bytes): a long string keeps one state.
  std::unordered_map<std::string, std::vector<int32_t>> checked_;
};

}  // namespace tern::grammar
