// One rule's deterministic automaton, and its minimisation (Hopcroft's
// partition refinement): the subset construction leaves equivalent states
// apart (alternatives that meet again, every copy of a character class), and
// fewer states mean fewer token classifications to compute and keep.
#pragma once

#include <vector>

#include "grammar/pda.h"

namespace tern::grammar {

// Targets are state numbers of the same RuleDfa; state 0 is the start.
struct RuleDfa {
  struct State {
    bool final = false;
    std::vector<Pda::Edge> edges;        // sorted, disjoint
    std::vector<Pda::Call> calls;        // sorted by rule, one per rule
    std::vector<Pda::TokenEdge> tokens;  // sorted by token, one per token
  };
  std::vector<State> states;
};

// The equivalent automaton with the fewest states (unreachable ones dropped).
RuleDfa minimize(const RuleDfa& dfa);

}  // namespace tern::grammar
