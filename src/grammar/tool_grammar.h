// The Qwen3.5/3.6 tool-call format as a grammar, as the chat template renders
// calls: <tool_call> (added token) "\n<function=NAME>\n", then per parameter
// "<parameter=P>\n" VALUE "\n</parameter>\n", then "</function>\n"
// </tool_call> (added token). Each VALUE is what tern's parser
// (tokenizer/tool_call.cpp, typed_value) turns into a JSON value that
// validates against the parameter's schema: raw text for strings, JSON text
// for the other types, never containing a closing tag.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

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

// tools: the request's "tools" list. tern::Error on a tool or parameter the
// format cannot express, or a named function that is not in the list.
Grammar tool_call_grammar(const nlohmann::ordered_json& tools, const ToolGrammarOptions& options,
                          const Vocab& vocab);

}  // namespace tern::grammar
