// A compiled grammar: every rule becomes a deterministic automaton over bytes
// whose edges may also call another rule or take an added token; together
// they form the pushdown automaton the matcher runs. compile() checks the
// grammar (undefined rules, rules that can never finish, left recursion, size)
// and throws tern::Error naming the problem.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace tern::grammar {

// Compiled grammars are refused above this many automaton states.
constexpr size_t kMaxStates = 250000;

struct Pda {
  struct Edge {
    uint8_t lo, hi;  // bytes lo..hi
    int32_t to;
  };
  struct Call {
    int32_t rule, ret;  // runs `rule`, then continues at node `ret`
  };
  struct TokenEdge {
    int32_t token, to;
  };
  struct Node {
    uint32_t e0 = 0, e1 = 0, c0 = 0, c1 = 0, t0 = 0, t1 = 0;  // [begin, end) of each list
    int32_t rule = 0;
    bool final = false;  // the rule may end here
    // A final node without any way on: calling a rule that returns here needs no frame.
    bool tail() const { return final && e0 == e1 && c0 == c1 && t0 == t1; }
    bool consumes() const { return e0 != e1 || t0 != t1; }
  };

  std::vector<Node> nodes;
  std::vector<Edge> edges;  // per node sorted by lo, disjoint
  std::vector<Call> calls;
  std::vector<TokenEdge> token_edges;
  std::vector<int32_t> rule_start;               // per rule
  std::vector<std::string> rule_names;           // per rule
  std::vector<std::vector<int32_t>> call_sites;  // per rule: the return nodes of its calls
  int32_t root = 0;

  // The node after byte b from `node`, or -1.
  int32_t step(int32_t node, uint8_t b) const {
    const Node& n = nodes[size_t(node)];
    for (uint32_t i = n.e0; i < n.e1; ++i) {
      const Edge& e = edges[i];
      if (b < e.lo) return -1;
      if (b <= e.hi) return e.to;
    }
    return -1;
  }
  std::span<const Edge> edges_of(int32_t node) const {
    const Node& n = nodes[size_t(node)];
    return {edges.data() + n.e0, n.e1 - n.e0};
  }
  std::span<const Call> calls_of(int32_t node) const {
    const Node& n = nodes[size_t(node)];
    return {calls.data() + n.c0, n.c1 - n.c0};
  }
  std::span<const TokenEdge> tokens_of(int32_t node) const {
    const Node& n = nodes[size_t(node)];
    return {token_edges.data() + n.t0, n.t1 - n.t0};
  }
};

Pda compile(const Grammar& g);

}  // namespace tern::grammar
