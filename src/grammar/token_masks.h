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
#include <optional>
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
  // Of ids (any order) of a vocabulary of `vocab` ids.
  TokenSet(std::vector<int32_t> ids, int vocab);
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

// The node on its own (parent kExit), over the trie of vocabulary part
// `part`. `plain`: no rule is called within that trie's longest token of the
// node (share_key is not empty), which allows a faster walk.
NodeMasks classify(const Pda& pda, const Vocab& vocab, int part, int32_t node, bool plain);

// A key that is the same for two nodes (of any grammars) exactly when their
// classification is: a digest of the automaton reachable from the node
// within `horizon` bytes (the longest token of the part), written out in
// breadth-first order. None when that part calls other rules or is too large
// to be worth sharing.
std::optional<ShareKey> share_key(const Pda& pda, int32_t node, size_t horizon, int part);

// The trie nodes of the exit tokens that may go on after the rule in some
// place it is called from (not already accepted), in trie order.
std::vector<int32_t> uncertain_tokens(const Pda& pda, const Vocab& vocab, int part, int32_t node,
                                      const NodeMasks& masks);

}  // namespace tern::grammar
