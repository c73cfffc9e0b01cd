#include "grammar/request.h"

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/tool_grammar.h"

namespace tern::grammar {
namespace {

using ojson = nlohmann::ordered_json;

const ojson* field(const ojson& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

void read_response_format(const ojson& body, ConstraintRequest& r) {
  if (const ojson* rf = field(body, "response_format")) response_format(*rf, "response_format", r);
}

// The tools' grammar; what their schemas ask that it does not enforce is
// logged once per compilation (the cache keeps the grammar for later requests).
Grammar tools_grammar(const ConstraintRequest& r, const ToolGrammarOptions& o, const Vocab& vocab) {
  std::vector<ToolDegradation> degraded;
  Grammar g = tool_call_grammar(r.tool_list, o, vocab, &degraded);
  // One warning each (issue 43: what an agent's tool asks and is not held to
  // must be visible), JSON-quoted: names and paths are the client's text.
  auto quote = [](const std::string& t) {
    return ojson(t).dump(-1, ' ', false, ojson::error_handler_t::replace);
  };
  for (const ToolDegradation& d : degraded)
    spdlog::warn("tool {} parameter {}: {} at {} is not enforced: {}", quote(d.tool),
                 quote(d.parameter), quote(d.keyword), quote(d.path), quote(d.why));
  return g;
}

}  // namespace

void response_format(const ojson& rf, const std::string& where, ConstraintRequest& r) {
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
    fail("{} must be an object with a 'type'", where);
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") {
    r.answer = ConstraintRequest::Answer::free;
    return;
  }
  if (type == "json_object") {
    // llama.cpp's form {"type": "json_object", "schema": {...}} gives a schema.
    if (const ojson* s = field(rf, "schema")) {
      r.answer = ConstraintRequest::Answer::json_schema;
      r.schema = *s;
    } else {
      r.answer = ConstraintRequest::Answer::json_object;
    }
    return;
  }
  if (type != "json_schema")
    fail("{} type '{}' is not supported (text, json_object, json_schema)", where, type);
  // Chat completions nest {name, schema, strict} in json_schema; the
  // Responses API's text.format puts them beside type.
  const ojson* js = rf.contains("json_schema") ? field(rf, "json_schema") : &rf;
  const std::string at = js == &rf ? where : where + ".json_schema";
  if (!js || !js->is_object()) fail("{} must be an object", at);
  const ojson* schema = field(*js, "schema");
  if (!schema || !(schema->is_object() || schema->is_boolean()))
    fail("{}.schema must be a JSON Schema (an object)", at);
  r.answer = ConstraintRequest::Answer::json_schema;
  r.schema = *schema;
}

std::string ConstraintRequest::key(bool thinking) const {
  ojson k = {{"answer", int(answer)}, {"tools", int(tools)}, {"thinking", thinking}};
  if (answer == Answer::json_schema) k["schema"] = schema;
  if (answer == Answer::gbnf) k["gbnf"] = gbnf;
  if (tools != Tools::none)
    k["tool_list"] = tool_list, k["function"] = function, k["parallel"] = parallel;
  return k.dump();
}

ConstraintRequest completion_constraints(const ojson& body) {
  ConstraintRequest r;
  read_response_format(body, r);
  const ojson* gbnf = field(body, "grammar");
  const ojson* schema = field(body, "json_schema");
  if (int(gbnf != nullptr) + int(schema != nullptr) +
          int(r.answer != ConstraintRequest::Answer::free) >
      1)
    fail("give at most one of grammar, json_schema and response_format");
  if (gbnf) {
    if (!gbnf->is_string()) fail("grammar must be a string (GBNF)");
    r.answer = ConstraintRequest::Answer::gbnf;
    r.gbnf = gbnf->get<std::string>();
  }
  if (schema) {
    if (!schema->is_object() && !schema->is_boolean())
      fail("json_schema must be a JSON Schema (an object)");
    r.answer = ConstraintRequest::Answer::json_schema;
    r.schema = *schema;
  }
  return r;
}

GrammarCache::GrammarCache(std::shared_ptr<const Vocab> vocab, size_t max_bytes)
    : vocab_(std::move(vocab)), max_bytes_(max_bytes) {}

std::shared_ptr<const CompiledGrammar> GrammarCache::get(const std::string& key,
                                                         const std::function<Grammar()>& make) {
  {
    std::lock_guard lock(mutex_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->grammar;
    }
  }
  // Compiled outside the lock: other requests go on meanwhile.
  compiling_.acquire();
  struct Release {
    std::counting_semaphore<kCompiling>& s;
    ~Release() { s.release(); }
  } release{compiling_};
  return std::make_shared<const CompiledGrammar>(make(), vocab_);
}

void GrammarCache::keep(const std::string& key, std::shared_ptr<const CompiledGrammar> g) {
  const size_t bytes = g->memory() + 2 * key.size();  // the key is in the list and the index
  if (bytes > max_bytes_ / 8) return;
  std::lock_guard lock(mutex_);
  if (index_.contains(key)) return;
  lru_.push_front({key, std::move(g), bytes});
  index_[key] = lru_.begin();
  bytes_ += bytes;
  while (bytes_ > max_bytes_) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

size_t GrammarCache::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

std::unique_ptr<GrammarConstraint> make_constraint(const ConstraintRequest& r, GrammarCache& cache,
                                                   bool thinking,
                                                   std::vector<int32_t> stop_tokens) {
  if (r.empty()) return nullptr;
  const Vocab& vocab = *cache.vocab();
  ConstraintConfig config;
  config.stop_tokens = std::move(stop_tokens);
  if (thinking) {
    config.reasoning_end = vocab.added_token("</think>");
    if (!config.reasoning_end) fail("thinking is on but the vocabulary has no </think> token");
  }
  using Tools = ConstraintRequest::Tools;
  if (r.tools == Tools::automatic && r.answer == ConstraintRequest::Answer::free) {
    config.trigger = vocab.added_token("<tool_call>");
    if (!config.trigger) fail("tool calls need the added token <tool_call>");
    config.max_triggers = r.parallel ? -1 : 1;
  }
  auto answer = [&] {
    Grammar g;
    switch (r.answer) {
      case ConstraintRequest::Answer::json_schema:
        g = json_schema_grammar(r.schema);
        break;
      case ConstraintRequest::Answer::json_object:
        g = json_object_grammar();
        break;
      case ConstraintRequest::Answer::gbnf:
        g = parse_gbnf(r.gbnf, &vocab);
        break;
      case ConstraintRequest::Answer::free:
        break;
    }
    return thinking ? after_newlines(std::move(g), 2) : g;
  };
  auto make = [&]() -> Grammar {
    ToolGrammarOptions o{r.tools == Tools::named ? r.function : "", r.parallel,
                         bool(config.trigger)};
    if (r.tools == Tools::none) return answer();
    if (r.tools == Tools::automatic && r.answer != ConstraintRequest::Answer::free)
      return either(answer(), tools_grammar(r, o, vocab));
    return tools_grammar(r, o, vocab);
  };
  std::string key = r.key(thinking);
  auto compiled = cache.get(key, make);
  config.on_use = [&cache, key = std::move(key), compiled] { cache.keep(key, compiled); };
  return std::make_unique<GrammarConstraint>(std::move(compiled), std::move(config));
}

}  // namespace tern::grammar
