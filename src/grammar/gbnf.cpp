#include "grammar/gbnf.h"

#include <charconv>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "grammar/codepoints.h"

namespace tern::grammar {
namespace {

constexpr int kMaxNesting = 200;
constexpr uint64_t kMaxRepeat = 100000;

class Parser {
 public:
  Parser(std::string_view text, const Vocab* vocab) : s_(text), vocab_(vocab) {}

  Grammar parse() {
    skip_space(true);
    while (pos_ < s_.size()) {
      parse_rule();
      skip_space(true);
    }
    const Use* undefined = nullptr;  // the first use of an undefined rule
    for (const auto& [name, use] : first_use_)
      if (!g_.body(use.rule) && (!undefined || use.pos < undefined->pos)) undefined = &use;
    if (undefined) fail_at(undefined->pos, "undefined rule '{}'", g_.name(undefined->rule));
    int root = g_.find("root");
    if (root < 0) fail("GBNF: the grammar has no rule named 'root'");
    g_.set_root(root);
    return std::move(g_);
  }

 private:
  struct Use {
    int rule;
    size_t pos;
  };

  std::string where(size_t pos) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos && i < s_.size(); ++i) {
      if (s_[i] == '\n')
        ++line, col = 1;
      else
        ++col;
    }
    return fmt::format("line {} column {}", line, col);
  }

  template <typename... Args>
  [[noreturn]] void fail_at(size_t pos, fmt::format_string<Args...> f, Args&&... args) {
    fail("GBNF {}: {}", where(pos), fmt::format(f, std::forward<Args>(args)...));
  }

  bool at_end() const { return pos_ >= s_.size(); }
  char peek(size_t k = 0) const { return pos_ + k < s_.size() ? s_[pos_ + k] : '\0'; }
  static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  }

  // Spaces, tabs and comments; newlines too when `newlines`.
  void skip_space(bool newlines) {
    while (!at_end()) {
      char c = peek();
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else {
        return;
      }
    }
  }

  std::string parse_name() {
    size_t start = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    if (pos_ == start) fail_at(pos_, "expected a rule name");
    return std::string(s_.substr(start, pos_ - start));
  }

  int rule_id(const std::string& name, size_t pos) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    int id = g_.declare(name);
    ids_.emplace(name, id);
    first_use_.emplace(name, Use{id, pos});
    return id;
  }

  void parse_rule() {
    const size_t start = pos_;
    std::string name = parse_name();
    skip_space(false);
    if (s_.substr(pos_, 3) != "::=") fail_at(pos_, "expected '::=' after rule name '{}'", name);
    pos_ += 3;
    skip_space(true);
    int id = rule_id(name, start);
    if (g_.body(id)) fail_at(start, "rule '{}' is defined twice", name);
    ExprPtr body = parse_alternates(false, 0);
    if (!at_end() && peek() != '\n' && peek() != '\r')
      fail_at(pos_, "unexpected '{}' (expected the end of the rule)", peek());
    g_.define(id, body);
  }

  ExprPtr parse_alternates(bool nested, int depth) {
    std::vector<ExprPtr> alts = {parse_sequence(nested, depth)};
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      alts.push_back(parse_sequence(nested, depth));
    }
    return alt(std::move(alts));
  }

  ExprPtr parse_sequence(bool nested, int depth) {
    std::vector<ExprPtr> items;
    for (;;) {
      const size_t start = pos_;
      char c = peek();
      ExprPtr item;
      if (c == '"') {
        item = parse_literal();
      } else if (c == '[') {
        item = parse_class();
      } else if (c == '.') {
        ++pos_;
        item = utf8_class(CodepointSet::all());
      } else if (c == '(') {
        if (depth >= kMaxNesting) fail_at(pos_, "groups nest deeper than {}", kMaxNesting);
        ++pos_;
        skip_space(true);
        item = parse_alternates(true, depth + 1);
        if (peek() != ')') fail_at(pos_, "expected ')' closing the '(' at {}", where(start));
        ++pos_;
      } else if (c == '<' || c == '!') {
        item = parse_token();
      } else if (is_name_char(c)) {
        std::string name = parse_name();
        item = ref(rule_id(name, start));
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        fail_at(pos_, "'{}' without an item before it", c);
      } else {
        break;
      }
      skip_space(nested);
      items.push_back(parse_quantifiers(std::move(item), nested));
    }
    return seq(std::move(items));
  }

  ExprPtr parse_quantifiers(ExprPtr item, bool nested) {
    for (;;) {
      char c = peek();
      if (c == '*') {
        item = star(std::move(item));
      } else if (c == '+') {
        item = repeat(std::move(item), 1, -1);
      } else if (c == '?') {
        item = opt(std::move(item));
      } else if (c == '{') {
        item = parse_braces(std::move(item), nested);
        continue;
      } else {
        return item;
      }
      ++pos_;
      skip_space(nested);
    }
  }

  uint64_t parse_count() {
    size_t start = pos_;
    uint64_t v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + uint64_t(peek() - '0');
      if (v > kMaxRepeat) fail_at(start, "repetition count above {}", kMaxRepeat);
      ++pos_;
    }
    if (pos_ == start) fail_at(pos_, "expected a number");
    return v;
  }

  ExprPtr parse_braces(ExprPtr item, bool nested) {
    const size_t start = pos_;
    ++pos_;
    skip_space(nested);
    uint64_t lo = parse_count(), hi = lo;
    bool unbounded = false;
    skip_space(nested);
    if (peek() == ',') {
      ++pos_;
      skip_space(nested);
      if (peek() == '}')
        unbounded = true;
      else
        hi = parse_count();
      skip_space(nested);
    }
    if (peek() != '}') fail_at(pos_, "expected '}}'");
    ++pos_;
    if (!unbounded && hi < lo) fail_at(start, "repetition {{{},{}}} has max < min", lo, hi);
    skip_space(nested);
    return repeat(std::move(item), int(lo), unbounded ? -1 : int(hi));
  }

  // One character of a literal or class, escapes decoded.
  uint32_t parse_char() {
    const size_t start = pos_;
    if (at_end()) fail_at(pos_, "unexpected end of input");
    if (peek() != '\\') {
      int64_t cp = decode_utf8(s_, pos_);
      if (cp < 0) fail_at(start, "invalid UTF-8");
      return uint32_t(cp);
    }
    char e = peek(1);
    pos_ += 2;
    if (int c = letter_escape(e); c >= 0) return uint32_t(c);
    switch (e) {
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '^':
        return uint32_t(e);
      case 'x':
        return parse_hex(2, start);
      case 'u':
        return parse_hex(4, start);
      case 'U':
        return parse_hex(8, start);
      default:
        fail_at(start, "unknown escape '\\{}'", e);
    }
  }

  uint32_t parse_hex(int digits, size_t start) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i, ++pos_) {
      const int d = hex_value(peek());
      if (d < 0) fail_at(start, "expected {} hex digits", digits);
      v = v * 16 + uint32_t(d);
    }
    if (v > kMaxCodepoint || (v >= 0xD800 && v <= 0xDFFF))
      fail_at(start, "escape \\u{:X} is not a Unicode scalar value", v);
    return v;
  }

  ExprPtr parse_literal() {
    ++pos_;
    std::string bytes;
    while (peek() != '"') {
      if (at_end()) fail_at(pos_, "unterminated string literal");
      append_utf8(parse_char(), bytes);
    }
    ++pos_;
    return literal(bytes);
  }

  ExprPtr parse_class() {
    const size_t start = pos_;
    ++pos_;
    bool negate = false;
    if (peek() == '^') negate = true, ++pos_;
    CodepointSet set;
    while (peek() != ']') {
      if (at_end()) fail_at(start, "unterminated character class");
      uint32_t lo = parse_char(), hi = lo;
      if (peek() == '-' && peek(1) != ']' && pos_ + 1 < s_.size()) {
        ++pos_;
        hi = parse_char();
        if (hi < lo) fail_at(start, "character range is reversed");
      }
      set.add(lo, hi);
    }
    ++pos_;
    return utf8_class(negate ? set.complement() : set);
  }

  ExprPtr parse_token() {
    const size_t start = pos_;
    if (peek() == '!') fail_at(start, "negated tokens (!<...>) are not supported");
    if (!vocab_) fail_at(start, "token terminals need a vocabulary");
    size_t close = s_.find('>', pos_);
    if (close == std::string_view::npos) fail_at(start, "expected '>'");
    std::string_view inner = s_.substr(pos_ + 1, close - pos_ - 1);
    pos_ = close + 1;
    int64_t id = -1;
    if (inner.size() > 2 && inner.front() == '[' && inner.back() == ']') {
      auto r = std::from_chars(inner.data() + 1, inner.data() + inner.size() - 1, id);
      if (r.ec != std::errc() || r.ptr != inner.data() + inner.size() - 1)
        fail_at(start, "bad token id '{}'", inner);
      if (id < 0 || id >= vocab_->size() || !vocab_->added(int32_t(id)))
        fail_at(start, "token <{}> is not an added token of the vocabulary", inner);
    } else {
      const std::string text = fmt::format("<{}>", inner);
      auto found = vocab_->added_token(text);
      if (!found) fail_at(start, "'{}' is not an added token of the vocabulary", text);
      id = *found;
    }
    return tokens({int32_t(id)});
  }

  std::string_view s_;
  const Vocab* vocab_;
  size_t pos_ = 0;
  Grammar g_;
  std::unordered_map<std::string, int> ids_;
  std::unordered_map<std::string, Use> first_use_;
};

}  // namespace

Grammar parse_gbnf(std::string_view text, const Vocab* vocab) {
  return Parser(text, vocab).parse();
}

}  // namespace tern::grammar
