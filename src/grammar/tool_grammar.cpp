#include "grammar/tool_grammar.h"

#include <set>

#include "chat/tool_call.h"
#include "core/error.h"
#include "grammar/determinize.h"
#include "grammar/json_schema.h"

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

// Expansion budgets (determinize.h): a parameter's value above the first
// becomes any value of its type; the whole grammar stays within the second.
constexpr size_t kParameterBudget = kMaxStates / 2;
constexpr size_t kToolsBudget = 2 * kMaxStates;

// Names the format can write: non-empty, without '>' or newlines, not
// starting or ending with whitespace.
bool writable(const std::string& n) {
  return !n.empty() && n.find_first_of(">\n") == std::string::npos &&
         !is_space(uint8_t(n.front())) && !is_space(uint8_t(n.back()));
}

class ToolBuilder {
 public:
  ToolBuilder(Grammar& g, const ojson& fn, std::vector<ToolDegradation>& degraded, size_t& spent)
      : g_(g), fn_(fn), degraded_(degraded), spent_(spent) {}

  // "<function=NAME>\n" parameters "</function>\n".
  ExprPtr call(const std::string& name) {
    if (!writable(name))
      fail(
          "tool call format: function name '{}' cannot be written as <function=NAME> (it must be "
          "non-empty, without '>' or newlines, and not start or end with whitespace)",
          name);
    name_ = name;
    const ojson* params = fn_.contains("parameters") ? &fn_["parameters"] : nullptr;
    ExprPtr args = empty();
    if (params && !params->is_null()) args = arguments(*params);
    return seq({literal("<function=" + name + ">\n"), args, literal("</function>\n")});
  }

 private:
  void note(const std::string& param, const std::string& keyword, const std::string& path,
            const std::string& why) {
    degraded_.push_back({name_, param, keyword, path, why});
  }

  ExprPtr arguments(const ojson& params) {
    const ojson* props =
        params.is_object() && params.contains("properties") ? &params["properties"] : nullptr;
    if (!params.is_object() || (props && !props->is_object())) {
      note("", "parameters", "#", "'parameters' is not a JSON Schema object with 'properties'");
      return any_arguments();
    }
    compiler_ =
        std::make_unique<JsonCompiler>(g_, params, JsonOptions{20, kClosingTags, true, true});
    std::set<std::string> required;
    if (params.contains("required")) {
      const ojson& req = params["required"];
      for (const ojson& r : req.is_array() ? req : ojson::array())
        if (r.is_string() && props && props->contains(r.get<std::string>()))
          required.insert(r.get<std::string>());
        else
          note("", "required", "#/required",
               fmt::format("required parameter {} is not among its properties", r.dump()));
      if (!req.is_array()) note("", "required", "#/required", "'required' is not an array");
    }
    std::vector<ExprPtr> items;
    std::vector<bool> needed;
    static const ojson kNone = ojson::object();
    for (const auto& [pname, schema] : (props ? *props : kNone).items()) {
      if (!writable(pname)) {
        note(pname, "properties", "#/properties",
             "the name cannot be written as <parameter=NAME>: the parameter is left out");
        continue;
      }
      items.push_back(seq({literal("<parameter=" + pname + ">\n"), parameter(pname, schema),
                           literal("\n</parameter>\n")}));
      needed.push_back(required.count(pname) != 0);
    }
    return in_order(std::move(items), needed);
  }

  // Parameters in any order, each at most once, the needed ones all present:
  // a state per set of parameters written (each one a rule, so that the
  // 2^n states share it). Above kAnyOrderParameters, in the schema's order.
  ExprPtr in_order(std::vector<ExprPtr> items, const std::vector<bool>& needed) {
    const int n = int(items.size());
    if (n > kAnyOrderParameters) {
      for (int i = 0; i < n; ++i)
        if (!needed[size_t(i)]) items[size_t(i)] = opt(items[size_t(i)]);
      return seq(std::move(items));
    }
    if (n == 1) return needed[0] ? items[0] : opt(items[0]);
    std::vector<ExprPtr> refs;
    for (const ExprPtr& item : items) refs.push_back(ref(g_.add("parameter of " + name_, item)));
    int must = 0;
    for (int i = 0; i < n; ++i) must |= int(needed[size_t(i)]) << i;
    ExprGraph graph;
    graph.states = 1 << n;
    for (int set = 0; set < graph.states; ++set) {
      if ((set & must) == must) graph.finals.push_back(set);
      for (int i = 0; i < n; ++i)
        if (!(set >> i & 1)) graph.edges.push_back({set, set | 1 << i, refs[size_t(i)]});
    }
    return grammar::graph(std::move(graph));
  }

  // The value's texts; a schema the grammar cannot enforce (an error, or
  // past the budgets) gives way to any value of its declared types.
  ExprPtr parameter(const std::string& param, const ojson& schema) {
    const size_t seen = compiler_->document().dropped().size();
    const int rules = g_.size();
    ExprPtr v;
    std::string failure;
    try {
      v = value(schema, Sub{{&schema}});
      const size_t size = expansion_bound(g_, rules, v);
      if (v->kind == Expr::Kind::nothing)
        failure = "no value of its schema can be written in the tool-call format";
      else if (size > kParameterBudget || spent_ + size > kToolsBudget)
        failure = fmt::format("its grammar would be too large (about {} states)", size);
      else
        spent_ += size;
    } catch (const Error& e) {
      failure = e.what();
    }
    const std::vector<Dropped>& dropped = compiler_->document().dropped();
    for (size_t i = seen; i < dropped.size(); ++i)
      note(param, dropped[i].keyword, dropped[i].path, dropped[i].why);
    if (failure.empty()) return v;
    compiler_->rollback(rules);
    note(param, "schema", "#/properties/" + param,
         failure + ": any value of the parameter's declared type is allowed");
    v = value(schema, Sub{});
    return v->kind == Expr::Kind::nothing ? any_text() : v;
  }

  // The texts the parser reads back as a valid value of `sub` (the
  // parameter's schema, or nothing more than its types).
  ExprPtr value(const ojson& schema, const Sub& sub) {
    std::set<std::string> types;
    parameter_types(schema, types);
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
    return alt(std::move(alts));
  }

  // Any text without a closing tag: the parser keeps it as a string (or as
  // the JSON object or array it is, for a parameter without a schema).
  static ExprPtr any_text() { return fsa_text(avoiding(kClosingTags)); }

  // Any parameters with any values (for unreadable 'parameters').
  ExprPtr any_arguments() {
    CodepointSet tag_end;
    tag_end.add('>', '>'), tag_end.add('\n', '\n');
    const CharFsa names =
        fsa_intersect(fsa_repeat(CodepointSet::all().minus(tag_end), 1, -1), untrimmed({}));
    return star(seq({literal("<parameter="), fsa_text(names), literal(">\n"), any_text(),
                     literal("\n</parameter>\n")}));
  }

  Grammar& g_;
  const ojson& fn_;
  std::vector<ToolDegradation>& degraded_;
  size_t& spent_;  // expansion bound of the parameters so far, all tools
  std::string name_;
  std::unique_ptr<JsonCompiler> compiler_;
};

}  // namespace

Grammar tool_call_grammar(const ojson& tools, const ToolGrammarOptions& o, const Vocab& vocab,
                          std::vector<ToolDegradation>* degraded) {
  const auto open = vocab.added_token("<tool_call>"), close = vocab.added_token("</tool_call>");
  if (!open || !close) fail("tool calls need the added tokens <tool_call> and </tool_call>");
  if (!tools.is_array() || tools.empty()) fail("tool calls need a non-empty 'tools' list");
  Grammar g;
  const int root = g.declare("tool calls");
  std::vector<ExprPtr> calls;
  std::vector<std::unique_ptr<ToolBuilder>> builders;  // their compilers hold rules' schemas
  std::vector<ToolDegradation> dropped;
  size_t spent = 0;
  for (const ojson& tool : tools) {
    const ojson& fn = tool.is_object() && tool.contains("function") ? tool["function"] : tool;
    if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string())
      fail("each tool needs a function with a 'name'");
    const std::string name = fn["name"].get<std::string>();
    if (!o.function.empty() && name != o.function) continue;
    builders.push_back(std::make_unique<ToolBuilder>(g, fn, dropped, spent));
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
  if (degraded) *degraded = std::move(dropped);
  return g;
}

}  // namespace tern::grammar
