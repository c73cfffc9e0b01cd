// JSON Schema `pattern`: the regular subset of ECMA-262 regular expressions
// (literals, escapes, classes, `.`, groups, alternation, greedy and lazy
// quantifiers, `^` at the start and `$` at the end) as a code-point
// automaton of the strings the pattern matches somewhere, as a validator's
// search does. Where ECMA-262 and Python's `re` (used by python-jsonschema)
// disagree, tern takes what both accept: `\D \W` and negated classes holding
// `\d \w \D \W` match ASCII only, `\s` is the whitespace both agree on.
// Backreferences, lookaround, word boundaries, flags and Unicode property
// escapes are refused with an Error naming them.
#pragma once

#include <string_view>

#include "grammar/char_fsa.h"

namespace tern::grammar {

CharFsa pattern_language(std::string_view pattern);

}  // namespace tern::grammar
