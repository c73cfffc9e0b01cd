#include "grammar/char_fsa.h"

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>

#include "core/error.h"
#include "grammar/determinize.h"

namespace tern::grammar {
namespace {

void check_size(size_t n) {
  if (n > kMaxCharStates)
    fail(
        "a string or number constraint is too large (more than {} states); reduce its length "
        "bounds or repetitions",
        kMaxCharStates);
}

// The same language without empty edges: each state takes the edges and
// finality of the states its empty edges reach.
CharFsa without_eps(const CharFsa& a) {
  CharFsa out;
  for (size_t s = 1; s < a.size(); ++s) out.add_state();
  std::vector<size_t> mark(a.size(), SIZE_MAX);
  std::vector<int> stack;
  for (size_t s = 0; s < a.size(); ++s) {
    stack.assign(1, int(s));
    while (!stack.empty()) {
      const int x = stack.back();
      stack.pop_back();
      if (mark[size_t(x)] == s) continue;
      mark[size_t(x)] = s;
      if (a.final(x)) out.set_final(int(s));
      for (const CharFsa::Edge& e : a.edges(x)) out.add_edge(int(s), e.lo, e.hi, e.to);
      for (int y : a.eps(x)) stack.push_back(y);
    }
  }
  return out;
}

// The UTF-8 bytes of each member of a set; a JSON escape for a character.
ExprPtr json_chars(const CodepointSet& set) {
  static const CodepointSet kRaw = CodepointSet::range(0x20, kMaxCodepoint).minus([] {
    CodepointSet s = CodepointSet::range('"', '"');
    s.add('\\', '\\');
    return s;
  }());
  std::vector<ExprPtr> alts = {utf8_class(set.intersect(kRaw))};
  static const std::pair<uint32_t, char> kShort[] = {{'"', '"'},  {'\\', '\\'}, {'/', '/'},
                                                     {'\b', 'b'}, {'\f', 'f'},  {'\n', 'n'},
                                                     {'\r', 'r'}, {'\t', 't'}};
  for (auto [cp, letter] : kShort)
    if (set.contains(cp)) alts.push_back(literal(std::string{'\\', letter}));
  // \uXXXX for the members in the basic plane, surrogates excepted; hex digits in either case.
  CodepointSet bmp =
      set.intersect(CodepointSet::range(0, 0xFFFF)).minus(CodepointSet::range(0xD800, 0xDFFF));
  auto hex = [](int lo, int hi) {  // one hex digit with value lo..hi
    ByteSet b;
    for (int v = lo; v <= hi; ++v) {
      if (v < 10) {
        b.add(uint8_t('0' + v), uint8_t('0' + v));
      } else {
        b.add(uint8_t('a' + v - 10), uint8_t('a' + v - 10));
        b.add(uint8_t('A' + v - 10), uint8_t('A' + v - 10));
      }
    }
    return bytes(b);
  };
  for (const CpRange& r : bmp.ranges()) {
    // The 4-digit strings from lo to hi: split on the first digit that differs.
    std::function<ExprPtr(int, uint32_t, uint32_t)> range = [&](int digits, uint32_t lo,
                                                                uint32_t hi) -> ExprPtr {
      if (digits == 0) return empty();
      const uint32_t unit = 1u << (4 * (digits - 1));
      const uint32_t a = lo / unit, b = hi / unit;
      if (a == b) return seq({hex(int(a), int(a)), range(digits - 1, lo % unit, hi % unit)});
      std::vector<ExprPtr> parts;
      parts.push_back(seq({hex(int(a), int(a)), range(digits - 1, lo % unit, unit - 1)}));
      if (b > a + 1)
        parts.push_back(seq({hex(int(a + 1), int(b - 1)), range(digits - 1, 0, unit - 1)}));
      parts.push_back(seq({hex(int(b), int(b)), range(digits - 1, 0, hi % unit)}));
      return alt(std::move(parts));
    };
    alts.push_back(seq({literal("\\u"), range(4, r.lo, r.hi)}));
  }
  return alt(std::move(alts));
}

// The automaton as an expression graph whose edges are the encodings (JSON
// string body or UTF-8) of the characters going from one state to another.
// Each label is a minimal automaton, made once per set (and kept for the
// process: the same classes come back in every schema).
ExprPtr as_graph(const CharFsa& fsa, bool json) {
  static std::mutex mutex;
  static std::map<std::vector<uint32_t>, ExprPtr> labels;  // (json, lo, hi, lo, hi, ...)
  auto label = [&](const CodepointSet& set) {
    std::vector<uint32_t> key = {json};
    for (const CpRange& r : set.ranges()) key.push_back(r.lo), key.push_back(r.hi);
    std::lock_guard lock(mutex);
    auto it = labels.find(key);
    if (it != labels.end()) return it->second;
    if (labels.size() > 4096) labels.clear();
    return labels.emplace(std::move(key), minimized(json ? json_chars(set) : utf8_class(set)))
        .first->second;
  };
  const CharFsa a = without_eps(fsa);
  ExprGraph g;
  g.states = int(a.size());
  g.start = 0;
  for (size_t s = 0; s < a.size(); ++s) {
    if (a.final(int(s))) g.finals.push_back(int(s));
    std::map<int, CodepointSet> by_target;
    for (const CharFsa::Edge& e : a.edges(int(s))) by_target[e.to].add(e.lo, e.hi);
    for (auto& [to, set] : by_target) g.edges.push_back({int(s), to, label(set)});
  }
  return graph(std::move(g));
}

}  // namespace

CharFsa::CharFsa() : edges_(1), eps_(1), final_(1, 0) {}

int CharFsa::add_state() {
  check_size(edges_.size() + 1);
  edges_.emplace_back();
  eps_.emplace_back();
  final_.push_back(0);
  return int(edges_.size()) - 1;
}

void CharFsa::add_edges(int from, const CodepointSet& set, int to) {
  for (const CpRange& r : set.ranges()) add_edge(from, r.lo, r.hi, to);
}

int CharFsa::insert(const CharFsa& other) {
  const int base = int(edges_.size());
  check_size(edges_.size() + other.size());
  for (size_t s = 0; s < other.size(); ++s) {
    const int n = add_state();
    for (const Edge& e : other.edges_[s]) edges_[size_t(n)].push_back({e.lo, e.hi, e.to + base});
    for (int t : other.eps_[s]) eps_[size_t(n)].push_back(t + base);
    final_[size_t(n)] = other.final_[s];
  }
  return base;
}

CharFsa fsa_literal(std::string_view utf8) {
  CharFsa a;
  int cur = 0;
  for (size_t pos = 0; pos < utf8.size();) {
    int64_t cp = decode_utf8(utf8, pos);
    if (cp < 0) fail("text is not valid UTF-8");
    int next = a.add_state();
    a.add_edge(cur, uint32_t(cp), uint32_t(cp), next);
    cur = next;
  }
  a.set_final(cur);
  return a;
}

CharFsa fsa_repeat(const CodepointSet& chars, int min, int max) {
  CharFsa a;
  int cur = 0;
  for (int i = 0; i < min; ++i) {
    int next = a.add_state();
    a.add_edges(cur, chars, next);
    cur = next;
  }
  a.set_final(cur);
  if (max < 0) {
    a.add_edges(cur, chars, cur);
    return a;
  }
  for (int i = min; i < max; ++i) {
    int next = a.add_state();
    a.add_edges(cur, chars, next);
    a.set_final(next);
    cur = next;
  }
  return a;
}

CharFsa fsa_union(const std::vector<CharFsa>& parts) {
  CharFsa a;
  for (const CharFsa& p : parts) a.add_eps(0, a.insert(p));
  return a;
}

CharFsa fsa_concat(const std::vector<CharFsa>& parts) {
  CharFsa a;
  a.set_final(0);
  std::vector<int> ends = {0};
  for (const CharFsa& p : parts) {
    const int base = a.insert(p);
    for (int e : ends) a.add_eps(e, base);
    std::vector<int> next;
    for (size_t s = 0; s < p.size(); ++s)
      if (p.final(int(s))) next.push_back(base + int(s));
    ends = std::move(next);
  }
  // Only the last part's finals are final.
  CharFsa out;
  for (size_t s = 1; s < a.size(); ++s) out.add_state();
  for (size_t s = 0; s < a.size(); ++s) {
    for (const CharFsa::Edge& e : a.edges(int(s))) out.add_edge(int(s), e.lo, e.hi, e.to);
    for (int t : a.eps(int(s))) out.add_eps(int(s), t);
  }
  for (int e : ends) out.set_final(e);
  return out;
}

CharFsa fsa_intersect(const CharFsa& x, const CharFsa& y) {
  const CharFsa a = without_eps(x), b = without_eps(y);
  CharFsa out;
  std::map<std::pair<int, int>, int> ids = {{{0, 0}, 0}};
  std::vector<std::pair<int, int>> todo = {{0, 0}};
  while (!todo.empty()) {
    auto [s, t] = todo.back();
    todo.pop_back();
    const int id = ids[{s, t}];
    if (a.final(s) && b.final(t)) out.set_final(id);
    for (const CharFsa::Edge& e : a.edges(s))
      for (const CharFsa::Edge& f : b.edges(t)) {
        uint32_t lo = std::max(e.lo, f.lo), hi = std::min(e.hi, f.hi);
        if (lo > hi) continue;
        auto [it, added] = ids.emplace(std::pair(e.to, f.to), int(out.size()));
        if (added) {
          out.add_state();
          todo.push_back({e.to, f.to});
        }
        out.add_edge(id, lo, hi, it->second);
      }
  }
  return out;
}

bool fsa_accepts(const CharFsa& fsa, std::string_view utf8) {
  const CharFsa a = without_eps(fsa);
  std::vector<int> cur = {0};
  for (size_t pos = 0; pos < utf8.size();) {
    int64_t cp = decode_utf8(utf8, pos);
    if (cp < 0) return false;
    std::vector<int> next;
    for (int s : cur)
      for (const CharFsa::Edge& e : a.edges(s))
        if (e.lo <= uint32_t(cp) && uint32_t(cp) <= e.hi) next.push_back(e.to);
    std::sort(next.begin(), next.end());
    next.erase(std::unique(next.begin(), next.end()), next.end());
    cur = std::move(next);
  }
  return std::any_of(cur.begin(), cur.end(), [&](int s) { return a.final(s); });
}

bool fsa_empty(const CharFsa& fsa) {
  std::vector<char> seen(fsa.size(), 0);
  std::vector<int> stack = {0};
  while (!stack.empty()) {
    int s = stack.back();
    stack.pop_back();
    if (seen[size_t(s)]) continue;
    seen[size_t(s)] = 1;
    if (fsa.final(s)) return false;
    for (const CharFsa::Edge& e : fsa.edges(s)) stack.push_back(e.to);
    for (int t : fsa.eps(s)) stack.push_back(t);
  }
  return true;
}

CharFsa fsa_none_of(const std::vector<std::string>& names) {
  CharFsa a;                        // state 0: the empty prefix
  const int other = a.add_state();  // not a prefix of any name: anything may follow
  a.set_final(other);
  a.add_edges(other, CodepointSet::all(), other);
  std::map<std::string, int> ids = {{"", 0}};  // every prefix of a name
  for (const std::string& n : names)
    for (size_t pos = 0; pos < n.size();) {
      decode_utf8(n, pos);
      auto [it, added] = ids.emplace(n.substr(0, pos), 0);
      if (added) it->second = a.add_state();
    }
  for (const auto& [prefix, id] : ids) {
    if (std::find(names.begin(), names.end(), prefix) == names.end()) a.set_final(id);
    CodepointSet next;  // characters that stay on some name
    for (const auto& [longer, lid] : ids) {
      if (longer.size() <= prefix.size() || longer.compare(0, prefix.size(), prefix) != 0) continue;
      size_t pos = prefix.size();
      const int64_t cp = decode_utf8(longer, pos);
      if (pos != longer.size()) continue;  // not one character longer
      a.add_edge(id, uint32_t(cp), uint32_t(cp), lid);
      next.add(uint32_t(cp), uint32_t(cp));
    }
    a.add_edges(id, next.complement(), other);
  }
  return a;
}

ExprPtr fsa_text(const CharFsa& a) {
  return as_graph(a, false);
}

ExprPtr fsa_json_body(const CharFsa& a) {
  return as_graph(a, true);
}

}  // namespace tern::grammar
