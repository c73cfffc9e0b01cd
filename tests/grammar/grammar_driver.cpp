// The test driver of the grammar cross-checks (fuzz_grammar.py): reads jobs
// as JSON lines on stdin and answers each on stdout. "generate" runs a
// constrained completion on a tiny random-weight model with the real Qwen3
// tokenizer (made on first use), through the server's own request parsing
// (chat completions or completions); "accept" says which texts the matcher of a JSON Schema (or
// of a GBNF grammar) accepts.
#include <spdlog/spdlog.h>

#include <filesystem>
#include <iostream>
#include <string>

#include "backend/backend.h"
#include "backends/factory.h"
#include "chat/output_parser.h"
#include "checkpoint/dummy.h"
#include "core/error.h"
#include "grammar/gbnf.h"
#include "grammar/grammar_constraint.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/request.h"
#include "grammar/tokenizer_vocab.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace tern {
namespace {

using ojson = nlohmann::ordered_json;

struct Model {
  std::optional<Tokenizer> tok;
  std::unique_ptr<Backend> backend;
  std::optional<grammar::GrammarCache> cache;
  std::vector<int32_t> stops;
};

ojson generate(Model& m, const ojson& job) {
  ojson body = job["body"];
  const bool chat = job.value("api", "chat") == "chat";
  if (chat) {
    body["messages"] = {{{"role", "user"}, {"content", body.value("prompt", "Reply.")}}};
    body.erase("prompt");
    body["chat_template_kwargs"] = {{"enable_thinking", job.value("thinking", false)}};
  } else if (!body.contains("prompt")) {
    body["prompt"] = "Reply:";
  }
  const server::ApiContext ctx{
      &*m.tok, {"*"}, m.backend->config().max_positions, &*m.cache, m.stops};
  const Request request = chat ? server::parse_chat_request(body, ctx).req
                               : server::parse_completion_request(body, ctx).req;
  const bool thinking = request.in_reasoning;
  const auto constraint = std::dynamic_pointer_cast<grammar::GrammarConstraint>(request.constraint);
  const std::vector<int32_t>& ids = request.prompt;
  auto seq = m.backend->new_sequence();
  std::vector<float> logits;
  m.backend->forward(*seq, std::span(ids).first(ids.size() - 1), Logits::last, logits);
  SamplingParams p;
  p.temperature = job.value("temperature", 1.0f);
  p.seed = job.value("seed", uint64_t(1));
  m.backend->start_sampling(*seq, p, ids);
  std::vector<int32_t> out;
  bool stopped = false;
  GenerateHooks hooks;
  hooks.constraint = constraint.get();
  m.backend->generate(
      *seq, ids.back(), job.value("max_tokens", 256),
      [&](int32_t t) {
        if (std::count(m.stops.begin(), m.stops.end(), t)) return !(stopped = true);
        out.push_back(t);
        return !(stopped = constraint && constraint->done());
      },
      hooks);
  const std::string text = m.tok->decode(out);
  ojson r = {{"text", text},
             {"tokens", out.size()},
             {"stopped", stopped},
             {"completed", constraint ? constraint->completed() : true}};
  const ParsedDelta parsed =
      parse_output(text, thinking, body.contains("tools") ? body["tools"] : ojson());
  r["content"] = parsed.content;
  r["tool_calls"] = ojson::array();
  for (const ToolCall& c : parsed.tool_calls)
    r["tool_calls"].push_back({{"name", c.name}, {"arguments", c.arguments}});
  return r;
}

ojson accept(Model& m, const ojson& job) {
  auto g = job.contains("gbnf")
               ? m.cache->get("gbnf " + job["gbnf"].get<std::string>(),
                              [&] {
                                return grammar::parse_gbnf(job["gbnf"].get<std::string>(),
                                                           m.cache->vocab().get());
                              })
               : m.cache->get(job["schema"].dump(),
                              [&] { return grammar::json_schema_grammar(job["schema"]); });
  ojson accepted = ojson::array();
  for (const ojson& t : job["texts"]) {
    grammar::Matcher matcher(g);
    const std::string& s = t.get_ref<const std::string&>();
    accepted.push_back((s.empty() || matcher.accept_bytes(s)) && matcher.can_end());
  }
  return {{"accepted", accepted}};
}

int run(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: grammar_driver TOKENIZER_DIR WORK_DIR < jobs.jsonl\n";
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);  // stdout carries the answers
  const std::string model_dir = std::string(argv[2]) + "/tiny";
  if (!std::filesystem::exists(model_dir + "/config.json")) {
    DummyOptions o;
    o.seed = 1;
    o.out_dir = model_dir;
    o.tokenizer_dir = argv[1];
    make_dummy(o);
  }
  Model m;
  m.tok.emplace(Tokenizer::load(model_dir));
  m.backend = make_backend("cpu", load_model(model_dir, WeightMode::q4));
  m.cache.emplace(grammar::vocab_of(*m.tok, m.backend->config().vocab), 256);
  for (const char* s : {"<|im_end|>", "<|endoftext|>"})
    if (auto id = m.tok->token_id(s)) m.stops.push_back(*id);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    ojson result;
    try {
      const ojson job = ojson::parse(line);
      result = job["op"] == "accept" ? accept(m, job) : generate(m, job);
    } catch (const Error& e) {
      result = {{"error", e.what()}};
    }
    std::cout << result.dump() << "\n" << std::flush;
  }
  return 0;
}

}  // namespace
}  // namespace tern

int main(int argc, char** argv) {
  return tern::run(argc, argv);
}
