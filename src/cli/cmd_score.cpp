// tern score: teacher-forced logits of a token sequence, optionally compared
// with reference logits (one JSON line of agreement metrics).
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "core/error.h"
#include "core/json_file.h"
#include "core/npy.h"
#include "engine/score.h"

namespace tern::cli {

namespace {

struct ScoreOptions {
  ModelOptions run;
  std::string tokens, out, reference;
  int64_t chunk = 0;
};

std::vector<int32_t> read_token_file(const std::string& path) {
  const nlohmann::json j = read_json_file(path);
  if (!j.is_array() || j.empty()) fail("{}: expected a non-empty JSON array of token ids", path);
  std::vector<int32_t> ids;
  for (const auto& x : j) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
      fail("{}: token ids must be non-negative integers, got {}", path, x.dump());
    ids.push_back(x.get<int32_t>());
  }
  return ids;
}

int run_score(const ScoreOptions& o) {
  std::vector<int32_t> tokens = read_token_file(o.tokens);
  auto backend = open_backend(o.run);
  std::vector<float> logits = score_tokens(*backend, tokens, o.chunk);
  const size_t n = tokens.size(), V = size_t(backend->config().vocab);
  write_npy_f32(o.out, {n, V}, logits.data());
  if (!o.reference.empty()) {
    NpyArray ref = read_npy_f32(o.reference);
    if (ref.shape != std::vector<size_t>{n, V})
      fail("{}: reference logits have shape ({}), expected ({}, {})", o.reference,
           fmt::join(ref.shape, ", "), n, V);
    ScoreReport r = compare_logits(logits.data(), ref.data.data(), int64_t(n), int64_t(V), tokens);
    nlohmann::json j = {{"positions", r.positions},
                        {"top1_agreement", r.top1_agreement},
                        {"mean_kl", r.mean_kl},
                        {"max_abs_diff", r.max_abs_diff},
                        {"ppl", r.ppl},
                        {"ppl_reference", r.ppl_reference},
                        {"ppl_ratio", r.ppl_ratio}};
    std::cout << j.dump() << std::endl;
  }
  return 0;
}

}  // namespace

Runner add_score(CLI::App& app) {
  auto* cmd = app.add_subcommand("score", "Teacher-forced logits of a token sequence (.npy)");
  auto o = std::make_shared<ScoreOptions>();
  add_model_options(cmd, o->run);
  cmd->add_option("--tokens", o->tokens, "JSON array of token ids")->required();
  cmd->add_option("--out", o->out, "Output .npy, float32 [n_tokens, vocab]")->required();
  cmd->add_option("--chunk", o->chunk, "Prefill chunk size (0: all at once)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--reference", o->reference, "Reference logits .npy to compare with");
  return [o] { return run_score(*o); };
}

}  // namespace tern::cli
