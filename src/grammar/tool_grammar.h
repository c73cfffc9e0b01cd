// The Qwen3.5/3.6 tool-call format as a grammar, as the chat template renders
// calls: <tool_call> (added token) "\n<function=NAME>\n", then per parameter
// "<parameter=P>\n" VALUE "\n</parameter>\n", then "</function>\n"
// </tool_call> (added token). Each VALUE is what tern's parser
// (chat/tool_call.cpp, typed_value) turns into a JSON value that
// validates against the parameter's schema: raw text for strings, JSON text
// for the other types, never containing a closing tag.
//
// Tool schemas never fail a request: what the grammar cannot enforce is
// dropped (a keyword, a bound, or a parameter's whole schema, which becomes
// any value of its declared type) and reported as a ToolDegradation. The
// parameters of a function with at most kAnyOrderParameters of them may come
// in any order (each at most once, the required ones all present); beyond
// that, in the schema's order.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/vocab.h"

namespace tern::grammar {

struct ToolGrammarOptions {
  std::string function;  // only this function ("": any of the tools)
  bool parallel = true;  // one or more calls (else exactly one)
  // "auto": the grammar starts after a <tool_call> token the model chose and
  // ends with one call's </tool_call>.
  bool after_open = false;
};

// Any order is a subset construction: 2^n automaton states for n parameters.
constexpr int kAnyOrderParameters = 8;

// A constraint of a tool's schema that the grammar does not enforce.
struct ToolDegradation {
  std::string tool, parameter;  // parameter "": the tool's whole arguments
  std::string keyword, path;    // path: a JSON pointer in the parameters' schema
  std::string why;
};

// tools: the request's "tools" list. tern::Error only when a tool is not an
// object with a function name, on a name the format cannot write, or a named
// function that is not in the list; `degraded` (when given) receives what was
// dropped.
Grammar tool_call_grammar(const nlohmann::ordered_json& tools, const ToolGrammarOptions& options,
                          const Vocab& vocab, std::vector<ToolDegradation>* degraded = nullptr);

}  // namespace tern::grammar
