#include "grammar/json_numbers.h"

#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include "core/error.h"
#include "grammar/char_fsa.h"
#include "grammar/regex.h"

namespace tern::grammar {
namespace {

// Bounded "number" texts have at most this many digits, so that two different
// ones are two different doubles and compare as the validator's doubles do.
constexpr int kMaxNumberDigits = 15;

Decimal parse_plain(std::string_view s) {
  Decimal d;
  if (!s.empty() && s[0] == '-') d.negative = true, s.remove_prefix(1);
  size_t dot = s.find('.');
  std::string_view ip = s.substr(0, dot),
                   fp = dot == std::string_view::npos ? "" : s.substr(dot + 1);
  while (ip.size() > 1 && ip[0] == '0') ip.remove_prefix(1);
  while (!fp.empty() && fp.back() == '0') fp.remove_suffix(1);
  d.int_part = ip.empty() ? "0" : std::string(ip);
  d.frac = std::string(fp);
  if (d.is_zero()) d.negative = false;
  return d;
}

enum Cmp { kLess, kEqual, kGreater };

Cmp cmp_digit(char a, char b) {
  return a < b ? kLess : a > b ? kGreater : kEqual;
}

// Unsigned decimal texts x (canonical integer part, optional fraction when
// `fraction`) with x op b, for op -2: <, -1: <=, 1: >=, 2: >.
CharFsa compare_fsa(const Decimal& b, bool fraction, int op) {
  auto accept = [op](Cmp r) {
    return op == -2 ? r == kLess : op == -1 ? r != kGreater : op == 1 ? r != kLess : r == kGreater;
  };
  const std::string& bi = b.int_part;
  const std::string& bf = b.frac;
  const size_t L = bi.size(), M = bf.size();
  CharFsa a;
  std::map<std::tuple<int, size_t, int>, int> ids;  // (kind, position, comparison) -> state
  std::vector<std::tuple<int, size_t, int>> todo;
  enum Kind { kInt, kZero, kLong, kFracFirst, kFracEqual, kDecided, kDecidedFirst };
  auto state = [&](Kind k, size_t pos, Cmp c) {
    auto key = std::make_tuple(int(k), pos, int(c));
    auto [it, added] = ids.emplace(key, 0);
    if (added) {
      it->second = a.add_state();
      todo.push_back(key);
    }
    return it->second;
  };
  auto digits = [&](int from, int lo, int hi, int to) {
    a.add_edge(from, uint32_t('0' + lo), uint32_t('0' + hi), to);
  };
  // The start: "0" alone, or a first digit 1-9.
  a.add_edge(0, '0', '0', state(kZero, 1, bi == "0" ? kEqual : kLess));
  for (int d = 1; d <= 9; ++d) digits(0, d, d, state(kInt, 1, cmp_digit(char('0' + d), bi[0])));
  while (!todo.empty()) {
    auto [k, pos, ci] = todo.back();
    todo.pop_back();
    const int s = ids[{k, pos, ci}];
    const Cmp c = Cmp(ci);
    if (k == kInt || k == kZero || k == kLong) {
      // The integer part's comparison if it ends here.
      const Cmp r = k == kLong ? kGreater : pos < L ? kLess : c;
      if (accept(r == kEqual && M > 0 ? kLess : r)) a.set_final(s);
      if (fraction)
        a.add_edge(s, '.', '.',
                   r == kEqual ? state(kFracEqual, 0, kEqual) : state(kDecidedFirst, 0, r));
      if (k == kZero) continue;
      if (k == kLong || pos == L) {
        digits(s, 0, 9, state(kLong, 0, kGreater));
      } else {
        for (int d = 0; d <= 9; ++d)
          digits(s, d, d,
                 state(kInt, pos + 1, c == kEqual ? cmp_digit(char('0' + d), bi[pos]) : c));
      }
    } else if (k == kDecidedFirst || k == kDecided) {
      if (k == kDecided && accept(c)) a.set_final(s);
      digits(s, 0, 9, state(kDecided, 0, c));
    } else {  // kFracEqual: pos fraction digits read, all equal to b's
      if (pos > 0 && accept(pos < M ? kLess : kEqual)) a.set_final(s);
      const char bd = pos < M ? bf[pos] : '0';
      for (int d = 0; d <= 9; ++d) {
        const Cmp dc = cmp_digit(char('0' + d), bd);
        digits(s, d, d,
               dc == kEqual ? state(kFracEqual, std::min(pos + 1, M + 1), kEqual)
                            : state(kDecided, 0, dc));
      }
    }
  }
  return a;
}

CharFsa unsigned_texts(bool fraction) {
  return pattern_language(fraction ? "^(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?$" : "^(?:0|[1-9][0-9]*)$");
}

// At most n digits; '-' and '.' do not count.
CharFsa digit_cap(int n) {
  CharFsa a;
  int cur = 0;
  for (int k = 0; k <= n; ++k) {
    a.set_final(cur);
    a.add_edge(cur, '-', '.', cur);  // '-' and '.'
    if (k == n) break;
    int next = a.add_state();
    a.add_edge(cur, '0', '9', next);
    cur = next;
  }
  return a;
}

Decimal magnitude(Decimal d) {
  d.negative = false;
  return d;
}

// The texts within the bounds; `fraction`: numbers (bounds as shortest
// decimals, see the header), else integers (bounds exact).
CharFsa bounded(const NumberBounds& nb, bool fraction) {
  struct Side {
    Decimal value;
    bool exclusive;
  };
  std::optional<Side> lo, hi;
  if (nb.lo) lo = Side{decimal_of(nb.lo->value, !fraction), nb.lo->exclusive};
  if (nb.hi) hi = Side{decimal_of(nb.hi->value, !fraction), nb.hi->exclusive};
  std::vector<CharFsa> parts;
  const bool lo_neg = lo && lo->value.negative, hi_neg = hi && hi->value.negative;
  const bool hi_zero_excl = hi && hi->value.is_zero() && hi->exclusive;
  // Values >= 0.
  if (!hi_neg && !hi_zero_excl) {
    CharFsa x = unsigned_texts(fraction);
    if (lo && !lo_neg)
      x = fsa_intersect(x, compare_fsa(lo->value, fraction, lo->exclusive ? 2 : 1));
    if (hi) x = fsa_intersect(x, compare_fsa(hi->value, fraction, hi->exclusive ? -2 : -1));
    parts.push_back(std::move(x));
  }
  // Values < 0, as "-" w with w > 0: -w >= lo is w <= |lo|, -w <= hi is w >= |hi|.
  if (!lo || lo_neg) {
    CharFsa w = fsa_intersect(unsigned_texts(fraction), compare_fsa(Decimal{}, fraction, 2));
    if (lo)
      w = fsa_intersect(w, compare_fsa(magnitude(lo->value), fraction, lo->exclusive ? -2 : -1));
    if (hi_neg)
      w = fsa_intersect(w, compare_fsa(magnitude(hi->value), fraction, hi->exclusive ? 2 : 1));
    parts.push_back(fsa_concat({fsa_literal("-"), w}));
  }
  return fsa_union(parts);
}

}  // namespace

Decimal decimal_of(const nlohmann::ordered_json& v, bool exact) {
  if (v.is_number_unsigned()) return parse_plain(std::to_string(v.get<uint64_t>()));
  if (v.is_number_integer()) return parse_plain(std::to_string(v.get<int64_t>()));
  const double d = v.get<double>();
  if (!std::isfinite(d)) fail("JSON Schema: a numeric bound is not finite");
  char buf[1200];
  auto r = exact && std::fabs(d) >= 9007199254740992.0
               ? std::to_chars(buf, buf + sizeof buf, d, std::chars_format::fixed, 0)
           : exact ? std::to_chars(buf, buf + sizeof buf, d, std::chars_format::fixed, 1100)
                   : std::to_chars(buf, buf + sizeof buf, d, std::chars_format::fixed);
  TERN_CHECK(r.ec == std::errc());
  return parse_plain(std::string_view(buf, size_t(r.ptr - buf)));
}

int compare(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  const int sign = a.negative ? -1 : 1;
  if (a.int_part.size() != b.int_part.size())
    return a.int_part.size() < b.int_part.size() ? -sign : sign;
  if (int c = a.int_part.compare(b.int_part)) return c < 0 ? -sign : sign;
  if (int c = a.frac.compare(b.frac)) return c < 0 ? -sign : sign;
  return 0;
}

namespace {

// Integer texts whose value is a multiple of m: the remainder so far, digit by digit.
CharFsa multiples(uint64_t m) {
  CharFsa a;  // 0: start
  const int minus = a.add_state(), zero = a.add_state();
  std::vector<int> rest(m);
  for (int& r : rest) r = a.add_state();
  a.set_final(zero);
  a.set_final(rest[0]);
  a.add_edge(0, '-', '-', minus);
  for (int from : {0, minus}) {
    a.add_edge(from, '0', '0', zero);
    for (uint32_t d = 1; d <= 9; ++d) a.add_edge(from, '0' + d, '0' + d, rest[d % m]);
  }
  for (uint64_t r = 0; r < m; ++r)
    for (uint32_t d = 0; d <= 9; ++d) a.add_edge(rest[r], '0' + d, '0' + d, rest[(10 * r + d) % m]);
  return a;
}

}  // namespace

ExprPtr integer_text(const NumberBounds& b) {
  if (b.empty()) return fsa_text(pattern_language("^-?(?:0|[1-9][0-9]*)$"));
  CharFsa a = b.lo || b.hi ? bounded(b, false) : pattern_language("^-?(?:0|[1-9][0-9]*)$");
  if (b.multiple_of) a = fsa_intersect(a, multiples(b.multiple_of));
  return fsa_empty(a) ? nothing() : fsa_text(a);
}

ExprPtr number_text(const NumberBounds& b) {
  if (b.multiple_of) return integer_text(b);
  if (b.empty())
    return fsa_text(pattern_language("^-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$"));
  const CharFsa a = fsa_intersect(bounded(b, true), digit_cap(kMaxNumberDigits));
  return fsa_empty(a) ? nothing() : fsa_text(a);
}

bool within(const NumberBounds& b, const nlohmann::ordered_json& v) {
  const Decimal x = decimal_of(v, true);
  if (b.multiple_of) {
    uint64_t rest = 0;
    for (char c : x.int_part) rest = (rest * 10 + uint64_t(c - '0')) % b.multiple_of;
    if (!x.frac.empty() || rest != 0) return false;
  }
  if (b.lo) {
    int c = compare(x, decimal_of(b.lo->value, true));
    if (c < 0 || (c == 0 && b.lo->exclusive)) return false;
  }
  if (b.hi) {
    int c = compare(x, decimal_of(b.hi->value, true));
    if (c > 0 || (c == 0 && b.hi->exclusive)) return false;
  }
  return true;
}

Bound tighter(const Bound& a, const Bound& b, bool lower) {
  int c = compare(decimal_of(a.value, true), decimal_of(b.value, true));
  if (c == 0) return a.exclusive ? a : b;
  return (c > 0) == lower ? a : b;
}

}  // namespace tern::grammar
