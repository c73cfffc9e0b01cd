#include "grammar/minimize.h"

#include <algorithm>
#include <map>

namespace tern::grammar {

// Hopcroft's refinement on the partial automaton: the first partition puts
// states together only when they agree on being final and on which symbols
// they have a transition for, so that no dead state is needed and the work
// follows the edges that exist.
RuleDfa minimize(const RuleDfa& dfa) {
  const int n = int(dfa.states.size());
  // Symbols: the byte intervals no edge boundary cuts, then each called rule and token.
  std::vector<int> cuts = {0, 256};
  std::map<int32_t, int> call_sym, token_sym;
  for (const RuleDfa::State& s : dfa.states) {
    for (const Pda::Edge& e : s.edges) cuts.push_back(e.lo), cuts.push_back(e.hi + 1);
    for (const Pda::Call& c : s.calls) call_sym.emplace(c.rule, 0);
    for (const Pda::TokenEdge& t : s.tokens) token_sym.emplace(t.token, 0);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  const int bytes = int(cuts.size()) - 1;
  int sym = bytes;
  for (auto& [r, id] : call_sym) id = sym++;
  for (auto& [t, id] : token_sym) id = sym++;
  const size_t S = size_t(sym);
  // Transitions, and per (symbol, target) their sources: src[start[a * n + t] .. start[a * n + t +
  // 1]).
  struct T {
    int from, a, to;
  };
  std::vector<T> trans;
  std::vector<std::vector<int>> defined(static_cast<size_t>(n));  // the symbols each state has
  for (int s = 0; s < n; ++s) {
    const RuleDfa::State& st = dfa.states[size_t(s)];
    for (const Pda::Edge& e : st.edges) {
      int a = int(std::lower_bound(cuts.begin(), cuts.end(), int(e.lo)) - cuts.begin());
      for (; a < bytes && cuts[size_t(a)] <= e.hi; ++a) trans.push_back({s, a, e.to});
    }
    for (const Pda::Call& c : st.calls) trans.push_back({s, call_sym[c.rule], c.ret});
    for (const Pda::TokenEdge& t : st.tokens) trans.push_back({s, token_sym[t.token], t.to});
  }
  std::vector<int> start(S * size_t(n) + 1, 0), src(trans.size());
  for (const T& t : trans) {
    defined[size_t(t.from)].push_back(t.a);
    ++start[size_t(t.a) * size_t(n) + size_t(t.to) + 1];
  }
  for (size_t i = 1; i < start.size(); ++i) start[i] += start[i - 1];
  {
    std::vector<int> fill(start.begin(), start.end() - 1);
    for (const T& t : trans) src[size_t(fill[size_t(t.a) * size_t(n) + size_t(t.to)]++)] = t.from;
  }
  // The first partition, then blocks as runs of `elems`.
  std::vector<int> elems(static_cast<size_t>(n)), where(static_cast<size_t>(n)),
      block(static_cast<size_t>(n));
  std::vector<int> first, size, marked;
  {
    std::map<std::pair<bool, std::vector<int>>, std::vector<int>> groups;
    for (int s = 0; s < n; ++s)
      groups[{dfa.states[size_t(s)].final, defined[size_t(s)]}].push_back(s);
    int pos = 0;
    for (auto& [key, members] : groups) {
      first.push_back(pos), size.push_back(int(members.size())), marked.push_back(0);
      for (int s : members) {
        elems[size_t(pos)] = s, where[size_t(s)] = pos++;
        block[size_t(s)] = int(first.size()) - 1;
      }
    }
  }
  std::vector<std::pair<int, int>> work;        // (block, symbol) splitters
  std::vector<char> waiting(S * size_t(n), 0);  // block * S + symbol: in `work`
  auto wait = [&](int b, int a) {
    char& w = waiting[size_t(b) * S + size_t(a)];
    if (!w) w = 1, work.push_back({b, a});
  };
  for (int b = 0; b < int(first.size()); ++b)
    for (size_t a = 0; a < S; ++a) wait(b, int(a));
  std::vector<int> touched;
  while (!work.empty()) {
    auto [b, a] = work.back();
    work.pop_back();
    waiting[size_t(b) * S + size_t(a)] = 0;
    touched.clear();
    // Mark the states that go by a into block b (moving each to its block's marked front).
    for (int i = first[size_t(b)], e = first[size_t(b)] + size[size_t(b)]; i < e; ++i) {
      const size_t key = size_t(a) * size_t(n) + size_t(elems[size_t(i)]);
      for (int k = start[key]; k < start[key + 1]; ++k) {
        const int s = src[size_t(k)];
        const int y = block[size_t(s)];
        if (where[size_t(s)] < first[size_t(y)] + marked[size_t(y)]) continue;  // already marked
        if (marked[size_t(y)] == 0) touched.push_back(y);
        const int front = first[size_t(y)] + marked[size_t(y)]++;
        const int other = elems[size_t(front)];
        std::swap(elems[size_t(front)], elems[size_t(where[size_t(s)])]);
        std::swap(where[size_t(other)], where[size_t(s)]);
      }
    }
    for (int y : touched) {
      const int m = marked[size_t(y)];
      marked[size_t(y)] = 0;
      if (m == size[size_t(y)]) continue;
      // Split: the marked front becomes a new block z.
      const int z = int(first.size());
      first.push_back(first[size_t(y)]), size.push_back(m), marked.push_back(0);
      first[size_t(y)] += m, size[size_t(y)] -= m;
      for (int i = first[size_t(z)]; i < first[size_t(z)] + m; ++i)
        block[size_t(elems[size_t(i)])] = z;
      for (size_t c = 0; c < S; ++c)
        wait(waiting[size_t(y) * S + c] || size[size_t(z)] <= size[size_t(y)] ? z : y, int(c));
    }
  }
  // One state per block reachable from the start, numbered in order of discovery.
  std::vector<int> id(first.size(), -1), order = {block[0]};
  id[size_t(block[0])] = 0;
  RuleDfa out;
  for (size_t k = 0; k < order.size(); ++k) {
    const RuleDfa::State& rep = dfa.states[size_t(elems[size_t(first[size_t(order[k])])])];
    auto target = [&](int s) {
      const int b = block[size_t(s)];
      if (id[size_t(b)] < 0) id[size_t(b)] = int(order.size()), order.push_back(b);
      return id[size_t(b)];
    };
    RuleDfa::State st;
    st.final = rep.final;
    for (const Pda::Edge& e : rep.edges) {
      const int t = target(e.to);
      if (!st.edges.empty() && st.edges.back().to == t && st.edges.back().hi + 1 == e.lo)
        st.edges.back().hi = e.hi;
      else
        st.edges.push_back({e.lo, e.hi, t});
    }
    for (const Pda::Call& c : rep.calls) st.calls.push_back({c.rule, target(c.ret)});
    for (const Pda::TokenEdge& t : rep.tokens) st.tokens.push_back({t.token, target(t.to)});
    out.states.push_back(std::move(st));
  }
  return out;
}

}  // namespace tern::grammar
