#include "grammar/token_masks.h"

#include <algorithm>
#include <bit>

#include "grammar/walker.h"

namespace tern::grammar {
namespace {

// Share keys are built for parts up to this many nodes.
constexpr size_t kMaxShareNodes = 4096;

}  // namespace

TokenSet::TokenSet(std::vector<uint32_t> bits) : bits_(std::move(bits)) {}

TokenSet::TokenSet(std::vector<int32_t> ids, int vocab) {
  const size_t words = (size_t(vocab) + 31) / 32;
  if (ids.size() < words) {  // a list is smaller than a bitset
    std::sort(ids.begin(), ids.end());
    ids_ = std::move(ids);
    return;
  }
  bits_.assign(words, 0);
  for (int32_t id : ids) bits_[size_t(id) / 32] |= 1u << (id % 32);
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

namespace {

// Token ids collected as a list, turned into a bitset once that is smaller.
class IdCollector {
 public:
  explicit IdCollector(int vocab) : vocab_(vocab), words_((size_t(vocab) + 31) / 32) {}
  void add(const int32_t* first, const int32_t* last) {
    if (bits_.empty()) {
      ids_.insert(ids_.end(), first, last);
      if (ids_.size() < words_) return;
      bits_.assign(words_, 0);
      for (int32_t id : ids_) bits_[size_t(id) / 32] |= 1u << (id % 32);
      ids_.clear();
      return;
    }
    for (; first != last; ++first) bits_[size_t(*first) / 32] |= 1u << (*first % 32);
  }
  TokenSet take() {
    return bits_.empty() ? TokenSet(std::move(ids_), vocab_) : TokenSet(std::move(bits_));
  }

 private:
  int vocab_;
  size_t words_;
  std::vector<int32_t> ids_;
  std::vector<uint32_t> bits_;
};

// classify() where no rule is called within a token's length of the node:
// one automaton node per trie depth, no stacks, each with its transitions as
// a table. A subtree whose bytes all loop on a non-final node is accepted
// whole without walking it, and where the loop is a large set (a string's
// characters), so is the run of nodes up to the next byte outside it
// (Vocab::runs_outside): a string position then visits only the nodes of
// quotes, escapes and multi-byte characters, not the whole trie.
NodeMasks classify_plain(const Pda& pda, const Vocab& vocab, int part, int32_t node) {
  const TokenTrie& trie = vocab.trie(part);
  NodeMasks out;
  IdCollector accepted(vocab.size());
  auto accept_range = [&](int32_t from, int32_t to) {  // the ids of trie nodes [from, to)
    accepted.add(trie.ids.data() + trie.first[size_t(from)],
                 trie.ids.data() + trie.first[size_t(to)]);
  };
  const size_t depths = trie.max_bytes + 1;
  std::vector<int32_t> at(depths);         // the automaton node after each depth
  std::vector<int32_t> row(depths * 256);  // its transitions, for row_of[d] == at[d]
  std::vector<int32_t> row_of(depths, -1);
  std::vector<ByteSet> loops(depths);  // the bytes that stay on it
  std::vector<std::shared_ptr<const std::vector<int32_t>>> runs(depths);  // runs_outside(loops)
  auto table = [&](size_t d) -> const int32_t* {
    int32_t* r = &row[d * 256];
    if (row_of[d] != at[d]) {
      std::fill(r, r + 256, -1);
      loops[d] = ByteSet();
      for (const Pda::Edge& e : pda.edges_of(at[d])) {
        std::fill(r + e.lo, r + e.hi + 1, e.to);
        if (e.to == at[d]) loops[d].add(e.lo, e.hi);
      }
      runs[d] = pda.nodes[size_t(at[d])].final ? nullptr : vocab.runs_outside(part, loops[d]);
      row_of[d] = at[d];
    }
    return r;
  };
  at[0] = node;
  const auto n = int32_t(trie.size());
  for (int32_t i = 0; i < n;) {
    const size_t d = trie.depth[size_t(i)];
    const int32_t* r = table(d - 1);
    if (!loops[d - 1].empty() && !pda.nodes[size_t(at[d - 1])].final &&
        trie.sets[trie.below[size_t(i)]].subset_of(loops[d - 1])) {
      accept_range(i, trie.end[size_t(i)]);
      i = trie.end[size_t(i)];
      continue;
    }
    if (runs[d - 1] && loops[d - 1].contains(trie.byte[size_t(i)])) {
      // Nodes [i, j) all stay on at[d - 1]; so do the ancestors of j below depth d.
      const int32_t j = std::min((*runs[d - 1])[size_t(i)], trie.parent_end[size_t(i)]);
      accept_range(i, j);
      if (j < n)
        for (size_t k = d; k < trie.depth[size_t(j)]; ++k) at[k] = at[d - 1];
      i = j;
      continue;
    }
    const int32_t to = r[trie.byte[size_t(i)]];
    if (to < 0) {
      i = trie.end[size_t(i)];
      continue;
    }
    accept_range(i, i + 1);  // inside the rule, or at its end
    const Pda::Node& nd = pda.nodes[size_t(to)];
    if (nd.final && trie.end[size_t(i)] > i + 1) out.exits.push_back({i, uint16_t(d)});
    if (nd.e0 == nd.e1) {
      i = trie.end[size_t(i)];
      continue;
    }
    at[d] = to;
    ++i;
  }
  out.accepted = accepted.take();
  return out;
}

}  // namespace

NodeMasks classify(const Pda& pda, const Vocab& vocab, int part, int32_t node, bool plain) {
  const TokenTrie& trie = vocab.trie(part);
  if (plain) return classify_plain(pda, vocab, part, node);
  Walker w(pda);
  const Pair seed{node, kExit};
  // The node is a stack top already closed by the caller: start from it as is.
  w.reset(std::span(&seed, 1));
  NodeMasks out;
  IdCollector accepted(vocab.size());
  const auto n = int32_t(trie.size());
  for (int32_t i = 0; i < n;) {
    w.pop_to(trie.depth[size_t(i)] - 1u);
    if (!w.push_byte(trie.byte[size_t(i)])) {
      i = trie.end[size_t(i)];
      continue;
    }
    const bool in_rule = !w.top().empty();
    accepted.add(trie.ids.data() + trie.first[size_t(i)],
                 trie.ids.data() + trie.first[size_t(i) + 1]);
    if ((w.flags() & kExited) && trie.end[size_t(i)] > i + 1)
      out.exits.push_back({i, trie.depth[size_t(i)]});
    i = in_rule ? i + 1 : trie.end[size_t(i)];
  }
  out.accepted = accepted.take();
  return out;
}

std::optional<ShareKey> share_key(const Pda& pda, int32_t node, size_t horizon, int part) {
  // Breadth-first numbering from the node; each node contributes its final
  // flag and, before the horizon, its edges with the targets' numbers. Two
  // independent 64-bit digests of that stream.
  thread_local std::vector<uint32_t> stamp, local;
  thread_local uint32_t gen = 0;
  if (stamp.size() < pda.nodes.size())
    stamp.assign(pda.nodes.size(), 0), local.resize(pda.nodes.size());
  if (++gen == 0) std::fill(stamp.begin(), stamp.end(), 0), gen = 1;
  std::vector<std::pair<int32_t, size_t>> order = {{node, 0}};  // node, depth
  stamp[size_t(node)] = gen, local[size_t(node)] = 0;
  uint64_t a = 0x9E3779B97F4A7C15ull, b = 0xC2B2AE3D27D4EB4Full;
  auto put = [&](uint64_t x) {
    a = std::rotl((a ^ x) * 0xFF51AFD7ED558CCDull, 29);
    b = std::rotl((b ^ (x + 0x632BE59BD9B4E019ull)) * 0xC4CEB9FE1A85EC53ull, 31);
  };
  for (size_t i = 0; i < order.size(); ++i) {
    if (order.size() > kMaxShareNodes) return std::nullopt;
    auto [n, depth] = order[i];
    const Pda::Node& nd = pda.nodes[size_t(n)];
    put(nd.final ? 1 : 2);
    if (depth >= horizon) continue;
    if (nd.c0 != nd.c1) return std::nullopt;
    for (const Pda::Edge& e : pda.edges_of(n)) {
      if (stamp[size_t(e.to)] != gen) {
        stamp[size_t(e.to)] = gen, local[size_t(e.to)] = uint32_t(order.size());
        order.push_back({e.to, depth + 1});
      }
      put(uint64_t(e.lo) << 40 | uint64_t(e.hi) << 32 | local[size_t(e.to)]);
    }
    put(3);
  }
  return ShareKey{a, b, part};
}

std::vector<int32_t> uncertain_tokens(const Pda& pda, const Vocab& vocab, int part, int32_t node,
                                      const NodeMasks& masks) {
  std::vector<int32_t> out;
  if (masks.exits.empty()) return out;
  const TokenTrie& trie = vocab.trie(part);
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
