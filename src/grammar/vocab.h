// The token vocabulary as the grammar sees it: each id's bytes, which ids are
// added tokens (<tool_call>, <|im_end|>, ...: matched only whole, by the
// grammar's token terminals, never as text), and tries of the other tokens'
// bytes in depth-first order, which the mask computation walks, one per
// range of token lengths (up to kPartBytes[0] bytes, up to kPartBytes[1],
// longer): a classification of the tokens of a part depends only on the
// automaton within that part's length, so the classifications of the short
// tokens, most of them, are shared by more positions (token_masks.h). A
// Vocab also keeps the classifications that grammars share.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace tern::grammar {

// Tokens in depth-first (byte-lexicographic) order. Node i spells the bytes of
// its parent plus byte[i]; end[i] is one past its subtree; the ids whose
// bytes are exactly node i's are ids[first[i] .. first[i + 1]).
struct TokenTrie {
  size_t max_bytes = 0;  // the longest token's
  std::vector<uint8_t> byte;
  // The bytes of node i and of its whole subtree: sets[below[i]] (sets are shared).
  std::vector<uint32_t> below;
  std::vector<ByteSet> sets;
  std::vector<uint16_t> depth;  // 1 for the root's children
  std::vector<int32_t> end;
  std::vector<int32_t> parent_end;  // end[] of node i's parent (size() for the root's children)
  std::vector<int32_t> first;       // size() + 1 entries
  std::vector<int32_t> ids;
  size_t size() const { return byte.size(); }
  bool has_tokens(size_t i) const { return first[i] != first[i + 1]; }
};

struct NodeMasks;

// Names the automaton around a node that a classification depends on
// (token_masks.h, share_key): a 128-bit digest, and the vocabulary part.
struct ShareKey {
  uint64_t a = 0, b = 0;
  int part = 0;
  bool operator==(const ShareKey&) const = default;
};
struct ShareKeyHash {
  size_t operator()(const ShareKey& k) const { return size_t(k.a ^ (k.b << 1) ^ uint64_t(k.part)); }
};

// The longest tokens of the first parts; the last part holds the rest.
constexpr size_t kPartBytes[] = {16, 48};
constexpr size_t kShortToken = kPartBytes[0];

class Vocab {
 public:
  // bytes[id]: what token id stands for; added[id] != 0 for added tokens. Ids
  // with empty bytes (unused ids of a padded vocabulary) are never allowed.
  Vocab(std::vector<std::string> bytes, std::vector<uint8_t> added);
  Vocab(const Vocab&) = delete;
  Vocab& operator=(const Vocab&) = delete;

  int size() const { return int(bytes_.size()); }
  std::string_view bytes(int32_t id) const { return bytes_[size_t(id)]; }
  bool added(int32_t id) const { return added_[size_t(id)] != 0; }
  // The added token whose text is `text`.
  std::optional<int32_t> added_token(std::string_view text) const;
  const TokenTrie& trie(int part) const { return tries_[size_t(part)]; }
  static constexpr int kParts = 3;

  // For trie `part` and a large byte set (a string's characters, which an
  // automaton node loops on): next[i], the first node at or after i whose
  // byte is not in the set, so a walk can take the run between in one step.
  // Null for a small set, or once kMaxRunTables sets have been asked for.
  // Computed on first use, shared.
  std::shared_ptr<const std::vector<int32_t>> runs_outside(int part, const ByteSet& set) const;
  static constexpr int kMinRunSet = 64, kMaxRunTables = 16;

  // Classifications shared between grammars, by a key naming the automaton
  // they were computed from (token_masks.cpp).
  std::shared_ptr<const NodeMasks> shared(const ShareKey& key) const;
  void share(const ShareKey& key, std::shared_ptr<const NodeMasks> masks) const;

 private:
  std::vector<std::string> bytes_;
  std::vector<uint8_t> added_;
  std::unordered_map<std::string, int32_t> added_ids_;
  TokenTrie tries_[kParts];
  mutable std::mutex shared_mutex_;
  mutable std::unordered_map<ShareKey, std::shared_ptr<const NodeMasks>, ShareKeyHash> shared_;
  mutable size_t shared_bytes_ = 0;
  mutable std::map<std::pair<int, std::array<uint64_t, 4>>,
                   std::shared_ptr<const std::vector<int32_t>>>
      runs_;  // under shared_mutex_
};

}  // namespace tern::grammar
