// Stop strings over streamed text: text is released only once it cannot be
// the start of a stop string, so a stop string split across tokens never
// reaches the output; at a match, the text before it is released and the
// match reported.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tern {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Feeds text; returns what is certain not to be part of a stop string.
  std::string push(std::string_view text);
  // True once a stop string was seen (push then returns only the text before it).
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the stop string seen
  // End of generation without a match: what was held.
  std::string finish();

 private:
  std::vector<std::string> stops_;
  std::string held_, matched_;
  bool stopped_ = false;
};

}  // namespace tern
