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
    const std::string key = share_key(pda_, node, vocab_->max_token_bytes());
    if (!key.empty()) out.masks = vocab_->shared(key);
    if (!out.masks) {
      out.masks = std::make_shared<const NodeMasks>(classify(pda_, *vocab_, node));
      if (!key.empty()) vocab_->share(key, out.masks);
    }
    out.uncertain = uncertain_tokens(pda_, *vocab_, node, *out.masks);
  });
  return info_[size_t(node)];
}

size_t CompiledGrammar::memory() const {
  return pda_.nodes.size() * sizeof(Pda::Node) + pda_.edges.size() * sizeof(Pda::Edge) +
         pda_.calls.size() * sizeof(Pda::Call) + pda_.token_edges.size() * sizeof(Pda::TokenEdge);
}

}  // namespace tern::grammar
