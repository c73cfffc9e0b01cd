// Ids of long text segments (the text between added tokens, which encodes
// independently of its neighbours), least recently used dropped first within
// a byte budget. A chat client re-sends every earlier message each turn; the
// BPE of that history is the part of a request's preparation that grows
// with the conversation (~0.2 s for 24K tokens on one core), so the server
// encodes each long message once. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tern {

class SegmentCache {
 public:
  // Shorter segments are encoded every time (cheap, and many).
  static constexpr size_t kMinBytes = 512;
  explicit SegmentCache(size_t budget_bytes) : budget_(budget_bytes) {}

  using Encode = std::function<void(std::string_view, std::vector<int32_t>&)>;
  // Appends the ids of `seg` to `out`: from the cache, or encode(seg, ids)
  // (outside the lock) and kept.
  void encode(std::string_view seg, std::vector<int32_t>& out, const Encode& encode);
  // Bytes held: the segments' text and their ids.
  size_t bytes() const;

 private:
  struct Entry {
    std::string text;
    std::vector<int32_t> ids;
    size_t bytes() const { return text.size() + ids.size() * sizeof(int32_t); }
  };
  size_t budget_, bytes_ = 0;
  mutable std::mutex mutex_;
  std::list<Entry> lru_;                                                    // most recent first
  std::unordered_map<std::string_view, std::list<Entry>::iterator> index_;  // keys: lru_'s text
};

}  // namespace tern
