#include "cli/model_options.h"

#include "backends/factory.h"
#include "core/progress.h"

namespace tern::cli {

void add_model_options(CLI::App* cmd, ModelOptions& o) {
  cmd->add_option("--model", o.model, "Checkpoint folder")->required();
  cmd->add_option("--backend", o.backend, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--weights", o.weights, "q4 or bf16")->check(CLI::IsMember({"q4", "bf16"}));
}

std::shared_ptr<ModelWeights> load_weights(const ModelOptions& o) {
  auto w = load_model(o.model, weight_mode_from_name(o.weights));
  if (w->store) {  // read it all now (with progress), not page by page in the first requests
    Progress p("loading " + o.model, w->store->mapped_bytes());
    w->store->prefault(p);
  }
  return w;
}

std::unique_ptr<Backend> open_backend(const ModelOptions& o) {
  return make_backend(o.backend, load_weights(o));
}

}  // namespace tern::cli
