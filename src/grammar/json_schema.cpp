#include "grammar/json_schema.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "grammar/compiled_grammar.h"

namespace tern::grammar {
namespace {

constexpr int kMaxExpansion = 16;  // nested anyOf / oneOf expansions
constexpr int kMaxNesting = 200;   // objects and arrays inside each other

std::string key_of(const StringRules& r) {
  std::string k = fmt::format("s{},{}", r.min_length, r.max_length);
  for (const std::string& p : r.patterns) k += "|p" + std::to_string(p.size()) + ":" + p;
  for (const std::string& f : r.formats) k += "|f" + f;
  return k;
}

}  // namespace

JsonCompiler::JsonCompiler(Grammar& g, const ojson& schema, JsonOptions options)
    : g_(g), doc_(schema, options.lenient), opts_(std::move(options)) {
  gap_ = alt({empty(), literal(" "),
              seq({literal("\n"), repeat(bytes([] {
                                           ByteSet b;
                                           b.add(' ', ' ');
                                           b.add('\t', '\t');
                                           return b;
                                         }()),
                                         0, opts_.max_indent)})});
}

void JsonCompiler::rollback(int rules) {
  g_.truncate(rules);
  std::erase_if(rules_, [&](const auto& r) { return r.second >= rules; });
  std::erase_if(named_rules_, [&](const auto& r) { return r.second >= rules; });
  nesting_ = 0;
  doc_.recover();
}

int JsonCompiler::root_rule() {
  return rule_of(Sub{{&doc_.root()}});
}

int JsonCompiler::rule_of(const Sub& s) {
  auto it = rules_.find(s.all);
  if (it != rules_.end()) return it->second;
  const std::string path = s.all.empty() ? "value" : doc_.path(s.all[0]);
  if (nesting_ >= kMaxNesting)
    fail("JSON Schema at {}: values nest deeper than {} levels", path, kMaxNesting);
  const int r = g_.declare(path);
  rules_.emplace(s.all, r);
  ++nesting_;  // a rule's body compiles the rules of the values inside it
  g_.define(r, value(doc_.shape(s), 0));
  --nesting_;
  return r;
}

std::pair<const Group*, Shape> JsonCompiler::split_group(const Shape& sh, int depth) {
  if (depth > kMaxExpansion)
    fail("JSON Schema at {}: anyOf/oneOf nest or recur more than {} levels deep", sh.path,
         kMaxExpansion);
  const Group* g = &sh.groups.front();
  if (g->one_of) doc_.check_disjoint(*g);
  Shape rest = sh;
  rest.groups.erase(rest.groups.begin());
  return {g, std::move(rest)};
}

ExprPtr JsonCompiler::value(const Shape& sh, int depth) {
  if (sh.types == 0) return nothing();
  if (!sh.groups.empty()) {
    const auto [g, rest] = split_group(sh, depth);
    std::vector<ExprPtr> alts;
    for (const ojson* b : g->branches)
      alts.push_back(rest.unconstrained() ? ref(rule_of(Sub{{b}}))
                                          : value(doc_.merge(rest, doc_.shape(b)), depth + 1));
    return alt(std::move(alts));
  }
  if (sh.values) {
    std::vector<ExprPtr> alts;
    for (const ojson& v : *sh.values)
      if (doc_.check(sh, v)) alts.push_back(literal(v.dump()));
    return alt(std::move(alts));
  }
  return typed(sh);
}

ExprPtr JsonCompiler::typed(const Shape& sh) {
  std::vector<ExprPtr> alts;
  if (sh.types & kNull) alts.push_back(literal("null"));
  if (sh.types & kBoolean) alts.push_back(alt({literal("true"), literal("false")}));
  if (sh.types & (kInteger | kFraction)) alts.push_back(number_rule(sh));
  if (sh.types & kString) {
    const CharFsa lang = string_language(sh.strings, opts_.forbidden);
    if (!fsa_empty(lang)) alts.push_back(string_rule(lang, key_of(sh.strings)));
  }
  if (sh.types & kArray) alts.push_back(array_value(sh));
  if (sh.types & kObject) alts.push_back(object_value(sh));
  return alt(std::move(alts));
}

ExprPtr JsonCompiler::string_rule(const CharFsa& lang, const std::string& key) {
  auto [it, added] = named_rules_.emplace(key, 0);
  if (added) {
    it->second = g_.add("string " + key, seq({literal("\""), fsa_json_body(lang), literal("\"")}));
    // The language is the key's and the forbidden substrings': the automaton can be kept.
    std::string full = "json string " + key;
    for (const std::string& f : opts_.forbidden)
      full.append(" !").append(std::to_string(f.size())).append(":").append(f);
    g_.set_key(it->second, std::move(full));
  }
  return ref(it->second);
}

ExprPtr JsonCompiler::number_rule(const Shape& shape) {
  Shape sh = shape;
  if (opts_.small_numbers) {
    Shape small;
    small.numbers = {Bound{-999999999999999, false}, Bound{999999999999999, false}};
    sh = doc_.merge(sh, small);
  }
  // With multipleOf (integer divisors only), integer texts.
  const bool fraction = (sh.types & kFraction) && !sh.numbers.multiple_of;
  std::string key = fraction ? "number" : "integer";
  if (sh.numbers.multiple_of) key += fmt::format(" *{}", sh.numbers.multiple_of);
  for (const auto* side : {&sh.numbers.lo, &sh.numbers.hi})
    key +=
        *side ? fmt::format(" {}{}", (*side)->exclusive ? "x" : "", (*side)->value.dump()) : " -";
  auto it = named_rules_.find(key);
  if (it == named_rules_.end()) {
    ExprPtr text = fraction ? number_text(sh.numbers) : integer_text(sh.numbers);
    if (text->kind == Expr::Kind::nothing) return text;
    it = named_rules_.emplace(key, g_.add(key, std::move(text))).first;
  }
  return ref(it->second);
}

// A member's value: scalars inline, anything that may hold values of its own
// in a rule (which is what lets schemas recur).
ExprPtr JsonCompiler::member_value(const Sub& s) {
  const Shape sh = doc_.shape(s);
  const uint8_t containers = kArray | kObject;
  if (!(sh.types & containers) && sh.groups.empty()) return value(sh, 0);
  return ref(rule_of(s));
}

// open gap members gap close, or (when `empty`) open gap close: one gap
// only in an empty container.
ExprPtr JsonCompiler::container(const char* open, ExprGraph members, bool empty_ok,
                                const char* close) {
  ExprPtr some =
      members.finals.empty() ? nothing() : seq({grammar::graph(std::move(members)), gap()});
  return seq({literal(open), gap(), empty_ok ? alt({some, empty()}) : some, literal(close)});
}

ExprPtr JsonCompiler::object_value(const Shape& sh) {
  // The names propertyNames allows (all when it is absent).
  const std::optional<CharFsa> allowed =
      sh.names.any() ? std::nullopt : std::optional(string_fsa(doc_.shape(sh.names), 0));
  auto required = [&](const std::string& n) {
    return std::find(sh.required.begin(), sh.required.end(), n) != sh.required.end();
  };
  // Members in order: the listed properties, then required ones not listed (as additional).
  std::vector<std::pair<std::string, const Sub*>> members;
  for (const auto& [n, sub] : sh.properties) members.push_back({n, &sub});
  for (const std::string& r : sh.required)
    if (!sh.property(r)) members.push_back({r, &sh.additional});
  std::vector<std::string> names;
  std::vector<ExprPtr> kv;
  std::vector<bool> may_skip;
  for (const auto& [n, sub] : members) {
    names.push_back(n);
    ExprPtr v = allowed && !fsa_accepts(*allowed, n) ? nothing() : member_value(*sub);
    if (v->kind == Expr::Kind::nothing && required(n)) return nothing();
    kv.push_back(seq({literal(ojson(n).dump() + ":"), gap(), v}));
    may_skip.push_back(!required(n));
  }
  // Additional members only when the schema says which (additionalProperties
  // or propertyNames) or lists no property at all: {"type": "object"} is any
  // object, but one that lists its properties gets those (any instance
  // without others is valid).
  ExprPtr extra_value = sh.additional_given || allowed || sh.properties.empty()
                            ? member_value(sh.additional)
                            : nothing();
  const ExprPtr comma = seq({literal(","), gap()});
  ExprPtr xkv = nothing();
  if (extra_value->kind != Expr::Kind::nothing) {
    CharFsa keys = fsa_intersect(fsa_none_of(names), opts_.forbidden.empty()
                                                         ? fsa_repeat(CodepointSet::all(), 0, -1)
                                                         : avoiding(opts_.forbidden));
    std::string key = "key not";
    for (const std::string& k : names) key.append(" ").append(ojson(k).dump());
    // Keyed (shared between grammars) only when the names are the key's.
    const ExprPtr name =
        allowed
            ? ref(g_.add("key", seq({literal("\""), fsa_json_body(fsa_intersect(keys, *allowed)),
                                     literal("\"")})))
            : string_rule(keys, key);
    xkv = seq({name, literal(":"), gap(), extra_value});
  }
  // minProperties / maxProperties: members are counted up to `cap` (saturating
  // without a maximum). A minimum the required members meet needs no count.
  const int n = int(kv.size());
  const auto required_count = uint64_t(std::count(may_skip.begin(), may_skip.end(), false));
  const int min = sh.min_properties <= required_count ? 0 : int(sh.min_properties);
  const int max =
      xkv->kind == Expr::Kind::nothing && sh.max_properties >= n ? -1 : int(sh.max_properties);
  const int cap = max >= 0 ? max : std::max(min, 1);
  // State (p, c): before member p (p == n + 1: among the additional ones), c
  // written (at most p before member p).
  auto at = [&](int p, int c) { return p * (cap + 1) + c; };
  auto next = [&](int c) { return max >= 0 ? c + 1 : std::min(c + 1, cap); };
  ExprGraph graph;
  graph.states = (n + 2) * (cap + 1);
  graph.start = at(0, 0);
  for (int p = 0; p <= n + 1; ++p)
    for (int c = 0; c <= (p <= n ? std::min(p, cap) : cap); ++c) {
      const bool room = max < 0 || c < max;
      auto member = [&](const ExprPtr& e) { return c == 0 ? e : seq({comma, e}); };
      if (p < n && room)
        graph.edges.push_back({at(p, c), at(p + 1, next(c)), member(kv[size_t(p)])});
      if (p < n && may_skip[size_t(p)]) graph.edges.push_back({at(p, c), at(p + 1, c), nullptr});
      if (p >= n && room && xkv->kind != Expr::Kind::nothing)
        graph.edges.push_back({at(p, c), at(n + 1, next(c)), member(xkv)});
      // (n, 0), no member at all, is the empty object below.
      if (p >= n && c >= std::max(min, 1)) graph.finals.push_back(at(p, c));
    }
  const bool all_optional = required_count == 0 && min == 0;
  return container("{", std::move(graph), all_optional, "}");
}

ExprPtr JsonCompiler::array_value(const Shape& sh) {
  int64_t max = sh.max_items;
  const int64_t min = int64_t(sh.min_items);
  std::vector<ExprPtr> prefix;
  for (const Sub& p : sh.prefix) {
    ExprPtr v = member_value(p);
    if (v->kind == Expr::Kind::nothing) {  // no array reaches this position
      max = max < 0 ? int64_t(prefix.size()) : std::min(max, int64_t(prefix.size()));
      break;
    }
    prefix.push_back(v);
  }
  ExprPtr item = member_value(sh.items);
  if (item->kind == Expr::Kind::nothing)
    max = max < 0 ? int64_t(prefix.size()) : std::min(max, int64_t(prefix.size()));
  if (max >= 0 && max < min) return nothing();
  const ExprPtr comma = seq({literal(","), gap()});
  // State i: i items written. A chain up to max (or up to the last fixed
  // position, then a loop).
  const int64_t last = max >= 0 ? max : std::max<int64_t>({min, int64_t(prefix.size()), 1});
  ExprGraph graph;
  graph.states = int(last) + 1;
  graph.start = 0;
  for (int64_t i = 0; i < last; ++i) {
    ExprPtr v = size_t(i) < prefix.size() ? prefix[size_t(i)] : item;
    graph.edges.push_back({int(i), int(i + 1), i == 0 ? v : seq({comma, v})});
  }
  if (max < 0) graph.edges.push_back({int(last), int(last), seq({comma, item})});
  for (int64_t i = std::max<int64_t>(min, 1); i <= last; ++i) graph.finals.push_back(int(i));
  return container("[", std::move(graph), min == 0, "]");
}

ExprPtr JsonCompiler::value_of_types(const Sub& sub, uint8_t types) {
  Shape only;
  only.types = types;
  return value(doc_.merge(doc_.shape(sub), only), 0);
}

CharFsa JsonCompiler::strings_of(const Sub& sub) {
  return string_fsa(doc_.shape(sub), 0);
}

CharFsa JsonCompiler::string_fsa(const Shape& sh, int depth) {
  if (!(sh.types & kString)) return CharFsa();
  if (!sh.groups.empty()) {
    const auto [g, rest] = split_group(sh, depth);
    std::vector<CharFsa> parts;
    for (const ojson* b : g->branches)
      parts.push_back(string_fsa(doc_.merge(rest, doc_.shape(b)), depth + 1));
    return fsa_union(parts);
  }
  if (sh.values) {
    std::vector<CharFsa> parts;
    for (const ojson& v : *sh.values)
      if (v.is_string() && doc_.check(sh, v))
        parts.push_back(fsa_literal(v.get_ref<const std::string&>()));
    CharFsa lits = fsa_union(parts);
    return opts_.forbidden.empty() ? lits : fsa_intersect(lits, avoiding(opts_.forbidden));
  }
  return string_language(sh.strings, opts_.forbidden);
}

Grammar json_schema_grammar(const ojson& schema, const JsonOptions& options) {
  Grammar g;
  JsonCompiler c(g, schema, options);
  const int root = c.root_rule();
  if (g.body(root)->kind == Expr::Kind::nothing)
    fail("JSON Schema: no value satisfies the schema at #");
  g.set_root(root);
  return g;
}

void warm_up(const std::shared_ptr<const Vocab>& vocab) {
  // Positions of a string with 0..kShortToken characters left, with and
  // without one more required, of one without bounds, and of the formats.
  std::vector<ojson> schemas = {
      ojson::parse(R"({"type": "string"})"), ojson::parse(R"({"type": "string", "maxLength": 16})"),
      ojson::parse(R"({"type": "string", "minLength": 1, "maxLength": 16})")};
  for (const char* f : {"date", "time", "date-time", "uuid", "email", "ipv4"})
    schemas.push_back({{"type", "string"}, {"format", f}});
  for (const ojson& s : schemas) {
    const CompiledGrammar g(json_schema_grammar(s), vocab);
    for (size_t n = 0; n < g.pda().nodes.size(); ++n)
      if (g.pda().nodes[n].consumes()) g.info(int32_t(n));
  }
}

Grammar json_object_grammar(const JsonOptions& options) {
  static const ojson kObject = {{"type", "object"}};
  return json_schema_grammar(kObject, options);
}

}  // namespace tern::grammar
