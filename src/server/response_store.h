// Responses kept for previous_response_id (the OpenAI Responses API's
// `store`): each response's whole conversation in chat-template terms (the
// input it was given, its predecessors' included, and its output), so a
// follow-up naming it continues without re-sending anything; and its output
// items by id, for input items of type item_reference. Bounded: the least
// recently used go first past `max_bytes`. Thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace tern::server {

class ResponseStore {
 public:
  explicit ResponseStore(size_t max_bytes = size_t(256) << 20) : max_bytes_(max_bytes) {}
  // items: the response's output items, each with its "id".
  void put(const std::string& id, nlohmann::ordered_json messages, nlohmann::ordered_json items);
  std::optional<nlohmann::ordered_json> get(const std::string& id);  // refreshes it
  std::optional<nlohmann::ordered_json> item(const std::string& item_id);

 private:
  struct Entry {
    std::string id;
    nlohmann::ordered_json messages, items;
    size_t bytes;
  };
  using Iter = std::list<Entry>::iterator;
  void erase(Iter it);
  size_t max_bytes_, bytes_ = 0;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, Iter> index_, item_index_;
  std::mutex m_;
};

}  // namespace tern::server
