#include "cli/model_options.h"

#include "backends/factory.h"
#include "core/progress.h"

namespace tern::cli {

void add_model_options(CLI::App* cmd, ModelOptions& o, bool model_required) {
  cmd->add_option("--model", o.model, "Checkpoint folder")->required(model_required);
  cmd->add_option("--backend", o.backend,
                  "cpu (fast), cpu-ref (the fp32 reference the tests pin) or cuda")
      ->check(CLI::IsMember({"cpu", "cpu-ref", "cuda"}));
  cmd->add_option("--weights", o.weights, "q4 or bf16")->check(CLI::IsMember({"q4", "bf16"}));
  add_mmap_flag(cmd, o.mmap);
}

void add_mmap_flag(CLI::App* cmd, bool& mmap) {
  cmd->add_flag("--mmap", mmap,
                "cpu backend: map the checkpoint files instead of reading them into 2 MB pages "
                "(shares the page cache; decode measured 3-13% slower). The files must not "
                "change while in use: truncating one kills the process (SIGBUS)");
}

Residency residency_for(const std::string& backend, bool mmap) {
  return backend == "cpu" && !mmap ? Residency::huge_pages : Residency::mapped;
}

void add_sampling_options(CLI::App* cmd, SamplingParams& p) {
  cmd->add_option("--temperature", p.temperature, "0: greedy");
  cmd->add_option("--top-k", p.top_k, "Keep the k most likely tokens (0: off)");
  cmd->add_option("--top-p", p.top_p, "Nucleus sampling mass");
  cmd->add_option("--min-p", p.min_p, "Drop tokens below min-p x the best");
  cmd->add_option("--repetition-penalty", p.repetition_penalty, "1: off");
  cmd->add_option("--presence-penalty", p.presence_penalty, "0: off");
  cmd->add_option("--frequency-penalty", p.frequency_penalty, "0: off");
  cmd->add_option("--seed", p.seed, "Sampling seed");
}

std::shared_ptr<ModelWeights> load_weights(const ModelOptions& o) {
  auto w = load_model(o.model, weight_mode_from_name(o.weights), residency_for(o.backend, o.mmap));
  // Read a mapped checkpoint in now (with progress), not page by page in the first requests.
  if (w->store && w->store->residency() == Residency::mapped) {
    Progress p("loading " + o.model, w->store->mapped_bytes());
    w->store->prefault(p);
  }
  prepare_weights(o.backend, *w);
  return w;
}

std::unique_ptr<Backend> open_backend(const ModelOptions& o) {
  return make_backend(o.backend, load_weights(o));
}

}  // namespace tern::cli
