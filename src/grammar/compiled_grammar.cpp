#include "grammar/compiled_grammar.h"

#include "core/error.h"

namespace tern::grammar {

CompiledGrammar::CompiledGrammar(const Grammar& g, std::shared_ptr<const Vocab> vocab)
    : pda_(compile(g)), vocab_(std::move(vocab)) {
  for (const Pda::TokenEdge& e : pda_.token_edges)
    if (e.token < 0 || e.token >= vocab_->size() || !vocab_->added(e.token))
      fail("token id {} in the grammar is not an added token of the vocabulary", e.token);
  once_ = std::make_unique<std::once_flag[]>(pda_.nodes.size());
  info_.resize(pda_.nodes.size());
}

const CompiledGrammar::NodeInfo& CompiledGrammar::info(int32_t node) const {
  std::call_once(once_[size_t(node)], [&] {
    NodeInfo& out = info_[size_t(node)];
    bool calls_near = false;  // a rule is called within the reach of a shorter part's tokens
    for (int part = 0; part < Vocab::kParts; ++part) {
      std::optional<ShareKey> key;
      if (!calls_near) key = share_key(pda_, node, vocab_->trie(part).max_bytes, part);
      const bool plain = key.has_value();
      calls_near = !plain;
      // The last part's few long tokens are walked each time: their reach makes keys rarely equal.
      if (part + 1 == Vocab::kParts) key.reset();
      std::shared_ptr<const NodeMasks>& masks = out.masks[part];
      if (key) masks = vocab_->shared(*key);
      if (!masks) {
        masks = std::make_shared<const NodeMasks>(classify(pda_, *vocab_, part, node, plain));
        if (key) vocab_->share(*key, masks);
      }
      // Nodes of a rule with the same classification have the same uncertain tokens
      // (those go on after the rule, at the same places): kept per classification.
      const auto memo_key = std::make_pair(pda_.nodes[size_t(node)].rule, masks.get());
      std::lock_guard lock(uncertain_mutex_);
      auto it = uncertain_memo_.find(memo_key);
      if (it == uncertain_memo_.end())
        it = uncertain_memo_.emplace(memo_key, uncertain_tokens(pda_, *vocab_, part, node, *masks))
                 .first;
      out.uncertain[part] = it->second;
    }
  });
  return info_[size_t(node)];
}

size_t CompiledGrammar::memory() const {
  return pda_.nodes.size() * sizeof(Pda::Node) + pda_.edges.size() * sizeof(Pda::Edge) +
         pda_.calls.size() * sizeof(Pda::Call) + pda_.token_edges.size() * sizeof(Pda::TokenEdge) +
         pda_.nodes.size() * (sizeof(NodeInfo) + sizeof(std::once_flag));
}

}  // namespace tern::grammar
