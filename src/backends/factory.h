// The one place that knows every backend: builds the one a flag names. Above
// engine/ (which knows only the Backend interface) and below the commands.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/scripted_backend.h"

namespace tern {

// "cpu" or "cuda" over loaded weights.
std::unique_ptr<Backend> make_backend(const std::string& name,
                                      std::shared_ptr<const ModelWeights> weights);

// Random weights of a preset's shapes made on the device itself, without a
// checkpoint (benchmarks of the 35b-a3b shapes): "cuda" only.
std::unique_ptr<Backend> make_dummy_backend(const std::string& name, const std::string& preset,
                                            uint64_t seed);

}  // namespace tern
