// Byte-pair encoding of one pre-tokenized piece: merges applied by rank, the
// lowest first and the leftmost among equals (as Hugging Face's BPE model).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tern {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

class Bpe {
 public:
  // `vocab` maps token bytes to ids and must hold all 256 single bytes;
  // `merges` are (left, right) token bytes in rank order. `ignore_merges`:
  // a piece that is itself a token is emitted whole.
  Bpe(StringMap<int32_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
      bool ignore_merges);

  // Appends the ids of `piece` (raw bytes). O(n log n) in the piece length.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  struct Merge {
    int32_t rank, id;
  };
  static uint64_t key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }
  void merge(std::string_view piece, std::vector<int32_t>& out) const;

  StringMap<int32_t> vocab_;
  std::array<int32_t, 256> byte_id_{};
  std::unordered_map<uint64_t, Merge> merges_;
  bool ignore_merges_;
  // Most text repeats a small set of short pieces; their ids are remembered.
  mutable std::mutex cache_mu_;
  mutable StringMap<std::vector<int32_t>> cache_;
};

}  // namespace tern
