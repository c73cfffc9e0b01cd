// JSON Schema to grammar: a rule per schema position that can recur (objects,
// arrays, $ref targets), strings as call-free rules (so their token masks are
// shared between grammars), whitespace bounded. Objects keep
// the schema's property order (required ones present, optional ones may be
// left out, additional ones after them with names the schema does not list);
// see docs/grammar.md for the supported subset and the normal form.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_shape.h"
#include "grammar/vocab.h"

namespace tern::grammar {

struct JsonOptions {
  // Whitespace after { [ , : and before } ]: nothing, one space, or a newline
  // and up to this many spaces or tabs, so that generation cannot loop in
  // whitespace.
  int max_indent = 20;
  // Substrings no string may contain (the tool-call format's closing tags).
  std::vector<std::string> forbidden;
  // Numbers within +-999999999999999, written without exponent (so that a
  // parser reading them into int64 or double keeps them exact).
  bool small_numbers = false;
  // Tool schemas: what cannot be enforced is dropped (SchemaDocument::dropped)
  // rather than refused.
  bool lenient = false;
};

class JsonCompiler {
 public:
  // Adds rules to g; `schema` must outlive the compiler.
  JsonCompiler(Grammar& g, const ojson& schema, JsonOptions options);
  // The rule of one value of the whole schema.
  int root_rule();
  // Value texts of sub restricted to some types (bits of json_shape.h).
  ExprPtr value_of_types(const Sub& sub, uint8_t types);
  // The (decoded) strings sub allows.
  CharFsa strings_of(const Sub& sub);
  SchemaDocument& document() { return doc_; }
  // Forgets the rules from `rules` on (the grammar's size before a value
  // whose compilation threw), so that the compiler can go on.
  void rollback(int rules);

 private:
  int rule_of(const Sub& s);
  // The first anyOf/oneOf group of sh and sh without it (the branches each
  // merge with that); `depth`: groups expanded so far.
  std::pair<const Group*, Shape> split_group(const Shape& sh, int depth);
  ExprPtr value(const Shape& sh, int depth);
  ExprPtr typed(const Shape& sh);
  ExprPtr member_value(const Sub& s);
  ExprPtr string_rule(const CharFsa& lang, const std::string& key);
  ExprPtr container(const char* open, ExprGraph members, bool empty_ok, const char* close);
  ExprPtr object_value(const Shape& sh);
  ExprPtr array_value(const Shape& sh);
  ExprPtr number_rule(const Shape& sh);
  CharFsa string_fsa(const Shape& sh, int depth);
  ExprPtr gap() const { return gap_; }

  Grammar& g_;
  SchemaDocument doc_;
  JsonOptions opts_;
  ExprPtr gap_;
  std::map<std::vector<const ojson*>, int> rules_;
  std::map<std::string, int> named_rules_;  // strings and numbers by their constraints
  int nesting_ = 0;                         // rules being compiled
};

// The grammar of the documents `schema` allows (tern::Error for an
// unsupported or unsatisfiable schema).
Grammar json_schema_grammar(const ojson& schema, const JsonOptions& options = {});
// Any JSON object (response_format json_object).
Grammar json_object_grammar(const JsonOptions& options = {});

// Computes, once per vocabulary, the token classifications of the string
// positions most schemas have (strings without bounds, and the last
// characters of bounded ones), which grammars then share: the first request
// with a schema then rarely walks the whole vocabulary. Tens of ms per 100K
// tokens; a server calls it while it loads the model.
void warm_up(const std::shared_ptr<const Vocab>& vocab);

}  // namespace tern::grammar
