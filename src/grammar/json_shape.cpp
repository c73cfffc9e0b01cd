#include "grammar/json_shape.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "core/error.h"
#include "grammar/regex.h"

namespace tern::grammar {
namespace {

constexpr int kMaxDepth = 100;

const std::set<std::string>& annotations() {
  static const std::set<std::string> s = {
      "title", "description", "default",          "examples",        "$schema",
      "$id",   "$comment",    "deprecated",       "readOnly",        "writeOnly",
      "$defs", "definitions", "contentMediaType", "contentEncoding", "$anchor"};
  return s;
}

const std::set<std::string>& supported() {
  static const std::set<std::string> s = {"type",
                                          "enum",
                                          "const",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "items",
                                          "prefixItems",
                                          "minItems",
                                          "maxItems",
                                          "anyOf",
                                          "oneOf",
                                          "allOf",
                                          "$ref",
                                          "minLength",
                                          "maxLength",
                                          "pattern",
                                          "format",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "uniqueItems",
                                          "multipleOf",
                                          "propertyNames",
                                          "minProperties",
                                          "maxProperties"};
  return s;
}

uint8_t type_bits(const std::string& t) {
  if (t == "null") return kNull;
  if (t == "boolean") return kBoolean;
  if (t == "integer") return kInteger;
  if (t == "number") return kInteger | kFraction;
  if (t == "string") return kString;
  if (t == "array") return kArray;
  if (t == "object") return kObject;
  return 0;
}

uint8_t type_of(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null:
      return kNull;
    case ojson::value_t::boolean:
      return kBoolean;
    case ojson::value_t::number_integer:
    case ojson::value_t::number_unsigned:
      return kInteger;
    case ojson::value_t::number_float: {
      const double d = v.get<double>();
      return std::isfinite(d) && std::floor(d) == d ? kInteger : kFraction;
    }
    case ojson::value_t::string:
      return kString;
    case ojson::value_t::array:
      return kArray;
    case ojson::value_t::object:
      return kObject;
    default:
      return 0;
  }
}

std::string pointer_step(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

size_t codepoints(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (uint8_t(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace

Sub both(const Sub& a, const Sub& b) {
  Sub out = a;
  for (const ojson* s : b.all)
    if (std::find(out.all.begin(), out.all.end(), s) == out.all.end()) out.all.push_back(s);
  if (std::find(out.all.begin(), out.all.end(), SchemaDocument::false_schema()) != out.all.end())
    return Sub{{SchemaDocument::false_schema()}};
  return out;
}

bool Shape::unconstrained() const {
  return types == kAllTypes && !values && strings.min_length == 0 && strings.max_length < 0 &&
         strings.patterns.empty() && strings.formats.empty() && numbers.empty() && prefix.empty() &&
         items.any() && min_items == 0 && max_items < 0 && properties.empty() && required.empty() &&
         additional.any() && names.any() && min_properties == 0 && max_properties < 0 &&
         groups.empty();
}

const Sub* Shape::property(const std::string& name) const {
  for (const auto& [n, sub] : properties)
    if (n == name) return &sub;
  return nullptr;
}

SchemaDocument::SchemaDocument(const ojson& root, bool lenient) : root_(root), lenient_(lenient) {
  paths_[&root] = "#";
}

const ojson* SchemaDocument::false_schema() {
  static const ojson f = false;
  return &f;
}

std::string SchemaDocument::path(const ojson* s) const {
  auto it = paths_.find(s);
  return it == paths_.end() ? "#" : it->second;
}

void SchemaDocument::name(const ojson* child, const ojson* parent, const std::string& step) {
  paths_.emplace(child, path(parent) + "/" + step);
}

const ojson* SchemaDocument::resolve(const std::string& ref, const ojson* from) {
  if (ref.empty() || ref[0] != '#') {
    refuse("$ref", path(from),
           fmt::format("JSON Schema: $ref '{}' at {}: only local references (#/...) are supported",
                       ref, path(from)));
    return nullptr;
  }
  std::string pointer;  // percent-decoded
  for (size_t i = 1; i < ref.size(); ++i) {
    if (ref[i] == '%' && i + 2 < ref.size() && std::isxdigit(uint8_t(ref[i + 1])) &&
        std::isxdigit(uint8_t(ref[i + 2]))) {
      pointer += char(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      pointer += ref[i];
    }
  }
  const ojson* cur = &root_;
  if (!pointer.empty() && pointer[0] != '/') {
    refuse("$ref", path(from),
           fmt::format("JSON Schema: $ref '{}' at {}: anchors are not supported", ref, path(from)));
    return nullptr;
  }
  size_t pos = 1;
  while (pos <= pointer.size() && !pointer.empty()) {
    size_t end = pointer.find('/', pos);
    if (end == std::string::npos) end = pointer.size();
    std::string step;
    for (size_t i = pos; i < end; ++i) {
      if (pointer[i] == '~' && i + 1 < end && (pointer[i + 1] == '0' || pointer[i + 1] == '1'))
        step += pointer[++i] == '0' ? '~' : '/';
      else
        step += pointer[i];
    }
    if (cur->is_object() && cur->contains(step)) {
      cur = &(*cur)[step];
    } else if (cur->is_array() && !step.empty() &&
               std::all_of(step.begin(), step.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
               step.size() < 10 && std::stoul(step) < cur->size()) {
      cur = &(*cur)[std::stoul(step)];
    } else {
      refuse("$ref", path(from),
             fmt::format("JSON Schema: $ref '{}' at {} does not resolve", ref, path(from)));
      return nullptr;
    }
    pos = end + 1;
  }
  paths_.emplace(cur, ref);
  return cur;
}

Shape SchemaDocument::shape(const Sub& s) {
  Shape sh;
  sh.path = s.all.empty() ? "#" : path(s.all[0]);
  for (const ojson* m : s.all) read(sh, m, 0);
  return sh;
}

void SchemaDocument::refuse(const std::string& keyword, const std::string& path,
                            const std::string& message) {
  if (!lenient_) fail("{}", message);
  for (const Dropped& d : dropped_)
    if (d.keyword == keyword && d.path == path) return;
  dropped_.push_back({keyword, path, message});
}

void SchemaDocument::read(Shape& sh, const ojson* s, int depth) {
  const std::string where = path(s);
  if (depth > kMaxDepth)
    return refuse(
        "allOf", where,
        fmt::format("JSON Schema at {}: allOf/$ref nest deeper than {}", where, kMaxDepth));
  if (s->is_boolean()) {
    if (!s->get<bool>()) sh.types = 0;
    return;
  }
  if (!s->is_object())
    return refuse("schema", where,
                  fmt::format("JSON Schema at {}: a schema must be an object or a boolean", where));
  // Lenient: a dropped patternProperties leaves any member allowed (dropping may only widen).
  bool any_member = false;
  for (const auto& [key, value] : s->items())
    if (!supported().count(key) && !annotations().count(key) && !key.starts_with("x-")) {
      refuse(key, where, fmt::format("JSON Schema: unsupported keyword '{}' at {}", key, where));
      any_member = any_member || key == "patternProperties";
    }
  auto count = [&](const char* key) -> std::optional<uint64_t> {
    if (!s->contains(key)) return std::nullopt;
    const ojson& v = (*s)[key];
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
      refuse(key, where,
             fmt::format("JSON Schema: '{}' at {} must be a non-negative integer", key, where));
      return std::nullopt;
    }
    const uint64_t limit = lenient_ ? kMaxLenientCount : kMaxCount;
    if (v.get<uint64_t>() > limit) {
      refuse(key, where,
             fmt::format("JSON Schema: '{}' {} at {} is above tern's limit of {}", key,
                         v.get<uint64_t>(), where, limit));
      return std::nullopt;
    }
    return v.get<uint64_t>();
  };
  auto schemas = [&](const char* key) {
    const ojson& v = (*s)[key];
    std::vector<const ojson*> out;
    if (!v.is_array() || v.empty()) {
      refuse(
          key, where,
          fmt::format("JSON Schema: '{}' at {} must be a non-empty array of schemas", key, where));
      return out;
    }
    for (size_t i = 0; i < v.size(); ++i) {
      name(&v[i], s, std::string(key) + "/" + std::to_string(i));
      out.push_back(&v[i]);
    }
    return out;
  };
  Shape own;
  own.path = where;
  if (s->contains("type")) {
    const ojson& t = (*s)["type"];
    uint8_t bits = 0;
    bool ok = t.is_string() || (t.is_array() && !t.empty());
    for (const ojson& x : t.is_array() ? t : ojson::array({t})) {
      uint8_t b = x.is_string() ? type_bits(x.get<std::string>()) : 0;
      ok = ok && b != 0;
      bits |= b;
    }
    if (ok)
      own.types = bits;
    else
      refuse("type", where,
             fmt::format("JSON Schema: 'type' at {} must be a type name (null, boolean, integer, "
                         "number, string, array, object) or a list of them",
                         where));
  }
  if (s->contains("enum")) {
    if ((*s)["enum"].is_array())
      own.values = std::vector<ojson>((*s)["enum"].begin(), (*s)["enum"].end());
    else
      refuse("enum", where, fmt::format("JSON Schema: 'enum' at {} must be an array", where));
  }
  if (s->contains("const")) {
    std::vector<ojson> c = {(*s)["const"]};
    own.values = own.values ? merge_values(*own.values, c) : c;
  }
  if (auto v = count("minLength")) own.strings.min_length = *v;
  if (auto v = count("maxLength")) own.strings.max_length = int64_t(*v);
  if (s->contains("pattern")) read_pattern((*s)["pattern"], where, own.strings);
  if (s->contains("format")) {
    const ojson& f = (*s)["format"];
    if (!f.is_string())
      refuse("format", where, fmt::format("JSON Schema: 'format' at {} must be a string", where));
    else if (!supported_format(f.get<std::string>()))
      refuse("format", where,
             fmt::format("JSON Schema: format '{}' at {} is not supported (tern enforces {})",
                         f.get<std::string>(), where, kFormats));
    else
      own.strings.formats.push_back(f.get<std::string>());
  }
  read_numbers(*s, where, own.numbers);
  if (s->contains("uniqueItems") && !(*s)["uniqueItems"].is_boolean())
    refuse("uniqueItems", where,
           fmt::format("JSON Schema: 'uniqueItems' at {} must be a boolean", where));
  if (s->contains("prefixItems"))
    for (const ojson* p : schemas("prefixItems")) own.prefix.push_back(Sub{{p}});
  if (s->contains("items")) {
    const ojson& it = (*s)["items"];
    if (it.is_array()) {
      refuse("items", where,
             fmt::format("JSON Schema: 'items' at {} is an array (draft 4 tuples); use prefixItems",
                         where));
    } else {
      name(&it, s, "items");
      own.items = Sub{{&it}};
    }
  }
  if (auto v = count("minItems")) own.min_items = *v;
  if (auto v = count("maxItems")) own.max_items = int64_t(*v);
  read_object(own, *s);
  if (any_member) own.additional = Sub{}, own.additional_given = true;
  for (const char* key : {"anyOf", "oneOf"})
    if (s->contains(key))
      if (auto branches = schemas(key); !branches.empty())
        own.groups.push_back({std::move(branches), key[0] == 'o', where + "/" + key});
  sh = merge(sh, own);
  if (s->contains("$ref")) {
    const ojson& ref = (*s)["$ref"];
    if (const ojson* target = ref.is_string() ? resolve(ref.get<std::string>(), s) : nullptr) {
      if (std::find(resolving_.begin(), resolving_.end(), target) != resolving_.end())
        return refuse("$ref", where,
                      fmt::format("JSON Schema: $ref '{}' at {} refers back to itself with nothing "
                                  "in between",
                                  ref.get<std::string>(), where));
      resolving_.push_back(target);
      read(sh, target, depth + 1);
      resolving_.pop_back();
    } else if (!ref.is_string()) {
      refuse("$ref", where, fmt::format("JSON Schema: '$ref' at {} must be a string", where));
    }
  }
  if (s->contains("allOf"))
    for (const ojson* branch : schemas("allOf")) read(sh, branch, depth + 1);
}

void SchemaDocument::read_pattern(const ojson& p, const std::string& where, StringRules& rules) {
  if (!p.is_string())
    return refuse("pattern", where,
                  fmt::format("JSON Schema: 'pattern' at {} must be a string", where));
  try {
    language(p.get<std::string>(), false);  // refuse a bad pattern here, naming its place
  } catch (const Error& e) {
    return refuse("pattern", where, fmt::format("JSON Schema at {}: {}", where, e.what()));
  }
  rules.patterns.push_back(p.get<std::string>());
}

void SchemaDocument::read_numbers(const ojson& s, const std::string& where, NumberBounds& out) {
  for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
    if (!s.contains(key)) continue;
    const ojson& v = s[key];
    if (v.is_boolean()) {
      refuse(key, where,
             fmt::format("JSON Schema: boolean '{}' at {} (draft 4) is not supported; give the "
                         "bound itself",
                         key, where));
      continue;
    }
    if (!v.is_number() || !std::isfinite(v.get<double>())) {
      refuse(key, where,
             fmt::format("JSON Schema: '{}' at {} must be a finite number", key, where));
      continue;
    }
    const std::string k = key;
    const bool lower = k == "minimum" || k == "exclusiveMinimum";
    Bound b{v, k[0] == 'e'};
    std::optional<Bound>& side = lower ? out.lo : out.hi;
    side = side ? tighter(*side, b, lower) : b;
  }
  if (s.contains("multipleOf")) {
    const ojson& m = s["multipleOf"];
    const bool whole = m.is_number_unsigned() || (m.is_number_integer() && m.get<int64_t>() > 0);
    if (whole && m.get<uint64_t>() >= 1 && m.get<uint64_t>() <= kMaxMultipleOf)
      out.multiple_of = m.get<uint64_t>();
    else
      refuse("multipleOf", where,
             fmt::format("JSON Schema: multipleOf {} at {} is not supported (tern enforces integer "
                         "divisors from 1 to {})",
                         m.dump(), where, kMaxMultipleOf));
  }
}

void SchemaDocument::read_object(Shape& own, const ojson& s) {
  const std::string where = own.path;
  if (s.contains("properties")) {
    const ojson& props = s["properties"];
    if (!props.is_object())
      refuse("properties", where,
             fmt::format("JSON Schema: 'properties' at {} must be an object", where));
    else
      for (const auto& [pname, schema] : props.items()) {
        name(&schema, &s, "properties/" + pointer_step(pname));
        own.properties.push_back({pname, Sub{{&schema}}});
      }
  }
  if (s.contains("additionalProperties")) {
    const ojson& ap = s["additionalProperties"];
    name(&ap, &s, "additionalProperties");
    own.additional = Sub{{&ap}};
    own.additional_given = true;
  }
  if (s.contains("propertyNames")) {
    const ojson& pn = s["propertyNames"];
    name(&pn, &s, "propertyNames");
    own.names = Sub{{&pn}};
  }
  if (s.contains("required")) {
    const ojson& req = s["required"];
    if (!req.is_array() ||
        !std::all_of(req.begin(), req.end(), [](const ojson& x) { return x.is_string(); }))
      refuse("required", where,
             fmt::format("JSON Schema: 'required' at {} must be an array of strings", where));
    else
      for (const ojson& r : req) own.required.push_back(r.get<std::string>());
  }
  for (const char* key : {"minProperties", "maxProperties"}) {
    if (!s.contains(key)) continue;
    const ojson& v = s[key];
    const bool ok = v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
    if (!ok || v.get<uint64_t>() > kMaxPropertyCount) {
      refuse(key, where,
             fmt::format("JSON Schema: '{}' {} at {} is not supported (tern enforces 0 to {})", key,
                         v.dump(), where, kMaxPropertyCount));
      continue;
    }
    if (key[1] == 'i')
      own.min_properties = v.get<uint64_t>();
    else
      own.max_properties = v.get<int64_t>();
  }
}

Shape SchemaDocument::merge(const Shape& a, const Shape& b) {
  Shape r = a;
  r.types &= b.types;
  if (b.values) r.values = r.values ? merge_values(*r.values, *b.values) : *b.values;
  r.strings.min_length = std::max(a.strings.min_length, b.strings.min_length);
  if (b.strings.max_length >= 0)
    r.strings.max_length = a.strings.max_length < 0
                               ? b.strings.max_length
                               : std::min(a.strings.max_length, b.strings.max_length);
  r.strings.patterns.insert(r.strings.patterns.end(), b.strings.patterns.begin(),
                            b.strings.patterns.end());
  r.strings.formats.insert(r.strings.formats.end(), b.strings.formats.begin(),
                           b.strings.formats.end());
  if (b.numbers.lo)
    r.numbers.lo = a.numbers.lo ? tighter(*a.numbers.lo, *b.numbers.lo, true) : b.numbers.lo;
  if (b.numbers.hi)
    r.numbers.hi = a.numbers.hi ? tighter(*a.numbers.hi, *b.numbers.hi, false) : b.numbers.hi;
  if (b.numbers.multiple_of)
    r.numbers.multiple_of = a.numbers.multiple_of
                                ? std::lcm(a.numbers.multiple_of, b.numbers.multiple_of)
                                : b.numbers.multiple_of;
  // Items: position i of the result is both sides' schema for position i.
  if (!b.prefix.empty() || !b.items.any()) {
    r.prefix.clear();
    for (size_t i = 0; i < std::max(a.prefix.size(), b.prefix.size()); ++i)
      r.prefix.push_back(both(i < a.prefix.size() ? a.prefix[i] : a.items,
                              i < b.prefix.size() ? b.prefix[i] : b.items));
    r.items = both(a.items, b.items);
  }
  r.min_items = std::max(a.min_items, b.min_items);
  if (b.max_items >= 0)
    r.max_items = a.max_items < 0 ? b.max_items : std::min(a.max_items, b.max_items);
  // Properties: a name one side does not list falls under its additionalProperties.
  if (!b.properties.empty() || !b.additional.any()) {
    r.properties.clear();
    for (const auto& [n, sub] : a.properties) {
      const Sub* other = b.property(n);
      r.properties.push_back({n, both(sub, other ? *other : b.additional)});
    }
    for (const auto& [n, sub] : b.properties)
      if (!a.property(n)) r.properties.push_back({n, both(a.additional, sub)});
    r.additional = both(a.additional, b.additional);
  }
  r.additional_given = a.additional_given || b.additional_given;
  r.names = both(a.names, b.names);
  r.min_properties = std::max(a.min_properties, b.min_properties);
  if (b.max_properties >= 0)
    r.max_properties =
        a.max_properties < 0 ? b.max_properties : std::min(a.max_properties, b.max_properties);
  for (const std::string& n : b.required)
    if (std::find(r.required.begin(), r.required.end(), n) == r.required.end())
      r.required.push_back(n);
  r.groups.insert(r.groups.end(), b.groups.begin(), b.groups.end());
  return r;
}

std::vector<ojson> SchemaDocument::merge_values(const std::vector<ojson>& a,
                                                const std::vector<ojson>& b) {
  std::vector<ojson> out;
  for (const ojson& v : a)
    if (std::find(b.begin(), b.end(), v) != b.end()) out.push_back(v);
  return out;
}

const CharFsa& SchemaDocument::language(const std::string& pattern, bool format) {
  auto key = std::make_pair(pattern, format);
  auto it = languages_.find(key);
  if (it == languages_.end())
    it = languages_.emplace(key, format ? format_language(pattern) : pattern_language(pattern))
             .first;
  return it->second;
}

bool SchemaDocument::check(const Shape& s, const ojson& v, int depth) {
  if (depth > kMaxDepth) return false;
  const uint8_t t = type_of(v);
  if (!(s.types & t)) return false;
  if (s.values && std::find(s.values->begin(), s.values->end(), v) == s.values->end()) return false;
  if (t == kString) {
    const std::string& str = v.get_ref<const std::string&>();
    const size_t n = codepoints(str);
    if (n < s.strings.min_length || (s.strings.max_length >= 0 && n > size_t(s.strings.max_length)))
      return false;
    for (const std::string& p : s.strings.patterns)
      if (!fsa_accepts(language(p, false), str)) return false;
    for (const std::string& f : s.strings.formats)
      if (!fsa_accepts(language(f, true), str)) return false;
  } else if (t == kInteger || t == kFraction) {
    if (!within(s.numbers, v)) return false;
  } else if (t == kArray) {
    if (v.size() < s.min_items || (s.max_items >= 0 && v.size() > size_t(s.max_items)))
      return false;
    for (size_t i = 0; i < v.size(); ++i)
      if (!check(shape(i < s.prefix.size() ? s.prefix[i] : s.items), v[i], depth + 1)) return false;
  } else if (t == kObject) {
    if (v.size() < s.min_properties ||
        (s.max_properties >= 0 && v.size() > size_t(s.max_properties)))
      return false;
    for (const std::string& r : s.required)
      if (!v.contains(r)) return false;
    const Shape names = shape(s.names);
    for (const auto& [k, x] : v.items()) {
      const Sub* p = s.property(k);
      if (!check(shape(p ? *p : s.additional), x, depth + 1) || !check(names, ojson(k), depth + 1))
        return false;
    }
  }
  for (const Group& g : s.groups) {
    size_t matched = 0;
    for (const ojson* b : g.branches) matched += check(shape(b), v, depth + 1);
    if (matched == 0 || (g.one_of && matched > 1)) return false;
  }
  return true;
}

namespace {

// The bits of the types a shape can take; enum values restrict them.
uint8_t possible_types(const Shape& s) {
  if (!s.values) return s.types;
  uint8_t t = 0;
  for (const ojson& v : *s.values) t |= type_of(v);
  return s.types & t;
}

}  // namespace

bool SchemaDocument::check_disjoint(const Group& g) {
  // Two branches are apart when no value of one's enumeration passes the
  // other, their types differ, or an object property one requires cannot
  // take a value the other allows there.
  auto apart = [&](Shape& x, Shape& y) {
    if ((possible_types(x) & possible_types(y)) == 0) return true;
    for (int side = 0; side < 2; ++side, std::swap(x, y)) {
      if (x.values && std::none_of(x.values->begin(), x.values->end(),
                                   [&](const ojson& v) { return check(y, v); }))
        return true;
      if ((possible_types(x) & possible_types(y)) != kObject) continue;
      for (const std::string& r : x.required) {
        const Sub* px = x.property(r);
        const Sub* py = y.property(r);
        Shape sx = shape(px ? *px : x.additional), sy = shape(py ? *py : y.additional);
        if (sy.types == 0 ||
            (sx.values && std::none_of(sx.values->begin(), sx.values->end(),
                                       [&](const ojson& v) { return check(sy, v); })))
          return true;
      }
    }
    return false;
  };
  for (size_t i = 0; i < g.branches.size(); ++i)
    for (size_t j = i + 1; j < g.branches.size(); ++j) {
      Shape a = shape(g.branches[i]), b = shape(g.branches[j]);
      if (!apart(a, b)) {
        refuse("oneOf", g.path,
               fmt::format("JSON Schema: oneOf at {}: branches {} and {} may both match one value; "
                           "tern needs oneOf branches it can tell apart (different types, a "
                           "required property with different const/enum values, or "
                           "enumerations); use anyOf if a value may match both",
                           g.path, i, j));
        return false;
      }
    }
  return true;
}

}  // namespace tern::grammar
