#include "server/response_store.h"

namespace tern::server {

void ResponseStore::erase(Iter it) {
  bytes_ -= it->bytes;
  for (const auto& item : it->items) item_index_.erase(item.value("id", ""));
  index_.erase(it->id);
  lru_.erase(it);
}

void ResponseStore::put(const std::string& id, nlohmann::ordered_json messages,
                        nlohmann::ordered_json items) {
  const size_t b = messages.dump().size() + items.dump().size() + id.size() + 64;
  std::lock_guard lock(m_);
  if (auto it = index_.find(id); it != index_.end()) erase(it->second);
  lru_.push_front({id, std::move(messages), std::move(items), b});
  index_[id] = lru_.begin();
  for (const auto& item : lru_.front().items) item_index_[item.value("id", "")] = lru_.begin();
  bytes_ += b;
  while (bytes_ > max_bytes_ && lru_.size() > 1) erase(std::prev(lru_.end()));
}

std::optional<nlohmann::ordered_json> ResponseStore::get(const std::string& id) {
  std::lock_guard lock(m_);
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->messages;
}

std::optional<nlohmann::ordered_json> ResponseStore::item(const std::string& item_id) {
  std::lock_guard lock(m_);
  auto it = item_index_.find(item_id);
  if (it == item_index_.end()) return std::nullopt;
  for (const auto& item : it->second->items)
    if (item.value("id", "") == item_id) return item;
  return std::nullopt;
}

}  // namespace tern::server
