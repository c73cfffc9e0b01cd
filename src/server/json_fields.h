// Typed reads of a request body's fields, each failure a 400 naming the
// field and what it should be. A null field counts as absent (clients send
// null for what they leave unset).
#pragma once

#include <nlohmann/json.hpp>

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "server/api_error.h"

namespace tern::server {

using ojson = nlohmann::ordered_json;

class Fields {
 public:
  Fields(const ojson& obj, std::string where);     // obj must be an object
  const ojson* get(const std::string& key) const;  // nullptr when absent or null
  std::optional<std::string> string(const std::string& key) const;
  std::optional<bool> boolean(const std::string& key) const;
  std::optional<double> number(const std::string& key, double lo, double hi) const;
  std::optional<int64_t> integer(const std::string& key, int64_t lo, int64_t hi) const;
  const ojson* array(const std::string& key) const;
  const ojson* object(const std::string& key) const;
  // The field's name as the error should show it ("messages[2].role").
  std::string name(const std::string& key) const;

 private:
  const ojson& obj_;
  std::string where_;
};

// "where[i]": an element's name in error messages.
std::string element(const std::string& where, size_t i);

// Text given as a string, or as a list of parts whose "type" is one of
// `types` (their "text" joined); other parts (images, audio) are a 400.
std::string parts_text(const ojson& v, const std::string& where,
                       std::initializer_list<std::string_view> types);

}  // namespace tern::server
