// The flags that choose a checkpoint and how to run it (--model, --backend,
// --weights), shared by the commands that run the model.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "backend/backend.h"

namespace tern::cli {

struct ModelOptions {
  std::string model, backend = "cpu", weights = "q4";
  bool mmap = false;  // cpu: map the checkpoint, not read it into 2 MB pages
};

// How the cpu backend holds the checkpoint (2 MB pages unless --mmap); the
// others map it (the CUDA backend copies it to the GPU, the reference is the
// tests' baseline).
Residency residency_for(const std::string& backend, bool mmap);

void add_model_options(CLI::App* cmd, ModelOptions& o, bool model_required = true);
void add_mmap_flag(CLI::App* cmd, bool& mmap);  // --mmap (also tern bench's)
// --temperature, --top-k, --top-p, --min-p, the penalties and --seed.
void add_sampling_options(CLI::App* cmd, SamplingParams& p);

// Loads the checkpoint (reading it in whole, with progress).
std::shared_ptr<ModelWeights> load_weights(const ModelOptions& o);
// Loads the checkpoint and builds the backend the flags ask for.
std::unique_ptr<Backend> open_backend(const ModelOptions& o);

}  // namespace tern::cli
