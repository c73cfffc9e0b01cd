#include "grammar/vocab.h"

#include <algorithm>
#include <array>
#include <bit>
#include <map>
#include <numeric>

#include "core/error.h"
#include "grammar/token_masks.h"

namespace tern::grammar {
namespace {

// Shared classifications kept per vocabulary, at most this many bytes.
constexpr size_t kMaxSharedBytes = size_t(512) << 20;

}  // namespace

namespace {

// The trie of `order` (ids sorted by their bytes).
TokenTrie build_trie(const std::vector<std::string>& bytes, const std::vector<int32_t>& order) {
  TokenTrie trie;
  // Depth-first nodes: each token adds the bytes past its common prefix with the previous one.
  std::vector<int32_t> path;  // trie node of each depth on the current path
  std::string_view prev;
  for (int32_t id : order) {
    std::string_view s = bytes[size_t(id)];
    trie.max_bytes = std::max(trie.max_bytes, s.size());
    size_t common = 0;
    while (common < prev.size() && common < s.size() && prev[common] == s[common]) ++common;
    path.resize(common);
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(int32_t(trie.byte.size()));
      trie.byte.push_back(uint8_t(s[d]));
      trie.depth.push_back(uint16_t(d + 1));
      trie.first.push_back(int32_t(trie.ids.size()));
    }
    trie.ids.push_back(id);  // at node path.back(), which is the newest node
    prev = s;
  }
  trie.first.push_back(int32_t(trie.ids.size()));
  // Subtree ends: a node's subtree stops at the next node no deeper than it.
  const size_t n = trie.byte.size();
  trie.end.assign(n, int32_t(n));
  std::vector<int32_t> open, parent(n, -1);
  for (size_t i = 0; i < n; ++i) {
    while (!open.empty() && trie.depth[size_t(open.back())] >= trie.depth[i]) {
      trie.end[size_t(open.back())] = int32_t(i);
      open.pop_back();
    }
    if (!open.empty()) parent[i] = open.back();
    open.push_back(int32_t(i));
  }
  trie.parent_end.resize(n);
  for (size_t i = 0; i < n; ++i)
    trie.parent_end[i] = parent[i] < 0 ? int32_t(n) : trie.end[size_t(parent[i])];
  std::vector<ByteSet> below(n);
  for (size_t i = n; i-- > 0;) {
    below[i].add(trie.byte[i], trie.byte[i]);
    if (parent[i] >= 0) below[size_t(parent[i])] |= below[i];
  }
  std::map<std::array<uint64_t, 4>, uint32_t> index;
  trie.below.resize(n);
  for (size_t i = 0; i < n; ++i) {
    auto [it, added] = index.emplace(below[i].words(), uint32_t(trie.sets.size()));
    if (added) trie.sets.push_back(below[i]);
    trie.below[i] = it->second;
  }
  return trie;
}

}  // namespace

Vocab::Vocab(std::vector<std::string> bytes, std::vector<uint8_t> added)
    : bytes_(std::move(bytes)), added_(std::move(added)) {
  if (added_.size() != bytes_.size())
    fail("vocabulary: {} token byte strings but {} added flags", bytes_.size(), added_.size());
  std::vector<int32_t> order[kParts];
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (added_[id]) {
      added_ids_.emplace(bytes_[id], int32_t(id));
    } else if (!bytes_[id].empty()) {
      if (bytes_[id].size() > 0xFFFF) fail("vocabulary: token {} is longer than 65535 bytes", id);
      const size_t len = bytes_[id].size();
      order[len <= kPartBytes[0] ? 0 : len <= kPartBytes[1] ? 1 : 2].push_back(int32_t(id));
    }
  }
  for (int part = 0; part < kParts; ++part) {
    std::sort(order[part].begin(), order[part].end(), [&](int32_t a, int32_t b) {
      return bytes_[size_t(a)] != bytes_[size_t(b)] ? bytes_[size_t(a)] < bytes_[size_t(b)] : a < b;
    });
    tries_[part] = build_trie(bytes_, order[part]);
  }
}

std::optional<int32_t> Vocab::added_token(std::string_view text) const {
  auto it = added_ids_.find(std::string(text));
  if (it == added_ids_.end()) return std::nullopt;
  return it->second;
}

std::shared_ptr<const std::vector<int32_t>> Vocab::runs_outside(int part,
                                                                const ByteSet& set) const {
  int members = 0;
  for (uint64_t w : set.words()) members += std::popcount(w);
  if (members < kMinRunSet) return nullptr;
  const auto key = std::make_pair(part, set.words());
  {
    std::lock_guard lock(shared_mutex_);
    if (auto it = runs_.find(key); it != runs_.end()) return it->second;
    if (runs_.size() >= size_t(kMaxRunTables)) return nullptr;
  }
  const TokenTrie& trie = tries_[size_t(part)];
  auto next = std::make_shared<std::vector<int32_t>>(trie.size());
  int32_t after = int32_t(trie.size());
  for (size_t i = trie.size(); i-- > 0;) {
    if (!set.contains(trie.byte[i])) after = int32_t(i);
    (*next)[i] = after;
  }
  std::lock_guard lock(shared_mutex_);
  return runs_.emplace(key, std::move(next)).first->second;
}

std::shared_ptr<const NodeMasks> Vocab::shared(const ShareKey& key) const {
  std::lock_guard lock(shared_mutex_);
  auto it = shared_.find(key);
  return it == shared_.end() ? nullptr : it->second;
}

void Vocab::share(const ShareKey& key, std::shared_ptr<const NodeMasks> masks) const {
  std::lock_guard lock(shared_mutex_);
  const size_t cost = sizeof key + masks->memory();
  if (shared_bytes_ + cost > kMaxSharedBytes) return;
  if (shared_.emplace(key, std::move(masks)).second) shared_bytes_ += cost;
}

}  // namespace tern::grammar
