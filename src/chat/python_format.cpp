#include "chat/python_format.h"

#include <utf8proc.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "tokenizer/utf8.h"

namespace tern::py {
namespace {

using ojson = nlohmann::ordered_json;

// str.isspace(): bidirectional class WS, B or S, or category Zs.
bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// str.isprintable() for one character.
bool is_printable(char32_t c) {
  if (c == ' ') return true;
  switch (utf8proc_category(utf8proc_int32_t(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string str_repr(std::string_view s) {
  char quote =
      s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    char32_t c = utf8::next(s, i);
    if (c == char32_t(quote) || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (is_printable(c)) {
      utf8::append(out, c);
    } else {
      out += c <= 0xFF     ? fmt::format("\\x{:02x}", uint32_t(c))
             : c <= 0xFFFF ? fmt::format("\\u{:04x}", uint32_t(c))
                           : fmt::format("\\U{:08x}", uint32_t(c));
    }
  }
  return out + quote;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (uint8_t(c) < 0x20)
          out += fmt::format("\\u{:04x}", unsigned(c));
        else
          out += c;
    }
  }
  return out + '"';
}

// Shared by str() (repr inside containers) and json_dumps: they differ only in
// how strings and the three constants are written.
std::string format(const ojson& v, bool as_json, bool top) {
  switch (v.type()) {
    case ojson::value_t::null:
      return as_json ? "null" : "None";
    case ojson::value_t::boolean:
      return v.get<bool>() ? (as_json ? "true" : "True") : (as_json ? "false" : "False");
    case ojson::value_t::number_integer:
      return std::to_string(v.get<int64_t>());
    case ojson::value_t::number_unsigned:
      return std::to_string(v.get<uint64_t>());
    case ojson::value_t::number_float: {
      double d = v.get<double>();
      if (std::isnan(d)) return "NaN";
      if (std::isinf(d))
        return d > 0 ? (as_json ? "Infinity" : "inf") : (as_json ? "-Infinity" : "-inf");
      return float_repr(d);
    }
    case ojson::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      return as_json ? json_string(s) : top ? s : str_repr(s);
    }
    case ojson::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) out += ", ";
        out += format(v[i], as_json, false);
      }
      return out + "]";
    }
    case ojson::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, val] : v.items()) {
        if (!first) out += ", ";
        out += as_json ? json_string(k) : str_repr(k);
        out += ": ";
        out += format(val, as_json, false);
        first = false;
      }
      return out + "}";
    }
    default:
      return as_json ? "null" : "None";  // binary and discarded values do not come from JSON text
  }
}

}  // namespace

std::string_view strip(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e) {
    size_t i = b;
    if (!is_space(utf8::next(s, i))) break;
    b = i;
  }
  while (e > b) {
    size_t start = e - 1;
    while (start > b && (uint8_t(s[start]) & 0xC0) == 0x80) --start;
    size_t i = start;
    if (!is_space(utf8::next(s, i))) break;
    e = start;
  }
  return s.substr(b, e - b);
}

std::string str(const ojson& v) {
  return format(v, false, true);
}

std::string json_dumps(const ojson& v) {
  return format(v, true, true);
}

std::string float_repr(double value) {
  // Shortest round-trip digits, then Python's float_repr_style rules:
  // exponent form when the decimal exponent is < -4 or >= 16.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  std::string_view sci(buf, size_t(res.ptr - buf));
  size_t e_pos = sci.find('e');
  int exp = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  bool neg = sci[0] == '-';
  std::string digits;
  for (char c : sci.substr(neg ? 1 : 0, e_pos - (neg ? 1 : 0)))
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  std::string_view d(digits);
  if (exp < -4 || exp >= 16) {
    out += d.substr(0, 1);
    if (d.size() > 1) out.append(".").append(d.substr(1));
    out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
  } else if (exp < 0) {
    out.append("0.").append(size_t(-exp - 1), '0').append(d);
  } else if (size_t(exp) + 1 >= d.size()) {
    out.append(d).append(size_t(exp) + 1 - d.size(), '0').append(".0");
  } else {
    out.append(d.substr(0, size_t(exp) + 1)).append(".").append(d.substr(size_t(exp) + 1));
  }
  return out;
}

}  // namespace tern::py
