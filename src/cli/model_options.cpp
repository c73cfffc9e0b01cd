#include "cli/model_options.h"

namespace tern::cli {

void add_model_options(CLI::App* cmd, ModelOptions& o) {
  cmd->add_option("--model", o.model, "Checkpoint folder")->required();
  cmd->add_option("--backend", o.backend,
                  "cpu (fast), cpu-ref (the fp32 reference the tests pin) or cuda")
      ->check(CLI::IsMember({"cpu", "cpu-ref", "cuda"}));
  cmd->add_option("--weights", o.weights, "q4 or bf16")->check(CLI::IsMember({"q4", "bf16"}));
}

std::unique_ptr<Backend> open_backend(const ModelOptions& o) {
  return make_backend(o.backend, load_model(o.model, weight_mode_from_name(o.weights)));
}

}  // namespace tern::cli
