#include "engine/backend.h"

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"

namespace tern {

std::unique_ptr<Backend> make_backend(const std::string& name,
                                      std::shared_ptr<const ModelWeights> weights) {
  if (name == "cpu") return std::make_unique<CpuBackend>(std::move(weights));
  if (name == "cuda") fail("the CUDA backend is not built into this tern");
  fail("unknown backend '{}' (cpu or cuda)", name);
}

}  // namespace tern
