#include "engine/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace tern {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return {};
  held_.append(text);
  if (stops_.empty()) return std::exchange(held_, {});
  size_t first = std::string::npos;
  for (const std::string& s : stops_)
    if (const size_t at = held_.find(s); at < first) first = at, matched_ = s;
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Keep the longest tail that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_)
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k)
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::finish() {
  return stopped_ ? std::string() : std::exchange(held_, {});
}

}  // namespace tern
