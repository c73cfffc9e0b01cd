#include "grammar/regex.h"

#include <string>

#include "core/error.h"

namespace tern::grammar {
namespace {

constexpr int kMaxDepth = 100;
constexpr int kMaxCount = 100000;

struct Re {
  enum Kind { chars, concat, alt, repeat, start, end } kind = concat;
  CodepointSet set{};
  std::vector<Re> items{};
  int min = 0, max = 0;
};

const CodepointSet& ascii() {
  static const CodepointSet s = CodepointSet::range(0, 0x7F);
  return s;
}

CodepointSet digit_set() {
  return CodepointSet::range('0', '9');
}

CodepointSet word_set() {
  CodepointSet s = CodepointSet::range('a', 'z');
  s.add('A', 'Z');
  s.add('0', '9');
  s.add('_', '_');
  return s;
}

// Whitespace as both ECMA-262 and Python's str.isspace() see it.
CodepointSet space_both() {
  CodepointSet s = CodepointSet::range('\t', '\r');
  for (uint32_t c : {0x20u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u})
    s.add(c, c);
  s.add(0x2000, 0x200A);
  return s;
}

// Whitespace as either sees it (Python adds U+001C..U+001F and U+0085, ECMA U+FEFF).
CodepointSet space_either() {
  CodepointSet s = space_both();
  s.add(0x1C, 0x1F);
  s.add(0x85, 0x85);
  s.add(0xFEFF, 0xFEFF);
  return s;
}

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Re parse() {
    Re r = disjunction(0);
    if (pos_ < s_.size()) error("unmatched ')'");
    return r;
  }

 private:
  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> f, Args&&... args) {
    fail("pattern '{}': {} (at offset {})", s_, fmt::format(f, std::forward<Args>(args)...), pos_);
  }
  bool more() const { return pos_ < s_.size(); }
  char peek() const { return more() ? s_[pos_] : '\0'; }

  Re disjunction(int depth) {
    if (depth > kMaxDepth) error("groups nest deeper than {}", kMaxDepth);
    Re r{Re::alt};
    r.items.push_back(alternative(depth));
    while (peek() == '|') {
      ++pos_;
      r.items.push_back(alternative(depth));
    }
    return r.items.size() == 1 ? std::move(r.items[0]) : r;
  }

  Re alternative(int depth) {
    Re r{Re::concat};
    while (more() && peek() != '|' && peek() != ')') {
      Re atom_re = atom(depth);
      if (atom_re.kind == Re::start || atom_re.kind == Re::end) {
        r.items.push_back(std::move(atom_re));
        continue;
      }
      r.items.push_back(quantified(std::move(atom_re)));
    }
    return r;
  }

  int number() {
    size_t start = pos_;
    int v = 0;
    while (more() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxCount) error("repetition count above {}", kMaxCount);
      ++pos_;
    }
    if (pos_ == start) error("a literal '{{' must be escaped as '\\{{'");
    return v;
  }

  Re quantified(Re item) {
    for (;;) {
      int min, max;
      char c = peek();
      if (c == '*') {
        min = 0, max = -1, ++pos_;
      } else if (c == '+') {
        min = 1, max = -1, ++pos_;
      } else if (c == '?') {
        min = 0, max = 1, ++pos_;
      } else if (c == '{') {
        ++pos_;
        min = max = number();
        if (peek() == ',') {
          ++pos_;
          max = peek() == '}' ? -1 : number();
        }
        if (peek() != '}') error("a literal '{{' must be escaped as '\\{{'");
        ++pos_;
        if (max >= 0 && max < min) error("repetition {{{},{}}} has max < min", min, max);
      } else {
        return item;
      }
      if (peek() == '?') ++pos_;  // lazy: the same strings
      Re r{Re::repeat};
      r.items.push_back(std::move(item));
      r.min = min, r.max = max;
      item = std::move(r);
    }
  }

  static Re chars_of(CodepointSet set) {
    Re r{Re::chars};
    r.set = std::move(set);
    return r;
  }

  Re atom(int depth) {
    char c = peek();
    switch (c) {
      case '^':
        ++pos_;
        return Re{Re::start};
      case '$':
        ++pos_;
        return Re{Re::end};
      case '.': {
        ++pos_;
        CodepointSet line_ends = CodepointSet::range('\n', '\n');
        line_ends.add('\r', '\r');
        line_ends.add(0x2028, 0x2029);
        return chars_of(CodepointSet::all().minus(line_ends));
      }
      case '(': {
        ++pos_;
        if (peek() == '?') {
          ++pos_;
          char k = peek();
          if (k == ':') {
            ++pos_;
          } else if (k == '<' && pos_ + 1 < s_.size() && s_[pos_ + 1] != '=' &&
                     s_[pos_ + 1] != '!') {
            size_t close = s_.find('>', pos_);
            if (close == std::string_view::npos) error("unterminated group name");
            pos_ = close + 1;
          } else if (k == '=' || k == '!' || k == '<') {
            error("lookaround assertions are not supported");
          } else {
            error("group flags '(?{}' are not supported", k);
          }
        }
        Re inner = disjunction(depth + 1);
        if (peek() != ')') error("missing ')'");
        ++pos_;
        return inner;
      }
      case '[':
        return chars_of(char_class());
      case '\\':
        return escape_atom();
      case '*':
      case '+':
      case '?':
        error("'{}' without an item before it", c);
      case '{':
        error("a literal '{{' must be escaped as '\\{{'");
      default:
        break;
    }
    int64_t cp = decode_utf8(s_, pos_);
    if (cp < 0) error("invalid UTF-8");
    return chars_of(CodepointSet::range(uint32_t(cp), uint32_t(cp)));
  }

  // \d \w \s and their negations; true when `c` names one.
  bool shorthand(char c, CodepointSet& out, bool& ascii_only) {
    switch (c) {
      case 'd':
        out = digit_set();
        return true;
      case 'w':
        out = word_set();
        return true;
      case 's':
        out = space_both();
        return true;
      case 'D':
        out = ascii().minus(digit_set());
        ascii_only = true;
        return true;
      case 'W':
        out = ascii().minus(word_set());
        ascii_only = true;
        return true;
      case 'S':
        out = space_either().complement();
        return true;
      default:
        return false;
    }
  }

  Re escape_atom() {
    ++pos_;
    if (!more()) error("pattern ends with '\\'");
    char c = peek();
    CodepointSet set;
    bool ascii_only = false;
    if (shorthand(c, set, ascii_only)) {
      ++pos_;
      return chars_of(set);
    }
    if (c == 'b' || c == 'B') error("word boundaries (\\{}) are not supported", c);
    if (c >= '1' && c <= '9') error("backreferences are not supported");
    uint32_t cp = escaped_char(false);
    return chars_of(CodepointSet::range(cp, cp));
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i, ++pos_) {
      const int d = hex_value(peek());
      if (d < 0) error("expected {} hex digits", digits);
      v = v * 16 + uint32_t(d);
    }
    return v;
  }

  // The character after a backslash (pos_ at it), for escapes that are one character.
  uint32_t escaped_char(bool in_class) {
    char c = peek();
    ++pos_;
    if (int e = letter_escape(c); e >= 0) return uint32_t(e);
    switch (c) {
      case 'b':
        if (in_class) return '\b';
        break;
      case '0':
        if (peek() >= '0' && peek() <= '9') error("octal escapes are not supported");
        return 0;
      case 'x':
        return hex(2);
      case 'u': {
        if (peek() == '{') error("\\u{{...}} escapes are not supported");
        uint32_t v = hex(4);
        if (v >= 0xD800 && v <= 0xDFFF) error("surrogate escapes are not supported");
        return v;
      }
      default:
        break;
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
      error("escape '\\{}' is not supported", c);
    --pos_;
    int64_t cp = decode_utf8(s_, pos_);
    if (cp < 0) error("invalid UTF-8");
    return uint32_t(cp);
  }

  CodepointSet char_class() {
    const size_t start = pos_;
    ++pos_;
    bool negate = false, ascii_only = false;
    if (peek() == '^') negate = true, ++pos_;
    CodepointSet set;
    bool first = true;
    while (first || peek() != ']') {
      first = false;
      if (!more()) {
        pos_ = start;
        error("unterminated character class");
      }
      CodepointSet item;
      uint32_t lo;
      if (!class_atom(item, lo, ascii_only)) {
        set.add(item);
        continue;
      }
      if (peek() == '-' && pos_ + 1 < s_.size() && s_[pos_ + 1] != ']') {
        ++pos_;
        CodepointSet hi_set;
        uint32_t hi;
        if (!class_atom(hi_set, hi, ascii_only)) error("a class shorthand cannot end a range");
        if (hi < lo) error("character range is reversed");
        set.add(lo, hi);
      } else {
        set.add(lo, lo);
      }
    }
    ++pos_;
    if (!negate) return set;
    CodepointSet out = set.complement();
    return ascii_only ? out.intersect(ascii()) : out;
  }

  // One class member: a character (true, in cp) or a shorthand set (false).
  bool class_atom(CodepointSet& set, uint32_t& cp, bool& ascii_only) {
    if (peek() == '[' && pos_ + 1 < s_.size() && (s_[pos_ + 1] == ':' || s_[pos_ + 1] == '='))
      error("POSIX classes are not supported");
    if (peek() != '\\') {
      int64_t c = decode_utf8(s_, pos_);
      if (c < 0) error("invalid UTF-8");
      cp = uint32_t(c);
      return true;
    }
    ++pos_;
    if (!more()) error("pattern ends with '\\'");
    char c = peek();
    if (c == 'd' || c == 'w' || c == 'D' || c == 'W') ascii_only = true;
    if (shorthand(c, set, ascii_only)) {
      ++pos_;
      return false;
    }
    if (c == 'B') error("word boundaries (\\B) are not supported");
    cp = escaped_char(true);
    return true;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

// Builds r between `from` and `to` of a.
void build(const Re& r, CharFsa& a, int from, int to) {
  switch (r.kind) {
    case Re::chars:
      a.add_edges(from, r.set, to);
      return;
    case Re::start:
    case Re::end:
      fail("pattern: '^' is supported only at the start and '$' only at the end");
    case Re::concat: {
      int cur = from;
      for (size_t i = 0; i < r.items.size(); ++i) {
        int next = i + 1 == r.items.size() ? to : a.add_state();
        build(r.items[i], a, cur, next);
        cur = next;
      }
      if (r.items.empty()) a.add_eps(from, to);
      return;
    }
    case Re::alt:
      for (const Re& item : r.items) {
        int s = a.add_state();
        a.add_eps(from, s);
        build(item, a, s, to);
      }
      return;
    case Re::repeat: {
      int cur = from;
      for (int i = 0; i < r.min; ++i) {
        int next = a.add_state();
        build(r.items[0], a, cur, next);
        cur = next;
      }
      if (r.max < 0) {
        int loop = a.add_state(), back = a.add_state();
        a.add_eps(cur, loop);
        build(r.items[0], a, loop, back);
        a.add_eps(back, loop);
        a.add_eps(loop, to);
        return;
      }
      for (int i = r.min; i < r.max; ++i) {
        a.add_eps(cur, to);
        int next = a.add_state();
        build(r.items[0], a, cur, next);
        cur = next;
      }
      a.add_eps(cur, to);
      return;
    }
  }
}

}  // namespace

CharFsa pattern_language(std::string_view pattern) {
  Re re = Parser(pattern).parse();
  std::vector<Re> alts;
  if (re.kind == Re::alt)
    alts = std::move(re.items);
  else
    alts.push_back(std::move(re));
  CharFsa out;
  const int accept = out.add_state();
  out.set_final(accept);
  for (Re& a : alts) {
    if (a.kind != Re::concat) {
      Re c{Re::concat};
      c.items.push_back(std::move(a));
      a = std::move(c);
    }
    const bool anchored_start = !a.items.empty() && a.items.front().kind == Re::start;
    if (anchored_start) a.items.erase(a.items.begin());
    const bool anchored_end = !a.items.empty() && a.items.back().kind == Re::end;
    if (anchored_end) a.items.pop_back();
    // A search: anything may come before and after an unanchored side.
    int begin = out.add_state(), finish = out.add_state();
    out.add_eps(0, begin);
    if (!anchored_start) out.add_edge(begin, 0, kMaxCodepoint, begin);
    if (!anchored_end) out.add_edge(finish, 0, kMaxCodepoint, finish);
    out.add_eps(finish, accept);
    build(a, out, begin, finish);
  }
  return out;
}

}  // namespace tern::grammar
