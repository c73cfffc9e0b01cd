#include "tokenizer/segment_cache.h"

namespace tern {

void SegmentCache::encode(std::string_view seg, std::vector<int32_t>& out, const Encode& enc) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = index_.find(seg); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      out.insert(out.end(), it->second->ids.begin(), it->second->ids.end());
      return;
    }
  }
  Entry e{std::string(seg), {}};
  enc(seg, e.ids);
  out.insert(out.end(), e.ids.begin(), e.ids.end());
  if (e.bytes() > budget_) return;
  std::lock_guard lock(mutex_);
  if (index_.count(seg)) return;  // another thread encoded it meanwhile
  bytes_ += e.bytes();
  lru_.push_front(std::move(e));
  index_.emplace(lru_.front().text, lru_.begin());
  while (bytes_ > budget_) {
    bytes_ -= lru_.back().bytes();
    index_.erase(lru_.back().text);
    lru_.pop_back();
  }
}

size_t SegmentCache::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

}  // namespace tern
