// The token vocabulary as the grammar sees it: each id's bytes, which ids are
// added tokens (<tool_call>, <|im_end|>, ...: matched only whole, by the
// grammar's token terminals, never as text), and a trie of the other tokens'
// bytes in depth-first order, which the mask computation walks. A Vocab also
// keeps the token classifications that grammars share (token_masks.h).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tern::grammar {

// Tokens in depth-first (byte-lexicographic) order. Node i spells the bytes of
// its parent plus byte[i]; end[i] is one past its subtree; the ids whose
// bytes are exactly node i's are ids[first[i] .. first[i + 1]).
struct TokenTrie {
  std::vector<uint8_t> byte;
  std::vector<uint16_t> depth;  // 1 for the root's children
  std::vector<int32_t> end;
  std::vector<int32_t> first;  // size() + 1 entries
  std::vector<int32_t> ids;
  size_t size() const { return byte.size(); }
  bool has_tokens(size_t i) const { return first[i] != first[i + 1]; }
};

struct NodeMasks;

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
  const TokenTrie& trie() const { return trie_; }
  size_t max_token_bytes() const { return max_bytes_; }

  // Classifications shared between grammars, by a key naming the automaton
  // they were computed from (token_masks.cpp).
  std::shared_ptr<const NodeMasks> shared(const std::string& key) const;
  void share(const std::string& key, std::shared_ptr<const NodeMasks> masks) const;

 private:
  std::vector<std::string> bytes_;
  std::vector<uint8_t> added_;
  std::unordered_map<std::string, int32_t> added_ids_;
  TokenTrie trie_;
  size_t max_bytes_ = 0;
  mutable std::mutex shared_mutex_;
  mutable std::unordered_map<std::string, std::shared_ptr<const NodeMasks>> shared_;
  mutable size_t shared_bytes_ = 0;
};

}  // namespace tern::grammar
