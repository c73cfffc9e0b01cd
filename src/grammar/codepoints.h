// Sets of Unicode code points (character classes of GBNF and regular
// expressions) and their UTF-8 encodings as grammar expressions. The grammar
// runs on bytes; a class becomes the alternatives of its members' encodings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace tern::grammar {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;

struct CpRange {
  uint32_t lo, hi;
  bool operator==(const CpRange&) const = default;
};

// Sorted, disjoint, non-adjacent ranges of code points.
class CodepointSet {
 public:
  CodepointSet() = default;
  static CodepointSet range(uint32_t lo, uint32_t hi);
  static CodepointSet all() { return range(0, kMaxCodepoint); }
  void add(uint32_t lo, uint32_t hi);
  void add(const CodepointSet& o);
  CodepointSet complement() const;  // within [0, kMaxCodepoint]
  CodepointSet intersect(const CodepointSet& o) const;
  CodepointSet minus(const CodepointSet& o) const { return intersect(o.complement()); }
  bool contains(uint32_t cp) const;
  bool empty() const { return ranges_.empty(); }
  const std::vector<CpRange>& ranges() const { return ranges_; }
  bool operator==(const CodepointSet&) const = default;

 private:
  std::vector<CpRange> ranges_;
};

// Appends the UTF-8 encoding of `cp`.
void append_utf8(uint32_t cp, std::string& out);
// Decodes one UTF-8 character at s[pos], advancing pos; -1 for invalid UTF-8.
int64_t decode_utf8(std::string_view s, size_t& pos);

// The value of a hexadecimal digit, or -1.
inline int hex_value(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

// The character of a letter escape (\n \r \t \f \v), or -1.
inline int letter_escape(char c) {
  switch (c) {
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    case 'f':
      return '\f';
    case 'v':
      return '\v';
    default:
      return -1;
  }
}

// The UTF-8 encodings of the members of `set` (surrogates never match).
ExprPtr utf8_class(const CodepointSet& set);

}  // namespace tern::grammar
