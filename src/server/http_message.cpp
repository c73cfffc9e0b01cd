#include "server/http_message.h"

#include <algorithm>
#include <cctype>

namespace tern::server {

namespace {

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(uint8_t(x)) == std::tolower(uint8_t(y));
         });
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (same_name(n, name)) return v;
  return "";
}

bool HttpRequest::has_header(std::string_view name) const {
  return std::any_of(headers.begin(), headers.end(),
                     [&](const auto& h) { return same_name(h.first, name); });
}

}  // namespace tern::server
