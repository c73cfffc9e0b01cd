#include "grammar/determinize.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>

#include "core/error.h"
#include "grammar/minimize.h"

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

// The subset construction for one rule: each state is the set of NFA states
// the bytes so far may have reached.
class SubsetBuilder {
 public:
  explicit SubsetBuilder(const Nfa& nfa) : nfa_(nfa), mark_(nfa.out.size(), 0) {}

  // Rule r's automaton from its NFA start and accepting state; `budget`: states allowed.
  RuleDfa build(int start, int accept, size_t budget) {
    accept_ = accept;
    budget_ = budget;
    ids_.clear();
    dfa_.states.clear();
    intern(closure(std::span(&start, 1)));
    while (!todo_.empty()) {
      auto [id, set] = std::move(todo_.back());
      todo_.pop_back();
      expand(id, set);
    }
    return std::move(dfa_);
  }

 private:
  // The states reachable by empty edges from `seeds`, keeping those with
  // other edges and the accepting one, sorted.
  std::vector<int> closure(std::span<const int> seeds) {
    ++gen_;
    stack_.assign(seeds.begin(), seeds.end());
    std::vector<int> out;
    while (!stack_.empty()) {
      int s = stack_.back();
      stack_.pop_back();
      if (mark_[size_t(s)] == gen_) continue;
      mark_[size_t(s)] = gen_;
      bool keep = s == accept_;
      for (const NEdge& e : nfa_.out[size_t(s)]) {
        if (e.kind == NEdge::eps)
          stack_.push_back(e.to);
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
    if (dfa_.states.size() >= budget_)
      fail("the grammar is too large (more than {} states); reduce repetition counts", kMaxStates);
    auto id = int32_t(dfa_.states.size());
    dfa_.states.emplace_back();
    dfa_.states.back().final = std::binary_search(set.begin(), set.end(), accept_);
    ids_.emplace(set, id);
    todo_.emplace_back(id, std::move(set));
    return id;
  }

  void expand(int32_t id, const std::vector<int>& set) {
    bytes_.clear();
    others_.clear();
    for (int s : set)
      for (const NEdge& e : nfa_.out[size_t(s)]) {
        if (e.kind == NEdge::byte) bytes_.push_back(&e);
        if (e.kind == NEdge::call || e.kind == NEdge::token) others_.push_back(&e);
      }
    RuleDfa::State st;  // intern() grows dfa_.states: stored at the end
    st.final = dfa_.states[size_t(id)].final;
    // Elementary byte intervals between the edges' boundaries, adjacent equal targets merged.
    cuts_.clear();
    for (const NEdge* e : bytes_) cuts_.push_back(e->lo), cuts_.push_back(e->hi + 1);
    std::sort(cuts_.begin(), cuts_.end());
    cuts_.erase(std::unique(cuts_.begin(), cuts_.end()), cuts_.end());
    prev_.clear();
    for (size_t i = 0; i + 1 < cuts_.size(); ++i) {
      int lo = cuts_[i], hi = cuts_[i + 1] - 1;
      targets_.clear();
      for (const NEdge* e : bytes_)
        if (e->lo <= lo && hi <= e->hi) targets_.push_back(e->to);
      if (targets_.empty()) {
        prev_.clear();
        continue;
      }
      if (!st.edges.empty() && targets_ == prev_ && st.edges.back().hi + 1 == lo) {
        st.edges.back().hi = uint8_t(hi);
        continue;
      }
      prev_ = targets_;
      st.edges.push_back({uint8_t(lo), uint8_t(hi), intern(closure(targets_))});
    }
    // Calls and tokens, grouped by rule / token.
    std::sort(others_.begin(), others_.end(), [](const NEdge* a, const NEdge* b) {
      return a->kind != b->kind ? a->kind < b->kind : a->arg < b->arg;
    });
    for (size_t i = 0; i < others_.size();) {
      size_t j = i;
      targets_.clear();
      for (; j < others_.size() && others_[j]->kind == others_[i]->kind &&
             others_[j]->arg == others_[i]->arg;
           ++j)
        targets_.push_back(others_[j]->to);
      const int32_t to = intern(closure(targets_));
      if (others_[i]->kind == NEdge::call)
        st.calls.push_back({others_[i]->arg, to});
      else
        st.tokens.push_back({others_[i]->arg, to});
      i = j;
    }
    dfa_.states[size_t(id)] = std::move(st);
  }

  const Nfa& nfa_;
  std::vector<const NEdge*> bytes_, others_;  // buffers of expand()
  std::vector<int> cuts_, targets_, prev_, stack_;
  std::vector<uint32_t> mark_;
  uint32_t gen_ = 0;
  int accept_ = 0;
  size_t budget_ = 0;
  RuleDfa dfa_;
  std::unordered_map<std::vector<int>, int32_t, VectorHash> ids_;
  std::vector<std::pair<int32_t, std::vector<int>>> todo_;
};

// Automata of keyed rules (Grammar::set_key), for every grammar of the process.
class KeyedRules {
 public:
  std::shared_ptr<const RuleDfa> find(const std::string& key) {
    std::lock_guard lock(mutex_);
    auto it = rules_.find(key);
    return it == rules_.end() ? nullptr : it->second;
  }
  void add(const std::string& key, std::shared_ptr<const RuleDfa> dfa) {
    std::lock_guard lock(mutex_);
    if (states_ + dfa->states.size() > kMaxKeptStates) rules_.clear(), states_ = 0;
    states_ += dfa->states.size();
    rules_.emplace(key, std::move(dfa));
  }

 private:
  static constexpr size_t kMaxKeptStates = 4 * kMaxStates;
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const RuleDfa>> rules_;
  size_t states_ = 0;
};

KeyedRules& keyed_rules() {
  static KeyedRules k;
  return k;
}

}  // namespace

size_t expansion_bound(const Grammar& g, int first_rule, const ExprPtr& e) {
  ExpansionSize sizes;
  size_t n = sizes.of(*e, 0);
  for (int r = first_rule; r < g.size(); ++r) n += sizes.of(*g.body(r), 0);
  return n;
}

ExprPtr minimized(const ExprPtr& e) {
  Nfa nfa;
  const int start = nfa.add(), accept = nfa.add();
  nfa.expand(*e, start, accept, 0);
  const RuleDfa dfa = minimize(SubsetBuilder(nfa).build(start, accept, kMaxStates));
  ExprGraph g;
  g.states = int(dfa.states.size());
  for (size_t s = 0; s < dfa.states.size(); ++s) {
    const RuleDfa::State& st = dfa.states[s];
    TERN_CHECK(st.calls.empty() && st.tokens.empty());
    if (st.final) g.finals.push_back(int(s));
    for (const Pda::Edge& edge : st.edges)
      g.edges.push_back({int(s), edge.to, byte_range(edge.lo, edge.hi)});
  }
  return graph(std::move(g));
}

Pda determinize(const Grammar& g) {
  Nfa nfa;
  std::vector<std::pair<int, int>> ends(size_t(g.size()));
  ExpansionSize sizes;
  std::vector<std::shared_ptr<const RuleDfa>> kept(size_t(g.size()));  // keyed rules found
  for (int r = 0; r < g.size(); ++r) {
    if (!g.body(r)) fail("rule '{}' is used but never defined", g.name(r));
    if (!g.key(r).empty() && (kept[size_t(r)] = keyed_rules().find(g.key(r)))) continue;
    if (nfa.out.size() + sizes.of(*g.body(r), 0) > kMaxNfaStates)
      fail("the grammar is too large (more than {} states); reduce repetition counts", kMaxStates);
    ends[size_t(r)] = {nfa.add(), nfa.add()};
    nfa.expand(*g.body(r), ends[size_t(r)].first, ends[size_t(r)].second, 0);
  }
  Pda pda;
  pda.root = g.root();
  SubsetBuilder sb(nfa);
  for (int r = 0; r < g.size(); ++r) {
    if (!kept[size_t(r)]) {
      // Subset construction may need more states than minimisation keeps: allow twice the budget.
      kept[size_t(r)] = std::make_shared<const RuleDfa>(minimize(sb.build(
          ends[size_t(r)].first, ends[size_t(r)].second, 2 * kMaxStates - pda.nodes.size())));
      if (!g.key(r).empty()) keyed_rules().add(g.key(r), kept[size_t(r)]);
    }
    const RuleDfa& dfa = *kept[size_t(r)];
    if (pda.nodes.size() + dfa.states.size() > kMaxStates)
      fail("the grammar is too large (more than {} states); reduce repetition counts", kMaxStates);
    const auto base = int32_t(pda.nodes.size());
    pda.rule_names.push_back(g.name(r));
    pda.rule_start.push_back(base);
    for (const RuleDfa::State& st : dfa.states) {
      Pda::Node node;
      node.rule = r;
      node.final = st.final;
      node.e0 = uint32_t(pda.edges.size());
      for (const Pda::Edge& e : st.edges) pda.edges.push_back({e.lo, e.hi, base + e.to});
      node.e1 = uint32_t(pda.edges.size());
      node.c0 = uint32_t(pda.calls.size());
      for (const Pda::Call& c : st.calls) pda.calls.push_back({c.rule, base + c.ret});
      node.c1 = uint32_t(pda.calls.size());
      node.t0 = uint32_t(pda.token_edges.size());
      for (const Pda::TokenEdge& t : st.tokens) pda.token_edges.push_back({t.token, base + t.to});
      node.t1 = uint32_t(pda.token_edges.size());
      pda.nodes.push_back(node);
    }
  }
  return pda;
}

}  // namespace tern::grammar
