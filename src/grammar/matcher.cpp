#include "grammar/matcher.h"

#include <algorithm>

#include "core/error.h"

namespace tern::grammar {
namespace {

constexpr size_t kMaxCheckedStates = 1024;

void set_bit(std::span<uint32_t> words, int32_t id) {
  words[size_t(id) / 32] |= 1u << (id % 32);
}

bool has_bit(std::span<const uint32_t> words, int32_t id) {
  return words[size_t(id) / 32] >> (id % 32) & 1;
}

}  // namespace

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), walker_(grammar_->pda()) {
  const Pda& pda = grammar_->pda();
  const Pair start{pda.rule_start[size_t(pda.root)], kBottom};
  walker_.reset(std::span(&start, 1));
}

bool Matcher::accept(int32_t token) {
  const Vocab& vocab = grammar_->vocab();
  if (token < 0 || token >= vocab.size()) return false;
  if (!vocab.added(token)) return accept_bytes(vocab.bytes(token));
  return walker_.push_token(token);
}

bool Matcher::accept_bytes(std::string_view bytes) {
  if (bytes.empty()) return false;
  const size_t base = walker_.top_level();
  for (char c : bytes)
    if (!walker_.push_byte(uint8_t(c))) {
      walker_.pop_to(base);
      return false;
    }
  walker_.squash(base);
  return true;
}

void Matcher::rollback(size_t n) {
  TERN_CHECK(n <= steps());
  walker_.pop_to(steps() - n);
  checked_.clear();  // frame ids may be reused
}

void Matcher::check(int part, const std::vector<int32_t>& candidates,
                    std::span<const uint32_t> words, std::vector<int32_t>& out) {
  const Vocab& vocab = grammar_->vocab();
  const TokenTrie& trie = vocab.trie(part);
  const size_t base = walker_.top_level();
  std::string_view prev;
  size_t pushed = 0;       // bytes of prev on the walker
  size_t dead = SIZE_MAX;  // prev's first `dead` bytes are refused
  for (int32_t c : candidates) {
    const int32_t id = trie.ids[size_t(trie.first[size_t(c)])];
    if (has_bit(words, id)) continue;
    std::string_view s = vocab.bytes(id);
    size_t common = 0;
    while (common < prev.size() && common < s.size() && prev[common] == s[common]) ++common;
    prev = s;
    if (common >= dead) {  // shares a refused prefix
      pushed = std::min(pushed, common);
      continue;
    }
    pushed = std::min(pushed, common);
    walker_.pop_to(base + pushed);
    dead = SIZE_MAX;
    for (; pushed < s.size(); ++pushed)
      if (!walker_.push_byte(uint8_t(s[pushed]))) {
        dead = pushed + 1;
        break;
      }
    if (dead == SIZE_MAX)
      for (int32_t k = trie.first[size_t(c)]; k < trie.first[size_t(c) + 1]; ++k)
        out.push_back(trie.ids[size_t(k)]);
  }
  walker_.pop_to(base);
}

void Matcher::fill_mask(std::span<uint32_t> words) {
  const Vocab& vocab = grammar_->vocab();
  TERN_CHECK(words.size() * 32 >= size_t(vocab.size()));
  std::fill(words.begin(), words.end(), 0u);
  const Pda& pda = grammar_->pda();
  const std::span<const Pair> top = walker_.top();
  std::vector<int32_t> candidates[Vocab::kParts];
  bool any = false;
  for (const Pair& p : top) {
    const CompiledGrammar::NodeInfo& info = grammar_->info(p.node);
    for (int part = 0; part < Vocab::kParts; ++part) {
      info.masks[part]->accepted.or_into(words);
      const std::vector<int32_t>& u = info.uncertain[part];
      candidates[part].insert(candidates[part].end(), u.begin(), u.end());
      any = any || !u.empty();
    }
    for (const Pda::TokenEdge& e : pda.tokens_of(p.node)) set_bit(words, e.token);
  }
  if (!any) return;
  if (top.size() > 1)
    for (std::vector<int32_t>& c : candidates) {
      std::sort(c.begin(), c.end());
      c.erase(std::unique(c.begin(), c.end()), c.end());
    }
  std::string key(reinterpret_cast<const char*>(top.data()), top.size_bytes());
  auto it = checked_.find(key);
  if (it == checked_.end()) {
    if (checked_.size() >= kMaxCheckedStates) checked_.clear();
    std::vector<int32_t> ids;
    for (int part = 0; part < Vocab::kParts; ++part) check(part, candidates[part], words, ids);
    it = checked_.emplace(std::move(key), std::move(ids)).first;
  }
  for (int32_t id : it->second) set_bit(words, id);
}

}  // namespace tern::grammar
