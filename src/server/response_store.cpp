#include "server/response_store.h"

namespace tern::server {

void ResponseStore::put(const std::string& id, nlohmann::ordered_json messages) {
  const size_t b = messages.dump().size() + id.size() + 64;
  std::lock_guard lock(m_);
  if (auto it = index_.find(id); it != index_.end()) {
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.push_front({id, std::move(messages), b});
  index_[id] = lru_.begin();
  bytes_ += b;
  while (bytes_ > max_bytes_ && lru_.size() > 1) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().id);
    lru_.pop_back();
  }
}

std::optional<nlohmann::ordered_json> ResponseStore::get(const std::string& id) {
  std::lock_guard lock(m_);
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->messages;
}

}  // namespace tern::server
