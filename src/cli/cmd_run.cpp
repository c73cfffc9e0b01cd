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
#include <optional>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "core/error.h"
#include "engine/backend.h"
#include "engine/sampler.h"
#include "grammar/request.h"
#include "grammar/tokenizer_vocab.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/output_parser.h"

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

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The prompt's ids: --prompt-ids as given, or --prompt encoded (as a single
// user turn of the chat template with --chat).
std::vector<int32_t> prompt_ids(const RunOptions& o, const Tokenizer* tok, bool* thinking) {
  if (o.prompt.empty() == o.prompt_ids.empty())
    fail("give exactly one of --prompt and --prompt-ids");
  if (!o.prompt_ids.empty()) return o.prompt_ids;
  if (!tok) fail("{} has no tokenizer.json: give the prompt as --prompt-ids", o.run.model);
  if (!o.chat) return tok->encode(o.prompt);
  nlohmann::ordered_json req = {{"messages", {{{"role", "user"}, {"content", o.prompt}}}},
                                {"add_generation_prompt", true}};
  if (o.no_thinking) req["enable_thinking"] = false;
  const std::string text = render_chat(req);
  *thinking = prompt_opens_reasoning(text);
  return tok->encode(text);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read {}", path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The constraint of --json-schema / --grammar (nullptr without them).
std::unique_ptr<grammar::GrammarConstraint> constraint_of(
    const RunOptions& o, const Tokenizer* tok, const ModelConfig& c, bool thinking,
    std::vector<int32_t> stops, std::optional<grammar::GrammarCache>& cache) {
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
  return grammar::make_constraint(r, *cache, thinking, std::move(stops));
}

std::vector<int32_t> stop_ids(const ModelConfig& c, const Tokenizer* tok) {
  std::vector<int32_t> ids(c.eos_ids.begin(), c.eos_ids.end());
  if (tok)
    for (const char* t : {"<|im_end|>", "<|endoftext|>"})
      if (auto id = tok->token_id(t)) ids.push_back(*id);
  return ids;
}

int run_generation(const RunOptions& o) {
  validate(o.sampling);
  std::optional<Tokenizer> tok;
  if (std::filesystem::exists(std::filesystem::path(o.run.model) / "tokenizer.json"))
    tok.emplace(Tokenizer::load(o.run.model));
  bool thinking = false;
  const std::vector<int32_t> prompt = prompt_ids(o, tok ? &*tok : nullptr, &thinking);
  if (prompt.empty()) fail("the prompt encodes to no tokens");
  auto backend = open_backend(o.run);
  const std::vector<int32_t> stops = stop_ids(backend->config(), tok ? &*tok : nullptr);
  std::optional<grammar::GrammarCache> cache;
  auto constraint =
      constraint_of(o, tok ? &*tok : nullptr, backend->config(), thinking, stops, cache);
  auto seq = backend->new_sequence();
  std::optional<StreamDecoder> text;
  if (tok) text.emplace(*tok);
  // All but the last prompt token are prefilled; generate() feeds the last one.
  const auto context = std::span(prompt).first(prompt.size() - 1);
  std::vector<float> logits;

  const auto t0 = Clock::now();
  for (size_t s = 0; s < context.size(); s += size_t(o.chunk)) {
    const size_t m = std::min(context.size() - s, size_t(o.chunk));
    backend->forward(*seq, context.subspan(s, m), Logits::last, logits);
  }
  auto t1 = t0;  // when the first token arrives: prefill ends, decode starts
  int generated = 0;
  backend->start_sampling(*seq, o.sampling, prompt);
  backend->generate(
      *seq, prompt.back(), o.max_tokens,
      [&](int32_t next) {
        if (generated++ == 0) t1 = Clock::now();
        if (text)
          std::fputs(text->push(next).c_str(), stdout);
        else
          std::printf("%d ", next);
        std::fflush(stdout);
        if (constraint && constraint->done()) return false;  // only a stop token could follow
        return o.ignore_eos || std::count(stops.begin(), stops.end(), next) == 0;
      },
      constraint.get());
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = seconds_since(t1);
  std::printf("%s\n", text ? text->finish().c_str() : "");
  std::fflush(stdout);  // the text ends before the speed line on stderr
  std::fprintf(
      stderr,
      "prompt: %zu tokens in %.2f s (%.1f tok/s); generated: %d tokens in %.2f s (%.2f tok/s)\n",
      prompt.size(), prefill_s, double(prompt.size()) / prefill_s, generated, decode_s,
      // decode_s starts when the first token arrives: it spans generated - 1 steps.
      std::max(generated - 1, 0) / std::max(decode_s, 1e-9));
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
  cmd->add_option("--temperature", o->sampling.temperature, "0: greedy");
  cmd->add_option("--top-k", o->sampling.top_k, "Keep the k most likely tokens (0: off)");
  cmd->add_option("--top-p", o->sampling.top_p, "Nucleus sampling mass");
  cmd->add_option("--min-p", o->sampling.min_p, "Drop tokens below min-p x the best");
  cmd->add_option("--repetition-penalty", o->sampling.repetition_penalty, "1: off");
  cmd->add_option("--presence-penalty", o->sampling.presence_penalty, "0: off");
  cmd->add_option("--frequency-penalty", o->sampling.frequency_penalty, "0: off");
  cmd->add_option("--seed", o->sampling.seed, "Sampling seed");
  cmd->add_option("--json-schema", o->json_schema,
                  "Constrain the completion to JSON valid for the schema in FILE (after the "
                  "reasoning with --chat)");
  cmd->add_option("--grammar", o->grammar, "Constrain the completion to the GBNF grammar in FILE");
  return [o] { return run_generation(*o); };
}

}  // namespace tern::cli
