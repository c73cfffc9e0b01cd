// What a request asks the grammar engine for (the answer's format, the tools
// and how they may be called: the server reads those fields, and here
// response_format and, on completions, llama.cpp's grammar and json_schema),
// compiled grammars cached by request, and the TokenConstraint of one
// generation. Malformed fields and
// grammars are tern::Error naming the problem (the server's 400).
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <semaphore>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/grammar_constraint.h"

namespace tern::grammar {

struct ConstraintRequest {
  enum class Answer { free, json_schema, json_object, gbnf };
  enum class Tools { none, automatic, required, named };
  Answer answer = Answer::free;
  nlohmann::ordered_json schema;  // Answer::json_schema
  std::string gbnf;               // Answer::gbnf
  Tools tools = Tools::none;      // none: no tools, or tool_choice "none"
  nlohmann::ordered_json tool_list;
  std::string function;  // Tools::named
  bool parallel = true;  // parallel_tool_calls

  bool empty() const { return answer == Answer::free && tools == Tools::none; }
  // Names the compiled grammar (with thinking, answers may start after newlines).
  std::string key(bool thinking) const;
};

// An OpenAI response format {type: text | json_object | json_schema, ...} into
// r's answer: chat completions' response_format (json_schema nested) or the
// Responses API's text.format (name and schema beside type); errors name `where`.
void response_format(const nlohmann::ordered_json& format, const std::string& where,
                     ConstraintRequest& r);
// /v1/completions: grammar (GBNF text), json_schema (a schema), response_format.
ConstraintRequest completion_constraints(const nlohmann::ordered_json& body);

// Compiled grammars by key, bounded by bytes: a grammar is compiled per
// request (a few at a time: compiling one can take tens of MiB for a moment)
// and kept only once a served request has used it, least recently used
// dropped first. Thread-safe.
class GrammarCache {
 public:
  static constexpr size_t kDefaultBytes = size_t(64) << 20;
  static constexpr int kCompiling = 2;  // compilations at a time
  explicit GrammarCache(std::shared_ptr<const Vocab> vocab, size_t max_bytes = kDefaultBytes);
  // The kept grammar of that key, else make()'s, compiled now and not kept.
  std::shared_ptr<const CompiledGrammar> get(const std::string& key,
                                             const std::function<Grammar()>& make);
  // Keeps g (a request is being served with it); one larger than an eighth
  // of the budget is not kept, so that it cannot displace all the others.
  void keep(const std::string& key, std::shared_ptr<const CompiledGrammar> g);
  size_t bytes() const;  // of the kept grammars and their keys
  const std::shared_ptr<const Vocab>& vocab() const { return vocab_; }

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const CompiledGrammar> grammar;
    size_t bytes;
  };
  std::shared_ptr<const Vocab> vocab_;
  size_t max_bytes_, bytes_ = 0;
  std::counting_semaphore<kCompiling> compiling_{kCompiling};
  mutable std::mutex mutex_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

// The constraint of one generation, or nullptr when the request asks for
// none. `thinking`: the prompt opened <think>, so the constraint starts
// after </think>. `stop_tokens`: what ends the generation (<|im_end|>, ...).
std::unique_ptr<GrammarConstraint> make_constraint(const ConstraintRequest& request,
                                                   GrammarCache& cache, bool thinking,
                                                   std::vector<int32_t> stop_tokens);

}  // namespace tern::grammar
