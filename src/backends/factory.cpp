#include "backends/factory.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/fast/fast_backend.h"
#include "backends/cpu/fast/pack16.h"
#include "core/error.h"
#include "model/config.h"
#ifdef TERN_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device_weights.h"
#endif

namespace tern {

std::unique_ptr<Backend> make_backend(const std::string& name,
                                      std::shared_ptr<const ModelWeights> weights) {
  if (name == "cpu") return std::make_unique<FastCpuBackend>(std::move(weights));
  if (name == "cpu-ref") return std::make_unique<CpuBackend>(std::move(weights));
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
  const char* env = std::getenv("TERN_CPU_PACK16");
  if (env && std::string(env) == "0") return;
  if (!cpu::fast::kernels(cpu::fast::default_isa()).packed16) return;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t bytes = cpu::fast::pack_weights(weights);
  spdlog::info("repacked {:.2f} GB of quantised matrices for the AVX-512 kernels in {:.1f} s",
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
