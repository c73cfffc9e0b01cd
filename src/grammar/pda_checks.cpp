// compile(): the automata of determinize() checked and trimmed. Rules that can
// never finish are cut off (an error when that leaves the root with nothing),
// left recursion is refused (the matcher's closure would not terminate), and
// the nodes nothing reaches are dropped.
#include <algorithm>
#include <cstdint>
#include <functional>

#include "core/error.h"
#include "grammar/determinize.h"

namespace tern::grammar {
namespace {

// The least set of nodes closed under `holds` (which reads the current set):
// when a node joins, the nodes listed in deps[node] are re-examined.
std::vector<char> fixpoint(size_t n,
                           const std::function<bool(size_t, const std::vector<char>&)>& holds,
                           const std::vector<std::vector<int32_t>>& deps) {
  std::vector<char> in(n, 0);
  std::vector<size_t> work;
  for (size_t i = 0; i < n; ++i)
    if (holds(i, in)) in[i] = 1, work.push_back(i);
  while (!work.empty()) {
    size_t m = work.back();
    work.pop_back();
    for (int32_t d : deps[m])
      if (!in[size_t(d)] && holds(size_t(d), in)) in[size_t(d)] = 1, work.push_back(size_t(d));
  }
  return in;
}

// For each node, the nodes whose property may depend on it: predecessors by
// bytes and tokens (when `by_edges`), callers returning to it, and, for a
// rule's start node, every caller of that rule.
std::vector<std::vector<int32_t>> dependents(const Pda& p, bool by_edges) {
  std::vector<std::vector<int32_t>> deps(p.nodes.size());
  for (size_t n = 0; n < p.nodes.size(); ++n) {
    if (by_edges) {
      for (const Pda::Edge& e : p.edges_of(int32_t(n))) deps[size_t(e.to)].push_back(int32_t(n));
      for (const Pda::TokenEdge& e : p.tokens_of(int32_t(n)))
        deps[size_t(e.to)].push_back(int32_t(n));
    }
    for (const Pda::Call& c : p.calls_of(int32_t(n))) {
      deps[size_t(c.ret)].push_back(int32_t(n));
      deps[size_t(p.rule_start[size_t(c.rule)])].push_back(int32_t(n));
    }
  }
  return deps;
}

// Nodes from which the rule can end: by bytes, tokens and calls of rules that can end.
std::vector<char> productive(const Pda& p) {
  auto holds = [&](size_t n, const std::vector<char>& in) {
    if (p.nodes[n].final) return true;
    for (const Pda::Edge& e : p.edges_of(int32_t(n)))
      if (in[size_t(e.to)]) return true;
    for (const Pda::TokenEdge& e : p.tokens_of(int32_t(n)))
      if (in[size_t(e.to)]) return true;
    for (const Pda::Call& c : p.calls_of(int32_t(n)))
      if (in[size_t(c.ret)] && in[size_t(p.rule_start[size_t(c.rule)])]) return true;
    return false;
  };
  return fixpoint(p.nodes.size(), holds, dependents(p, true));
}

// Nodes from which the rule can end without consuming anything.
std::vector<char> nullable(const Pda& p) {
  auto holds = [&](size_t n, const std::vector<char>& in) {
    if (p.nodes[n].final) return true;
    for (const Pda::Call& c : p.calls_of(int32_t(n)))
      if (in[size_t(c.ret)] && in[size_t(p.rule_start[size_t(c.rule)])]) return true;
    return false;
  };
  return fixpoint(p.nodes.size(), holds, dependents(p, false));
}

// Keeps the nodes reachable from the root through edges that lead somewhere
// productive, renumbered in order.
Pda trim(const Pda& p, const std::vector<char>& prod) {
  auto live_call = [&](const Pda::Call& c) {
    return prod[size_t(c.ret)] && prod[size_t(p.rule_start[size_t(c.rule)])];
  };
  std::vector<int32_t> id(p.nodes.size(), -1);
  std::vector<int32_t> order, stack = {p.rule_start[size_t(p.root)]};
  while (!stack.empty()) {
    int32_t n = stack.back();
    stack.pop_back();
    if (id[size_t(n)] >= 0) continue;
    id[size_t(n)] = int32_t(order.size());
    order.push_back(n);
    for (const Pda::Edge& e : p.edges_of(n))
      if (prod[size_t(e.to)]) stack.push_back(e.to);
    for (const Pda::TokenEdge& e : p.tokens_of(n))
      if (prod[size_t(e.to)]) stack.push_back(e.to);
    for (const Pda::Call& c : p.calls_of(n))
      if (live_call(c)) stack.push_back(c.ret), stack.push_back(p.rule_start[size_t(c.rule)]);
  }
  Pda out;
  out.root = p.root;
  out.rule_names = p.rule_names;
  out.rule_start.resize(p.rule_start.size(), -1);
  for (size_t r = 0; r < p.rule_start.size(); ++r) out.rule_start[r] = id[size_t(p.rule_start[r])];
  for (int32_t n : order) {
    Pda::Node node = p.nodes[size_t(n)];
    node.e0 = uint32_t(out.edges.size());
    for (const Pda::Edge& e : p.edges_of(n))
      if (prod[size_t(e.to)]) out.edges.push_back({e.lo, e.hi, id[size_t(e.to)]});
    node.e1 = uint32_t(out.edges.size());
    node.c0 = uint32_t(out.calls.size());
    for (const Pda::Call& c : p.calls_of(n))
      if (live_call(c)) out.calls.push_back({c.rule, id[size_t(c.ret)]});
    node.c1 = uint32_t(out.calls.size());
    node.t0 = uint32_t(out.token_edges.size());
    for (const Pda::TokenEdge& e : p.tokens_of(n))
      if (prod[size_t(e.to)]) out.token_edges.push_back({e.token, id[size_t(e.to)]});
    node.t1 = uint32_t(out.token_edges.size());
    out.nodes.push_back(node);
  }
  return out;
}

// Rules reachable from the root (before trimming) that can never finish.
std::string unfinishable(const Pda& p, const std::vector<char>& prod) {
  std::vector<char> seen_rule(p.rule_start.size(), 0), seen(p.nodes.size(), 0);
  std::vector<int32_t> stack = {p.rule_start[size_t(p.root)]};
  std::string out;
  int named = 0;
  while (!stack.empty()) {
    int32_t n = stack.back();
    stack.pop_back();
    if (seen[size_t(n)]) continue;
    seen[size_t(n)] = 1;
    const int32_t r = p.nodes[size_t(n)].rule;
    if (!seen_rule[size_t(r)]) {
      seen_rule[size_t(r)] = 1;
      if (!prod[size_t(p.rule_start[size_t(r)])] && named++ < 3)
        out += (out.empty() ? "rule '" : ", '") + p.rule_names[size_t(r)] + "'";
    }
    for (const Pda::Edge& e : p.edges_of(n)) stack.push_back(e.to);
    for (const Pda::TokenEdge& e : p.tokens_of(n)) stack.push_back(e.to);
    for (const Pda::Call& c : p.calls_of(n))
      stack.push_back(c.ret), stack.push_back(p.rule_start[size_t(c.rule)]);
  }
  return out;
}

// Refuses a rule that can call itself before consuming anything.
void check_left_recursion(const Pda& p) {
  const std::vector<char> null = nullable(p);
  const size_t rules = p.rule_start.size();
  // left[r]: the rules r calls before consuming anything.
  std::vector<std::vector<int32_t>> left(rules);
  std::vector<size_t> mark(p.nodes.size(), SIZE_MAX);
  for (size_t r = 0; r < rules; ++r) {
    if (p.rule_start[r] < 0) continue;
    std::vector<int32_t> stack = {p.rule_start[r]};
    while (!stack.empty()) {
      int32_t n = stack.back();
      stack.pop_back();
      if (mark[size_t(n)] == r) continue;
      mark[size_t(n)] = r;
      for (const Pda::Call& c : p.calls_of(n)) {
        left[r].push_back(c.rule);
        if (null[size_t(p.rule_start[size_t(c.rule)])]) stack.push_back(c.ret);
      }
    }
  }
  // Depth-first search for a cycle, iteratively (grammars may have many rules).
  std::vector<int> color(rules, 0);              // 0 new, 1 on the path, 2 done
  std::vector<std::pair<int32_t, size_t>> path;  // rule, next index into left[rule]
  for (size_t start = 0; start < rules; ++start) {
    if (color[start] != 0 || p.rule_start[start] < 0) continue;
    color[start] = 1;
    path.push_back({int32_t(start), 0});
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i == left[size_t(r)].size()) {
        color[size_t(r)] = 2;
        path.pop_back();
        continue;
      }
      int32_t s = left[size_t(r)][i++];
      if (color[size_t(s)] == 1) {
        std::string cycle;
        size_t k = 0;
        while (path[k].first != s) ++k;
        for (; k < path.size(); ++k) cycle += p.rule_names[size_t(path[k].first)] + " -> ";
        fail("left recursion: rule '{}' can reach itself without consuming input ({}{})",
             p.rule_names[size_t(s)], cycle, p.rule_names[size_t(s)]);
      }
      if (color[size_t(s)] == 0) {
        color[size_t(s)] = 1;
        path.push_back({s, 0});
      }
    }
  }
}

}  // namespace

Pda compile(const Grammar& g) {
  if (g.size() == 0) fail("the grammar has no rules");
  Pda raw = determinize(g);
  const std::vector<char> prod = productive(raw);
  if (!prod[size_t(raw.rule_start[size_t(raw.root)])])
    fail(
        "no finite text matches the grammar: {} can never finish (an impossible constraint, or a "
        "recursion without a base case)",
        unfinishable(raw, prod));
  Pda p = trim(raw, prod);
  check_left_recursion(p);
  p.call_sites.resize(p.rule_start.size());
  for (const Pda::Call& c : p.calls) p.call_sites[size_t(c.rule)].push_back(c.ret);
  for (auto& sites : p.call_sites) {
    std::sort(sites.begin(), sites.end());
    sites.erase(std::unique(sites.begin(), sites.end()), sites.end());
  }
  return p;
}

}  // namespace tern::grammar
