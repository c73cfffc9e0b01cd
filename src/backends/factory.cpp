#include "backends/factory.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>

#include "backends/cpu/fast_backend.h"
#include "backends/cpu/pack16.h"
#include "backends/reference/reference_backend.h"
#include "checkpoint/config.h"
#include "core/env.h"
#include "core/error.h"
#ifdef TERN_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device_weights.h"
#endif

namespace tern {

std::unique_ptr<Backend> make_backend(const std::string& name,
                                      std::shared_ptr<const ModelWeights> weights) {
  if (name == "cpu") return std::make_unique<FastCpuBackend>(std::move(weights));
  if (name == "cpu-ref") return std::make_unique<ReferenceBackend>(std::move(weights));
#ifdef TERN_HAVE_CUDA
  if (name == "cuda") return std::make_unique<cuda::CudaBackend>(std::move(weights));
#else
  if (name == "cuda")
    fail("the CUDA backend is not built into this tern (configure with nvcc and -DTERN_CUDA=ON)");
#endif
  fail("unknown backend '{}' (cpu, cpu-ref or cuda)", name);
}

void prepare_weights(const std::string& name, ModelWeights& weights) {
  if (name != "cpu") return;
  if (env_text(kCpuPack16Env) == "0") return;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t bytes = cpu::pack_weights(weights);
  spdlog::info("repacked {:.2f} GB of quantised matrices for the CPU kernels in {:.1f} s",
               double(bytes) / 1e9,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

std::unique_ptr<Backend> make_dummy_backend(const std::string& name, const std::string& preset,
                                            uint64_t seed) {
  if (name != "cuda") fail("random weights made on the device need --backend cuda (got {})", name);
#ifdef TERN_HAVE_CUDA
  const ModelConfig cfg = parse_config(preset_config(preset), "preset " + preset);
  return std::make_unique<cuda::CudaBackend>(cuda::DeviceWeights::random(cfg, seed));
#else
  (void)preset, (void)seed;
  fail("the CUDA backend is not built into this tern (configure with nvcc and -DTERN_CUDA=ON)");
#endif
}

}  // namespace tern
