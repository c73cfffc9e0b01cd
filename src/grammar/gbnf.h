// llama.cpp's GBNF grammar syntax (the `grammar` field of a request):
// `name ::= alternatives` rules, "literals", [character classes], `.`,
// groups, `* + ? {m} {m,} {m,n}`, `#` comments, and tokens `<[id]>` or
// `<text>` of an added token. Errors name the line and column.
#pragma once

#include <string_view>

#include "grammar/grammar.h"
#include "grammar/vocab.h"

namespace tern::grammar {

// The grammar whose root is the rule `root`. `vocab` resolves `<text>` tokens
// and checks `<[id]>` (nullptr: no token terminals allowed).
Grammar parse_gbnf(std::string_view text, const Vocab* vocab);

}  // namespace tern::grammar
