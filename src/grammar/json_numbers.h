// JSON numbers within bounds (minimum, maximum, exclusiveMinimum,
// exclusiveMaximum) as exact languages of number texts. A bound is the
// decimal a validator compares against: for "number" the shortest decimal of
// the double (numbers with at most 15 significant digits compare as doubles
// do), for "integer" the exact value (Python compares integers exactly).
// Bounded numbers are written without an exponent.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "grammar/grammar.h"

namespace tern::grammar {

// A decimal number: digits without leading zeros ("0" for zero), fraction
// digits without trailing zeros.
struct Decimal {
  bool negative = false;
  std::string int_part = "0";
  std::string frac;
  bool is_zero() const { return int_part == "0" && frac.empty(); }
};

// The decimal of a JSON number: integers exactly; doubles as their shortest
// decimal, or (exact_integers, for integer bounds) exactly when at least 2^53.
Decimal decimal_of(const nlohmann::ordered_json& number, bool exact_integers);
// <0, 0, >0 as a < b, a == b, a > b.
int compare(const Decimal& a, const Decimal& b);

struct Bound {
  nlohmann::ordered_json value;  // a JSON number
  bool exclusive = false;
};

struct NumberBounds {
  std::optional<Bound> lo, hi;
  uint64_t multiple_of = 0;  // multipleOf (a positive integer up to kMaxMultipleOf), 0: none
  bool empty() const { return !lo && !hi && multiple_of == 0; }
};

// multipleOf is enforced for integer divisors up to this (an automaton of
// one state per remainder).
constexpr uint64_t kMaxMultipleOf = 1000;

// The texts of the integers / numbers within the bounds (nothing() when none);
// with multiple_of, integer texts only.
ExprPtr integer_text(const NumberBounds& b);
ExprPtr number_text(const NumberBounds& b);
// Whether the number `v` (a JSON number) lies within the bounds (compared exactly).
bool within(const NumberBounds& b, const nlohmann::ordered_json& v);
// The tighter of two bounds on the same side (lower: larger value wins).
Bound tighter(const Bound& a, const Bound& b, bool lower);

}  // namespace tern::grammar
