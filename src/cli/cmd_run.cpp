// tern run: stream a completion from a prompt (greedy by default) and report
// speed; --json-schema / --grammar constrain it (after the reasoning with --chat).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>

#include "backend/backend.h"
#include "backend/sampler.h"
#include "chat/prompt.h"
#include "cli/commands.h"
#include "cli/model_options.h"
#include "core/error.h"
#include "engine/engine.h"
#include "grammar/request.h"
#include "grammar/tokenizer_vocab.h"

namespace tern::cli {

namespace {

struct RunOptions {
  ModelOptions run;
  std::string prompt;
  std::vector<int32_t> prompt_ids;
  int max_tokens = 64;
  int64_t chunk = 512;
  bool ignore_eos = false;
  bool chat = false, no_thinking = false;
  std::string json_schema, grammar;  // files
  SamplingParams sampling;
};

// The prompt's ids: --prompt-ids as given, or --prompt encoded (as a single
// user turn of the chat template with --chat).
std::vector<int32_t> prompt_ids(const RunOptions& o, const Tokenizer* tok, bool* thinking) {
  if (o.prompt.empty() == o.prompt_ids.empty())
    fail("give exactly one of --prompt and --prompt-ids");
  if (!o.prompt_ids.empty()) return o.prompt_ids;
  if (!tok) fail("{} has no tokenizer.json: give the prompt as --prompt-ids", o.run.model);
  if (!o.chat) return tok->encode(o.prompt);
  ChatPrompt p = render_prompt(*tok, {{{"role", "user"}, {"content", o.prompt}}},
                               o.no_thinking ? std::optional(false) : std::nullopt);
  *thinking = p.in_reasoning;
  return std::move(p.ids);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read {}", path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The constraint of --json-schema / --grammar (nullptr without them).
std::unique_ptr<grammar::GrammarConstraint> constraint_of(
    const RunOptions& o, const Tokenizer* tok, const ModelConfig& c, bool thinking,
    const std::vector<int32_t>& stops, std::optional<grammar::GrammarCache>& cache) {
  if (o.json_schema.empty() && o.grammar.empty()) return nullptr;
  if (!o.json_schema.empty() && !o.grammar.empty())
    fail("give at most one of --json-schema and --grammar");
  if (!tok) fail("{} has no tokenizer.json: --json-schema and --grammar need it", o.run.model);
  grammar::ConstraintRequest r;
  if (!o.json_schema.empty()) {
    r.answer = grammar::ConstraintRequest::Answer::json_schema;
    r.schema = nlohmann::ordered_json::parse(read_text(o.json_schema), nullptr, false);
    if (r.schema.is_discarded()) fail("{}: invalid JSON", o.json_schema);
  } else {
    r.answer = grammar::ConstraintRequest::Answer::gbnf;
    r.gbnf = read_text(o.grammar);
  }
  cache.emplace(grammar::vocab_of(*tok, c.vocab), 1);
  return grammar::make_constraint(r, *cache, thinking, stops);
}

int run_generation(const RunOptions& o) {
  validate(o.sampling);
  std::optional<Tokenizer> tok;
  if (std::filesystem::exists(std::filesystem::path(o.run.model) / "tokenizer.json"))
    tok.emplace(Tokenizer::load(o.run.model));
  bool thinking = false;
  Request r;
  r.prompt = prompt_ids(o, tok ? &*tok : nullptr, &thinking);
  if (r.prompt.empty()) fail("the prompt encodes to no tokens");
  r.sampling = o.sampling;
  r.max_tokens = o.max_tokens;
  r.ignore_eos = o.ignore_eos;
  r.output = Request::Output::text;
  r.logprobs = tok ? -1 : 0;  // without a tokenizer the ids are what is printed
  auto backend = open_backend(o.run);
  EngineOptions eo;
  eo.cache_bytes = 0;
  eo.chunk = o.chunk;
  Engine engine(*backend, tok ? &*tok : nullptr, eo);
  std::optional<grammar::GrammarCache> cache;
  std::shared_ptr<grammar::GrammarConstraint> constraint =
      constraint_of(o, tok ? &*tok : nullptr, backend->config(), thinking, engine.end_ids(), cache);
  r.constraint = constraint;
  const Result res = engine.run(r, [&](Delta&& d) {
    if (tok) std::fputs(d.text.c_str(), stdout);
    for (const TokenLogprob& t : d.logprobs) std::printf("%d ", t.token);
    std::fflush(stdout);
  });
  std::printf("\n");
  std::fflush(stdout);  // the text ends before the speed line on stderr
  std::fprintf(stderr,
               "prompt: %lld tokens in %.2f s (%.1f tok/s); generated: %lld tokens in %.2f s "
               "(%.2f tok/s)\n",
               static_cast<long long>(res.prompt_tokens), res.ttft_s,
               double(res.prompt_tokens) / std::max(res.ttft_s, 1e-9),
               static_cast<long long>(res.completion_tokens), res.decode_s, res.decode_tok_s());
  if (constraint)
    std::fprintf(stderr, "grammar: %s\n", constraint->completed() ? "complete" : "incomplete");
  return 0;
}

}  // namespace

Runner add_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Generate a completion for a prompt");
  auto o = std::make_shared<RunOptions>();
  add_model_options(cmd, o->run);
  cmd->add_option("--prompt", o->prompt, "Prompt text (needs tokenizer.json in the model folder)");
  cmd->add_option("--prompt-ids", o->prompt_ids, "Prompt as token ids")->delimiter(',');
  cmd->add_flag("--chat", o->chat, "Wrap the prompt as a user turn of the chat template");
  cmd->add_flag("--no-thinking", o->no_thinking, "With --chat: an empty think block");
  cmd->add_option("--max-tokens", o->max_tokens, "Tokens to generate")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()));
  cmd->add_option("--chunk", o->chunk, "Prefill chunk size")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()));
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Do not stop at end-of-sequence tokens");
  add_sampling_options(cmd, o->sampling);
  cmd->add_option("--json-schema", o->json_schema,
                  "Constrain the completion to JSON valid for the schema in FILE (after the "
                  "reasoning with --chat)");
  cmd->add_option("--grammar", o->grammar, "Constrain the completion to the GBNF grammar in FILE");
  return [o] { return run_generation(*o); };
}

}  // namespace tern::cli
