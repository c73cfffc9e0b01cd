#include "grammar/token_masks.h"

#include <algorithm>
#include <bit>
#include <unordered_map>

#include "grammar/walker.h"

namespace tern::grammar {
namespace {

// Share keys are built for parts up to this many nodes.
constexpr size_t kMaxShareNodes = 4096;

}  // namespace

TokenSet::TokenSet(std::vector<uint32_t> bits) {
  size_t count = 0;
  for (uint32_t w : bits) count += size_t(std::popcount(w));
  if (count >= bits.size()) {  // a list of ids would be larger than the bitset
    bits_ = std::move(bits);
    return;
  }
  ids_.reserve(count);
  for (size_t i = 0; i < bits.size(); ++i)
    for (uint32_t w = bits[i]; w; w &= w - 1)
      ids_.push_back(int32_t(i * 32 + size_t(std::countr_zero(w))));
}

void TokenSet::or_into(std::span<uint32_t> words) const {
  if (!bits_.empty()) {
    for (size_t i = 0; i < bits_.size(); ++i) words[i] |= bits_[i];
    return;
  }
  for (int32_t id : ids_) words[size_t(id) / 32] |= 1u << (id % 32);
}

bool TokenSet::contains(int32_t id) const {
  if (!bits_.empty()) return bits_[size_t(id) / 32] >> (id % 32) & 1;
  return std::binary_search(ids_.begin(), ids_.end(), id);
}

NodeMasks classify(const Pda& pda, const Vocab& vocab, int32_t node) {
  const TokenTrie& trie = vocab.trie();
  Walker w(pda);
  const Pair seed{node, kExit};
  // The node is a stack top already closed by the caller: start from it as is.
  w.reset(std::span(&seed, 1));
  NodeMasks out;
  std::vector<uint32_t> accepted((size_t(vocab.size()) + 31) / 32, 0);
  const auto n = int32_t(trie.size());
  for (int32_t i = 0; i < n;) {
    w.pop_to(trie.depth[size_t(i)] - 1u);
    if (!w.push_byte(trie.byte[size_t(i)])) {
      i = trie.end[size_t(i)];
      continue;
    }
    const bool in_rule = !w.top().empty();
    for (int32_t k = trie.first[size_t(i)]; k < trie.first[size_t(i) + 1]; ++k)
      accepted[size_t(trie.ids[size_t(k)]) / 32] |= 1u << (trie.ids[size_t(k)] % 32);
    if ((w.flags() & kExited) && trie.end[size_t(i)] > i + 1)
      out.exits.push_back({i, trie.depth[size_t(i)]});
    i = in_rule ? i + 1 : trie.end[size_t(i)];
  }
  out.accepted = TokenSet(std::move(accepted));
  return out;
}

std::string share_key(const Pda& pda, int32_t node, size_t horizon) {
  // Breadth-first numbering from the node; edges are written with the target's
  // number, nodes found at the horizon only with their final flag.
  std::vector<std::pair<int32_t, size_t>> order = {{node, 0}};  // node, depth
  std::unordered_map<int32_t, int32_t> ids = {{node, 0}};       // pda node -> local id
  auto local = [&](int32_t n, size_t depth) {
    auto [it, added] = ids.emplace(n, int32_t(order.size()));
    if (added) order.push_back({n, depth});
    return it->second;
  };
  std::string key;
  for (size_t i = 0; i < order.size(); ++i) {
    if (order.size() > kMaxShareNodes) return {};
    auto [n, depth] = order[i];
    const Pda::Node& nd = pda.nodes[size_t(n)];
    key += nd.final ? 'F' : 'N';
    if (depth >= horizon) continue;
    if (nd.c0 != nd.c1) return {};
    for (const Pda::Edge& e : pda.edges_of(n)) {
      int32_t id = local(e.to, depth + 1);
      key += char(e.lo);
      key += char(e.hi);
      key.append(reinterpret_cast<const char*>(&id), sizeof id);
    }
    key += '.';
  }
  return key;
}

std::vector<int32_t> uncertain_tokens(const Pda& pda, const Vocab& vocab, int32_t node,
                                      const NodeMasks& masks) {
  std::vector<int32_t> out;
  if (masks.exits.empty()) return out;
  const TokenTrie& trie = vocab.trie();
  // After the rule: every place it is called from.
  std::vector<Pair> after;
  for (int32_t ret : pda.call_sites[size_t(pda.nodes[size_t(node)].rule)])
    after.push_back({ret, kAnyCaller});
  Walker w(pda);
  w.reset(after);  // after the root rule, the text may also end (kEnded)
  for (auto [sub, depth] : masks.exits) {
    for (int32_t i = sub + 1; i < trie.end[size_t(sub)];) {
      w.pop_to(size_t(trie.depth[size_t(i)] - depth - 1));
      if (!w.push_byte(trie.byte[size_t(i)])) {
        i = trie.end[size_t(i)];
        continue;
      }
      if (trie.has_tokens(size_t(i)) &&
          !masks.accepted.contains(trie.ids[size_t(trie.first[size_t(i)])]))
        out.push_back(i);
      i = w.top().empty() ? trie.end[size_t(i)] : i + 1;
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace tern::grammar
