// The one place that knows every backend: builds the one a flag names. Above
// engine/ (which knows only the Backend interface) and below the commands.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backends/scripted_backend.h"

namespace tern {

// "cpu" or "cuda" over loaded weights.
std::unique_ptr<Backend> make_backend(const std::string& name,
                                      std::shared_ptr<const ModelWeights> weights);

// Lays loaded weights out as the named backend reads them fastest, before it
// is made: for "cpu", quantised matrices repacked (backends/cpu/pack16.h) where the
// CPU's kernel table takes that layout, unless TERN_CPU_PACK16=0 (the plain
// layout, for A/B runs). Other backends take the weights as loaded.
void prepare_weights(const std::string& name, ModelWeights& weights);

// Random weights of a preset's shapes made on the device itself, without a
// checkpoint (benchmarks of the 35b-a3b shapes): "cuda" only.
std::unique_ptr<Backend> make_dummy_backend(const std::string& name, const std::string& preset,
                                            uint64_t seed);

}  // namespace tern
