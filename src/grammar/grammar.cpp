#include "grammar/grammar.h"

#include <bit>
#include <unordered_map>

namespace tern::grammar {

ByteSet ByteSet::range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  s.add(lo, hi);
  return s;
}

void ByteSet::add(uint8_t lo, uint8_t hi) {
  for (int b = lo; b <= hi; ++b) bits_[size_t(b >> 6)] |= uint64_t(1) << (b & 63);
}

std::vector<std::pair<uint8_t, uint8_t>> ByteSet::runs() const {
  // The first byte from b on that is (or, with `member` false, is not) in the set; 256 if none.
  auto next = [&](int b, bool member) {
    for (; b < 256; b = (b | 63) + 1) {
      uint64_t w = member ? bits_[size_t(b >> 6)] : ~bits_[size_t(b >> 6)];
      w &= ~uint64_t(0) << (b & 63);
      if (w) return (b & ~63) + std::countr_zero(w);
    }
    return 256;
  };
  std::vector<std::pair<uint8_t, uint8_t>> out;
  for (int b = next(0, true); b < 256; b = next(b, true)) {
    const int e = next(b, false);
    out.emplace_back(uint8_t(b), uint8_t(e - 1));
    b = e;
  }
  return out;
}

ByteSet& ByteSet::operator|=(const ByteSet& o) {
  for (size_t i = 0; i < 4; ++i) bits_[i] |= o.bits_[i];
  return *this;
}

namespace {

ExprPtr make(Expr::Kind kind, Expr e = {}) {
  e.kind = kind;
  return std::make_shared<const Expr>(std::move(e));
}

}  // namespace

ExprPtr empty() {
  static const ExprPtr e = make(Expr::Kind::empty);
  return e;
}

ExprPtr nothing() {
  static const ExprPtr e = make(Expr::Kind::nothing);
  return e;
}

ExprPtr bytes(const ByteSet& set) {
  if (set.empty()) return nothing();
  Expr e;
  e.bytes = set;
  e.runs = set.runs();
  return make(Expr::Kind::bytes, std::move(e));
}

ExprPtr byte_range(uint8_t lo, uint8_t hi) {
  return bytes(ByteSet::range(lo, hi));
}

ExprPtr literal(std::string_view text) {
  std::vector<ExprPtr> items;
  items.reserve(text.size());
  for (char c : text) items.push_back(byte_range(uint8_t(c), uint8_t(c)));
  return seq(std::move(items));
}

ExprPtr tokens(std::vector<int32_t> ids) {
  if (ids.empty()) return nothing();
  Expr e;
  e.tokens = std::move(ids);
  return make(Expr::Kind::tokens, std::move(e));
}

ExprPtr ref(int rule) {
  Expr e;
  e.rule = rule;
  return make(Expr::Kind::ref, std::move(e));
}

ExprPtr seq(std::vector<ExprPtr> items) {
  std::vector<ExprPtr> kept;
  for (ExprPtr& e : items) {
    if (e->kind == Expr::Kind::nothing) return nothing();
    if (e->kind == Expr::Kind::empty) continue;
    if (e->kind == Expr::Kind::seq)
      kept.insert(kept.end(), e->items.begin(), e->items.end());
    else
      kept.push_back(std::move(e));
  }
  if (kept.empty()) return empty();
  if (kept.size() == 1) return kept[0];
  Expr e;
  e.items = std::move(kept);
  return make(Expr::Kind::seq, std::move(e));
}

ExprPtr alt(std::vector<ExprPtr> items) {
  std::vector<ExprPtr> kept;
  for (ExprPtr& e : items)
    if (e->kind != Expr::Kind::nothing) kept.push_back(std::move(e));
  if (kept.empty()) return nothing();
  if (kept.size() == 1) return kept[0];
  Expr e;
  e.items = std::move(kept);
  return make(Expr::Kind::alt, std::move(e));
}

ExprPtr repeat(ExprPtr item, int min, int max) {
  if (max >= 0 && max < min) return nothing();
  if (max == 0 || item->kind == Expr::Kind::empty) return empty();
  if (item->kind == Expr::Kind::nothing) return min == 0 ? empty() : nothing();
  if (min == 1 && max == 1) return item;
  Expr e;
  e.items = {std::move(item)};
  e.min = min;
  e.max = max;
  return make(Expr::Kind::repeat, std::move(e));
}

ExprPtr graph(ExprGraph g) {
  Expr e;
  e.graph = std::make_shared<const ExprGraph>(std::move(g));
  return make(Expr::Kind::graph, std::move(e));
}

int Grammar::declare(std::string name) {
  names_.push_back(std::move(name));
  bodies_.push_back(nullptr);
  keys_.emplace_back();
  return int(names_.size()) - 1;
}

void Grammar::define(int rule, ExprPtr body) {
  bodies_[size_t(rule)] = std::move(body);
}

int Grammar::add(std::string name, ExprPtr body) {
  int r = declare(std::move(name));
  define(r, std::move(body));
  return r;
}

void Grammar::truncate(int size) {
  names_.resize(size_t(size));
  bodies_.resize(size_t(size));
  keys_.resize(size_t(size));
}

namespace {

// e with every rule reference moved by `offset` (shared subexpressions copied once).
ExprPtr shifted(const ExprPtr& e, int offset, std::unordered_map<const Expr*, ExprPtr>& memo) {
  if (!e) return e;
  auto it = memo.find(e.get());
  if (it != memo.end()) return it->second;
  Expr c = *e;
  if (c.kind == Expr::Kind::ref) c.rule += offset;
  for (ExprPtr& item : c.items) item = shifted(item, offset, memo);
  if (c.graph) {
    ExprGraph g = *c.graph;
    for (ExprGraph::Edge& edge : g.edges) edge.label = shifted(edge.label, offset, memo);
    c.graph = std::make_shared<const ExprGraph>(std::move(g));
  }
  ExprPtr out = std::make_shared<const Expr>(std::move(c));
  memo.emplace(e.get(), out);
  return out;
}

}  // namespace

Grammar either(const Grammar& a, const Grammar& b) {
  Grammar g;
  std::unordered_map<const Expr*, ExprPtr> memo;
  for (int r = 0; r < a.size(); ++r) g.declare(a.name(r));
  for (int r = 0; r < b.size(); ++r) g.declare(b.name(r));
  for (int r = 0; r < a.size(); ++r) {
    g.define(r, a.body(r));
    g.set_key(r, a.key(r));
  }
  for (int r = 0; r < b.size(); ++r) {
    g.define(a.size() + r, shifted(b.body(r), a.size(), memo));
    g.set_key(a.size() + r, b.key(r));
  }
  g.set_root(g.add("either", alt({ref(a.root()), ref(a.size() + b.root())})));
  return g;
}

Grammar after_newlines(Grammar g, int n) {
  const int root = g.root();
  g.set_root(g.add("after newlines", seq({repeat(literal("\n"), 0, n), ref(root)})));
  return g;
}

int Grammar::find(std::string_view name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return int(i);
  return -1;
}

}  // namespace tern::grammar
