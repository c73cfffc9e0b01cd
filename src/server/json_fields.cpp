#include "server/json_fields.h"

#include <algorithm>
#include <cmath>

namespace tern::server {

Fields::Fields(const ojson& obj, std::string where) : obj_(obj), where_(std::move(where)) {
  if (!obj.is_object())
    bad_request(where_, "{} must be an object", where_.empty() ? "the request body" : where_);
}

std::string Fields::name(const std::string& key) const {
  return where_.empty() ? key : where_ + "." + key;
}

const ojson* Fields::get(const std::string& key) const {
  auto it = obj_.find(key);
  return it == obj_.end() || it->is_null() ? nullptr : &*it;
}

std::optional<std::string> Fields::string(const std::string& key) const {
  const ojson* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad_request(name(key), "'{}' must be a string", name(key));
  return v->get<std::string>();
}

std::optional<bool> Fields::boolean(const std::string& key) const {
  const ojson* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad_request(name(key), "'{}' must be a boolean", name(key));
  return v->get<bool>();
}

std::optional<double> Fields::number(const std::string& key, double lo, double hi) const {
  const ojson* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad_request(name(key), "'{}' must be a number", name(key));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    bad_request(name(key), "'{}' must be between {} and {}, got {}", name(key), lo, hi, v->dump());
  return x;
}

std::optional<int64_t> Fields::integer(const std::string& key, int64_t lo, int64_t hi) const {
  const ojson* v = get(key);
  if (!v) return std::nullopt;
  const bool whole = v->is_number_integer() ||
                     (v->is_number_float() && std::trunc(v->get<double>()) == v->get<double>() &&
                      std::abs(v->get<double>()) < 9e15);
  if (!whole) bad_request(name(key), "'{}' must be an integer", name(key));
  const int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)
                        ? INT64_MAX
                        : (v->is_number_float() ? int64_t(v->get<double>()) : v->get<int64_t>());
  if (x < lo || x > hi)
    bad_request(name(key), "'{}' must be between {} and {}, got {}", name(key), lo, hi, v->dump());
  return x;
}

const ojson* Fields::array(const std::string& key) const {
  const ojson* v = get(key);
  if (v && !v->is_array()) bad_request(name(key), "'{}' must be an array", name(key));
  return v;
}

const ojson* Fields::object(const std::string& key) const {
  const ojson* v = get(key);
  if (v && !v->is_object()) bad_request(name(key), "'{}' must be an object", name(key));
  return v;
}

std::string element(const std::string& where, size_t i) {
  return where + "[" + std::to_string(i) + "]";
}

std::string parts_text(const ojson& v, const std::string& where,
                       std::initializer_list<std::string_view> types) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) bad_request(where, "'{}' must be a string or a list of parts", where);
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    const Fields part(v[i], element(where, i));
    const std::string type = part.string("type").value_or("");
    if (std::find(types.begin(), types.end(), type) == types.end())
      bad_request(part.name("type"),
                  "'{}': content of type '{}' is not supported here (this model takes text)",
                  part.name("type"), type);
    const auto text = part.string("text");
    if (!text) bad_request(part.name("text"), "'{}' is required", part.name("text"));
    out += *text;
  }
  return out;
}

}  // namespace tern::server
