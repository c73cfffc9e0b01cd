// Expressions to automata: every rule's body is expanded into a
// nondeterministic automaton (Thompson's construction) and made deterministic
// by the subset construction, one rule at a time. Internal to compile().
#pragma once

#include "grammar/grammar.h"
#include "grammar/pda.h"

namespace tern::grammar {

// The automata of every rule of g, unchecked and untrimmed (pda_checks.cpp).
Pda determinize(const Grammar& g);

// An upper bound of the automaton states that e and the bodies of rules
// first_rule.. of g add to determinize()'s expansion (which refuses a grammar
// above 4 * kMaxStates): lets a builder keep a part within a budget.
size_t expansion_bound(const Grammar& g, int first_rule, const ExprPtr& e);

// e (bytes only: no rules, no tokens) as its minimal automaton, a graph with
// byte labels: for an expression that is copied many times (the character
// class of every position of a bounded string), so that each copy is small.
ExprPtr minimized(const ExprPtr& e);

}  // namespace tern::grammar
