#include "grammar/determinize.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "core/error.h"

namespace tern::grammar {
namespace {

constexpr size_t kMaxNfaStates = 4 * kMaxStates;
constexpr int kMaxExprDepth = 2000;

struct NEdge {
  enum Kind : uint8_t { eps, byte, call, token } kind;
  uint8_t lo = 0, hi = 0;
  int32_t arg = 0;  // call: rule; token: id
  int32_t to;
};

// An upper bound of the states expand() adds for e (saturating), to refuse a
// huge expansion before building it. Shared subexpressions are sized once.
class ExpansionSize {
 public:
  size_t of(const Expr& e, int depth) {
    if (depth > kMaxExprDepth) fail("the grammar nests deeper than {} levels", kMaxExprDepth);
    auto it = memo_.find(&e);
    if (it != memo_.end()) return it->second;
    size_t n = 1;
    switch (e.kind) {
      case Expr::Kind::seq:
      case Expr::Kind::alt:
        for (const ExprPtr& item : e.items) n = add(n, of(*item, depth + 1));
        break;
      case Expr::Kind::repeat: {
        const size_t copies = size_t(std::max(e.min, e.max) + 1);
        const size_t one = of(*e.items[0], depth + 1) + 2;
        n = one > kMaxNfaStates / copies ? kMaxNfaStates + 1 : copies * one;
        break;
      }
      case Expr::Kind::graph:
        n = size_t(e.graph->states);
        for (const ExprGraph::Edge& edge : e.graph->edges)
          if (edge.label) n = add(n, of(*edge.label, depth + 1));
        break;
      default:
        break;
    }
    memo_.emplace(&e, n);
    return n;
  }

 private:
  static size_t add(size_t a, size_t b) { return std::min(a + b, kMaxNfaStates + 1); }
  std::unordered_map<const Expr*, size_t> memo_;
};

class Nfa {
 public:
  std::vector<std::vector<NEdge>> out;

  int add() {
    if (out.size() >= kMaxNfaStates)
      fail("the grammar is too large (more than {} states); reduce repetition counts", kMaxStates);
    out.emplace_back();
    return int(out.size()) - 1;
  }
  void eps(int from, int to) { out[size_t(from)].push_back({NEdge::eps, 0, 0, 0, to}); }

  // Adds paths from `from` to `to` spelling e.
  void expand(const Expr& e, int from, int to, int depth) {
    if (depth > kMaxExprDepth) fail("the grammar nests deeper than {} levels", kMaxExprDepth);
    switch (e.kind) {
      case Expr::Kind::empty:
        eps(from, to);
        return;
      case Expr::Kind::nothing:
        return;
      case Expr::Kind::bytes:
        for (auto [lo, hi] : e.bytes.runs())
          out[size_t(from)].push_back({NEdge::byte, lo, hi, 0, to});
        return;
      case Expr::Kind::tokens:
        for (int32_t t : e.tokens) out[size_t(from)].push_back({NEdge::token, 0, 0, t, to});
        return;
      case Expr::Kind::ref:
        out[size_t(from)].push_back({NEdge::call, 0, 0, e.rule, to});
        return;
      case Expr::Kind::seq: {
        int cur = from;
        for (size_t i = 0; i < e.items.size(); ++i) {
          int next = i + 1 == e.items.size() ? to : add();
          expand(*e.items[i], cur, next, depth + 1);
          cur = next;
        }
        return;
      }
      case Expr::Kind::alt:
        for (const ExprPtr& item : e.items) expand(*item, from, to, depth + 1);
        return;
      case Expr::Kind::repeat:
        expand_repeat(e, from, to, depth);
        return;
      case Expr::Kind::graph: {
        const ExprGraph& g = *e.graph;
        std::vector<int> map(size_t(g.states));
        for (int& s : map) s = add();
        eps(from, map[size_t(g.start)]);
        for (int f : g.finals) eps(map[size_t(f)], to);
        for (const ExprGraph::Edge& edge : g.edges) {
          if (edge.label)
            expand(*edge.label, map[size_t(edge.from)], map[size_t(edge.to)], depth + 1);
          else
            eps(map[size_t(edge.from)], map[size_t(edge.to)]);
        }
        return;
      }
    }
  }

 private:
  void expand_repeat(const Expr& e, int from, int to, int depth) {
    const Expr& item = *e.items[0];
    int cur = from;
    for (int i = 0; i < e.min; ++i) {
      int next = add();
      expand(item, cur, next, depth + 1);
      cur = next;
    }
    if (e.max < 0) {  // a loop on a fresh state
      int loop = add();
      eps(cur, loop);
      int back = add();
      expand(item, loop, back, depth + 1);
      eps(back, loop);
      eps(loop, to);
      return;
    }
    for (int i = e.min; i < e.max; ++i) {
      eps(cur, to);
      int next = add();
      expand(item, cur, next, depth + 1);
      cur = next;
    }
    eps(cur, to);
  }
};

struct VectorHash {
  size_t operator()(const std::vector<int>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (int x : v) h = (h ^ uint64_t(uint32_t(x))) * 1099511628211ull;
    return size_t(h);
  }
};

class SubsetBuilder {
 public:
  SubsetBuilder(const Nfa& nfa, Pda& pda) : nfa_(nfa), pda_(pda), mark_(nfa.out.size(), 0) {}

  // Builds rule r's automaton from its NFA start and accepting state.
  int32_t build(int32_t rule, int start, int accept) {
    rule_ = rule;
    accept_ = accept;
    ids_.clear();
    int32_t first = intern(closure({start}));
    while (!todo_.empty()) {
      auto [id, set] = std::move(todo_.back());
      todo_.pop_back();
      expand(id, set);
    }
    return first;
  }

 private:
  // The states reachable by empty edges, keeping those with other edges and the accepting one.
  std::vector<int> closure(std::vector<int> stack) {
    ++gen_;
    std::vector<int> out;
    while (!stack.empty()) {
      int s = stack.back();
      stack.pop_back();
      if (mark_[size_t(s)] == gen_) continue;
      mark_[size_t(s)] = gen_;
      bool keep = s == accept_;
      for (const NEdge& e : nfa_.out[size_t(s)]) {
        if (e.kind == NEdge::eps)
          stack.push_back(e.to);
        else
          keep = true;
      }
      if (keep) out.push_back(s);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  int32_t intern(std::vector<int> set) {
    auto it = ids_.find(set);
    if (it != ids_.end()) return it->second;
    if (pda_.nodes.size() >= kMaxStates)
      fail("the grammar is too large (more than {} states); reduce repetition counts", kMaxStates);
    auto id = int32_t(pda_.nodes.size());
    Pda::Node node;
    node.rule = rule_;
    node.final = std::binary_search(set.begin(), set.end(), accept_);
    pda_.nodes.push_back(node);
    nodes_edges_.emplace_back();
    ids_.emplace(set, id);
    todo_.emplace_back(id, std::move(set));
    return id;
  }

  void expand(int32_t id, const std::vector<int>& set) {
    std::vector<const NEdge*> bytes;
    std::map<int32_t, std::vector<int>> calls, toks;
    for (int s : set)
      for (const NEdge& e : nfa_.out[size_t(s)]) {
        if (e.kind == NEdge::byte) bytes.push_back(&e);
        if (e.kind == NEdge::call) calls[e.arg].push_back(e.to);
        if (e.kind == NEdge::token) toks[e.arg].push_back(e.to);
      }
    Built b;  // intern() grows nodes_edges_: filled in at the end
    // Elementary byte intervals between the edges' boundaries, adjacent equal targets merged.
    std::vector<int> cuts;
    for (const NEdge* e : bytes) cuts.push_back(e->lo), cuts.push_back(e->hi + 1);
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::vector<int> prev_targets;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      int lo = cuts[i], hi = cuts[i + 1] - 1;
      std::vector<int> targets;
      for (const NEdge* e : bytes)
        if (e->lo <= lo && hi <= e->hi) targets.push_back(e->to);
      if (targets.empty()) {
        prev_targets.clear();
        continue;
      }
      if (!b.edges.empty() && targets == prev_targets && b.edges.back().hi + 1 == lo) {
        b.edges.back().hi = uint8_t(hi);
        continue;
      }
      prev_targets = targets;
      b.edges.push_back({uint8_t(lo), uint8_t(hi), intern(closure(std::move(targets)))});
    }
    for (auto& [rule, targets] : calls) b.calls.push_back({rule, intern(closure(targets))});
    for (auto& [tok, targets] : toks) b.tokens.push_back({tok, intern(closure(targets))});
    nodes_edges_[size_t(id)] = std::move(b);
  }

 public:
  struct Built {
    std::vector<Pda::Edge> edges;
    std::vector<Pda::Call> calls;
    std::vector<Pda::TokenEdge> tokens;
  };
  std::vector<Built> nodes_edges_;

 private:
  const Nfa& nfa_;
  Pda& pda_;
  std::vector<uint32_t> mark_;
  uint32_t gen_ = 0;
  int32_t rule_ = 0;
  int accept_ = 0;
  std::unordered_map<std::vector<int>, int32_t, VectorHash> ids_;
  std::vector<std::pair<int32_t, std::vector<int>>> todo_;
};

}  // namespace

Pda determinize(const Grammar& g) {
  Nfa nfa;
  std::vector<std::pair<int, int>> ends(size_t(g.size()));
  ExpansionSize sizes;
  for (int r = 0; r < g.size(); ++r) {
    if (!g.body(r)) fail("rule '{}' is used but never defined", g.name(r));
    if (nfa.out.size() + sizes.of(*g.body(r), 0) > kMaxNfaStates)
      fail("the grammar is too large (more than {} states); reduce repetition counts", kMaxStates);
    ends[size_t(r)] = {nfa.add(), nfa.add()};
    nfa.expand(*g.body(r), ends[size_t(r)].first, ends[size_t(r)].second, 0);
  }
  Pda pda;
  pda.root = g.root();
  SubsetBuilder sb(nfa, pda);
  for (int r = 0; r < g.size(); ++r) {
    pda.rule_names.push_back(g.name(r));
    pda.rule_start.push_back(sb.build(r, ends[size_t(r)].first, ends[size_t(r)].second));
  }
  for (size_t n = 0; n < pda.nodes.size(); ++n) {
    auto& b = sb.nodes_edges_[n];
    Pda::Node& node = pda.nodes[n];
    node.e0 = uint32_t(pda.edges.size());
    pda.edges.insert(pda.edges.end(), b.edges.begin(), b.edges.end());
    node.e1 = uint32_t(pda.edges.size());
    node.c0 = uint32_t(pda.calls.size());
    pda.calls.insert(pda.calls.end(), b.calls.begin(), b.calls.end());
    node.c1 = uint32_t(pda.calls.size());
    node.t0 = uint32_t(pda.token_edges.size());
    pda.token_edges.insert(pda.token_edges.end(), b.tokens.begin(), b.tokens.end());
    node.t1 = uint32_t(pda.token_edges.size());
  }
  return pda;
}

}  // namespace tern::grammar
