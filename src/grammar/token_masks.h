// What each automaton node allows on its own, computed once per node by
// walking the token trie: the tokens accepted whatever the stack below
// (consumed inside the node's rule, or ending exactly where the rule ends),
// and the trie subtrees whose tokens leave the rule part-way ("exits"), which
// depend on the stack. Exits are filtered once per grammar against every
// place the rule is called from (an over-approximation of the stack); what
// survives is checked at run time against the real stack (matcher.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "grammar/pda.h"
#include "grammar/vocab.h"

namespace tern::grammar {

// Token ids: a sorted list when few, else a bitset over the vocabulary.
class TokenSet {
 public:
  TokenSet() = default;
  // From a bitset over the vocabulary; kept as a list when that is smaller.
  explicit TokenSet(std::vector<uint32_t> bits);
  void or_into(std::span<uint32_t> words) const;
  bool contains(int32_t id) const;
  size_t memory() const { return ids_.size() * 4 + bits_.size() * 4; }

 private:
  std::vector<int32_t> ids_;
  std::vector<uint32_t> bits_;
};

struct NodeMasks {
  TokenSet accepted;
  // (trie node, depth): the tokens below that trie node consume `depth` bytes
  // in the rule, which can end there, and go on after it.
  std::vector<std::pair<int32_t, uint16_t>> exits;
  size_t memory() const { return accepted.memory() + exits.size() * 8 + sizeof(NodeMasks); }
};

// The node on its own (parent kExit), over the whole trie.
NodeMasks classify(const Pda& pda, const Vocab& vocab, int32_t node);

// A key that is the same for two nodes (of any grammars) exactly when their
// classification is: the automaton reachable from the node within the
// longest token's bytes, written out in breadth-first order. Empty when that
// part calls other rules or is too large to be worth sharing.
std::string share_key(const Pda& pda, int32_t node, size_t horizon);

// The trie nodes of the exit tokens that may go on after the rule in some
// place it is called from (not already accepted), in trie order.
std::vector<int32_t> uncertain_tokens(const Pda& pda, const Vocab& vocab, int32_t node,
                                      const NodeMasks& masks);

}  // namespace tern::grammar
