#include "grammar/tool_grammar.h"

#include <set>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "tokenizer/tool_call.h"

namespace tern::grammar {
namespace {

const std::vector<std::string> kClosingTags = {"</parameter>", "</tool_call>"};

bool is_space(uint32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// Texts that neither start nor end with whitespace (the parser trims before
// trying the other types), and whose first character is not in `first`.
CharFsa untrimmed(const CodepointSet& first_excluded) {
  CodepointSet space;
  for (uint32_t c : {' ', '\t', '\n', '\r'}) space.add(c, c);
  CharFsa a;  // 0: empty so far
  const int inside_space = a.add_state(), inside_other = a.add_state();
  a.set_final(0);
  a.set_final(inside_other);
  a.add_edges(0, CodepointSet::all().minus(space).minus(first_excluded), inside_other);
  a.add_edges(inside_other, space, inside_space);
  a.add_edges(inside_other, CodepointSet::all().minus(space), inside_other);
  a.add_edges(inside_space, space, inside_space);
  a.add_edges(inside_space, CodepointSet::all().minus(space), inside_other);
  return a;
}

class ToolBuilder {
 public:
  ToolBuilder(Grammar& g, const ojson& fn) : g_(g), fn_(fn) {}

  // "<function=NAME>\n" parameters "</function>\n".
  ExprPtr call(const std::string& name) {
    check_name(name, "function");
    const ojson* params = fn_.contains("parameters") ? &fn_["parameters"] : nullptr;
    std::vector<ExprPtr> items = {literal("<function=" + name + ">\n")};
    if (params && !params->is_null()) {
      if (!params->is_object()) fail("tool '{}': parameters must be a JSON Schema object", name);
      compiler_ = std::make_unique<JsonCompiler>(g_, *params, JsonOptions{20, kClosingTags, true});
      const ojson empty_object = ojson::object();
      const ojson& props = params->contains("properties") ? (*params)["properties"] : empty_object;
      if (!props.is_object()) fail("tool '{}': 'properties' must be an object", name);
      std::set<std::string> required;
      if (params->contains("required")) {
        const ojson& req = (*params)["required"];
        if (!req.is_array()) fail("tool '{}': 'required' must be an array of names", name);
        for (const ojson& r : req) {
          if (!r.is_string() || !props.contains(r.get<std::string>()))
            fail("tool '{}': required parameter {} is not among its properties", name, r.dump());
          required.insert(r.get<std::string>());
        }
      }
      for (const auto& [pname, schema] : props.items()) {
        check_name(pname, "parameter");
        ExprPtr p = seq({literal("<parameter=" + pname + ">\n"), value(name, pname, schema),
                         literal("\n</parameter>\n")});
        items.push_back(required.count(pname) ? p : opt(p));
      }
    }
    items.push_back(literal("</function>\n"));
    return seq(std::move(items));
  }

 private:
  void check_name(const std::string& n, const char* what) {
    if (n.empty() || n.find_first_of(">\n") != std::string::npos || is_space(uint8_t(n.front())) ||
        is_space(uint8_t(n.back())))
      fail(
          "tool call format: {} name '{}' cannot be written as <{}=NAME> (it must be non-empty, "
          "without '>' or newlines, and not start or end with whitespace)",
          what, n, what);
  }

  // The texts the parser reads back as a valid value of the parameter.
  ExprPtr value(const std::string& fn, const std::string& param, const ojson& schema) {
    std::set<std::string> types;
    parameter_types(schema, types);
    const Sub sub{{&schema}};
    auto has = [&](const char* t) { return types.count(t) != 0; };
    std::vector<ExprPtr> alts;
    uint8_t json_types = 0;  // read as JSON text
    if (types.empty()) {
      json_types = kObject | kArray;
    } else {
      if (has("null")) json_types |= kNull;
      if (has("boolean")) json_types |= kBoolean;
      if (has("number")) json_types |= kInteger | kFraction;
      if (has("integer")) json_types |= kInteger;
      if (has("object")) json_types |= kObject;
      if (has("array")) json_types |= kArray;
    }
    if (json_types) alts.push_back(compiler_->value_of_types(sub, json_types));
    // Raw text is a string unless the parser can read it as one of the other types.
    if (types.empty() || has("string")) {
      CharFsa text = compiler_->strings_of(sub);
      if (json_types) {
        CodepointSet first;
        if (json_types & (kObject | kArray)) first.add('{', '{'), first.add('[', '[');
        if (json_types & (kInteger | kFraction)) first.add('-', '-'), first.add('0', '9');
        text = fsa_intersect(text, untrimmed(first));
        std::vector<std::string> words;
        if (json_types & kNull) words = {"null", "None"};
        if (json_types & kBoolean)
          for (const char* w : {"true", "false"})
            for (int mask = 0; mask < 1 << std::string(w).size(); ++mask) {
              std::string v = w;
              for (size_t i = 0; i < v.size(); ++i)
                if (mask >> i & 1) v[i] = char(std::toupper(uint8_t(v[i])));
              words.push_back(v);
            }
        if (!words.empty()) text = fsa_intersect(text, fsa_none_of(words));
      }
      if (!fsa_empty(text)) alts.push_back(fsa_text(text));
    }
    ExprPtr out = alt(std::move(alts));
    if (out->kind == Expr::Kind::nothing)
      fail(
          "tool '{}': no value of parameter '{}' can be written in the tool-call format (its "
          "schema needs a type that tern's parser reads)",
          fn, param);
    return out;
  }

  Grammar& g_;
  const ojson& fn_;
  std::unique_ptr<JsonCompiler> compiler_;
};

}  // namespace

Grammar tool_call_grammar(const ojson& tools, const ToolGrammarOptions& o, const Vocab& vocab) {
  const auto open = vocab.added_token("<tool_call>"), close = vocab.added_token("</tool_call>");
  if (!open || !close) fail("tool calls need the added tokens <tool_call> and </tool_call>");
  if (!tools.is_array() || tools.empty()) fail("tool calls need a non-empty 'tools' list");
  Grammar g;
  const int root = g.declare("tool calls");
  std::vector<ExprPtr> calls;
  std::vector<std::unique_ptr<ToolBuilder>> builders;  // their compilers hold rules' schemas
  for (const ojson& tool : tools) {
    const ojson& fn = tool.is_object() && tool.contains("function") ? tool["function"] : tool;
    if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string())
      fail("each tool needs a function with a 'name'");
    const std::string name = fn["name"].get<std::string>();
    if (!o.function.empty() && name != o.function) continue;
    builders.push_back(std::make_unique<ToolBuilder>(g, fn));
    calls.push_back(builders.back()->call(name));
  }
  if (calls.empty())
    fail("tool_choice names function '{}', which is not among the tools", o.function);
  // One call after its <tool_call>: "\n" <function=...> ... "</function>\n" </tool_call>.
  const ExprPtr body = seq({literal("\n"), alt(std::move(calls)), tokens({*close})});
  if (o.after_open) {
    g.define(root, body);
  } else {
    const ExprPtr call = seq({tokens({*open}), body});
    // Up to two newlines first (after </think>), then the calls, "\n" between them.
    g.define(root, seq({repeat(literal("\n"), 0, 2), call,
                        o.parallel ? star(seq({literal("\n"), call})) : empty()}));
  }
  g.set_root(root);
  return g;
}

}  // namespace tern::grammar
