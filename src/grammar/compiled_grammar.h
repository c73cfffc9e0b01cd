// A grammar compiled for one vocabulary: its automata (pda.h) and, computed
// on first use and kept for every later request, each node's token
// classification (token_masks.h). Thread-safe to share; the grammar cache
// (grammar_cache.h) keeps them by request.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/pda.h"
#include "grammar/token_masks.h"
#include "grammar/vocab.h"

namespace tern::grammar {

class CompiledGrammar {
 public:
  // Per vocabulary part (Vocab::trie).
  struct NodeInfo {
    std::shared_ptr<const NodeMasks> masks[Vocab::kParts];
    std::vector<int32_t> uncertain[Vocab::kParts];  // trie nodes to check against the stack
  };

  // Checks and compiles g (tern::Error naming the problem); token terminals
  // must be added tokens of the vocabulary.
  CompiledGrammar(const Grammar& g, std::shared_ptr<const Vocab> vocab);

  const Pda& pda() const { return pda_; }
  const Vocab& vocab() const { return *vocab_; }
  // The node's classification, computed on the first call.
  const NodeInfo& info(int32_t node) const;
  size_t memory() const;  // bytes of the automata and per-node tables (not what they fill in)

 private:
  Pda pda_;
  std::shared_ptr<const Vocab> vocab_;
  std::unique_ptr<std::once_flag[]> once_;
  mutable std::vector<NodeInfo> info_;
  mutable std::mutex uncertain_mutex_;
  mutable std::map<std::pair<int32_t, const NodeMasks*>, std::vector<int32_t>> uncertain_memo_;
};

}  // namespace tern::grammar
