#include "grammar/vocab.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "grammar/token_masks.h"

namespace tern::grammar {
namespace {

// Shared classifications kept per vocabulary, at most this many bytes.
constexpr size_t kMaxSharedBytes = size_t(512) << 20;

}  // namespace

Vocab::Vocab(std::vector<std::string> bytes, std::vector<uint8_t> added)
    : bytes_(std::move(bytes)), added_(std::move(added)) {
  if (added_.size() != bytes_.size())
    fail("vocabulary: {} token byte strings but {} added flags", bytes_.size(), added_.size());
  std::vector<int32_t> order;
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (added_[id]) {
      added_ids_.emplace(bytes_[id], int32_t(id));
    } else if (!bytes_[id].empty()) {
      if (bytes_[id].size() > 0xFFFF) fail("vocabulary: token {} is longer than 65535 bytes", id);
      order.push_back(int32_t(id));
      max_bytes_ = std::max(max_bytes_, bytes_[id].size());
    }
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return bytes_[size_t(a)] != bytes_[size_t(b)] ? bytes_[size_t(a)] < bytes_[size_t(b)] : a < b;
  });
  // Depth-first nodes: each token adds the bytes past its common prefix with the previous one.
  std::vector<int32_t> path;  // trie node of each depth on the current path
  std::string_view prev;
  for (int32_t id : order) {
    std::string_view s = bytes_[size_t(id)];
    size_t common = 0;
    while (common < prev.size() && common < s.size() && prev[common] == s[common]) ++common;
    path.resize(common);
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(int32_t(trie_.byte.size()));
      trie_.byte.push_back(uint8_t(s[d]));
      trie_.depth.push_back(uint16_t(d + 1));
      trie_.first.push_back(int32_t(trie_.ids.size()));
    }
    trie_.ids.push_back(id);  // at node path.back(), which is the newest node
    prev = s;
  }
  trie_.first.push_back(int32_t(trie_.ids.size()));
  // Subtree ends: a node's subtree stops at the next node no deeper than it.
  const size_t n = trie_.byte.size();
  trie_.end.assign(n, int32_t(n));
  std::vector<int32_t> open;
  for (size_t i = 0; i < n; ++i) {
    while (!open.empty() && trie_.depth[size_t(open.back())] >= trie_.depth[i]) {
      trie_.end[size_t(open.back())] = int32_t(i);
      open.pop_back();
    }
    open.push_back(int32_t(i));
  }
}

std::optional<int32_t> Vocab::added_token(std::string_view text) const {
  auto it = added_ids_.find(std::string(text));
  if (it == added_ids_.end()) return std::nullopt;
  return it->second;
}

std::shared_ptr<const NodeMasks> Vocab::shared(const std::string& key) const {
  std::lock_guard lock(shared_mutex_);
  auto it = shared_.find(key);
  return it == shared_.end() ? nullptr : it->second;
}

void Vocab::share(const std::string& key, std::shared_ptr<const NodeMasks> masks) const {
  std::lock_guard lock(shared_mutex_);
  const size_t cost = key.size() + masks->memory();
  if (shared_bytes_ + cost > kMaxSharedBytes) return;
  if (shared_.emplace(key, std::move(masks)).second) shared_bytes_ += cost;
}

}  // namespace tern::grammar
