// Helpers of the CUDA tests: GPU presence (tests skip cleanly without one),
// device copies of host vectors, random affine matrices on host and device.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/sampler.h"
#include "backends/cuda/layout.h"
#include "backends/cuda/misc.h"
#include "checkpoint/dummy.h"
#include "checkpoint/quant.h"
#include "checkpoint/weights.h"
#include "core/env.h"

namespace tern::test {

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// TERN_REQUIRE_GPU=1 (bench/device/device_run.sh sets it): a missing GPU fails the
// test instead of skipping it, so a device run cannot look green unrun.
inline bool gpu_required() {
  return env_text(kRequireGpuEnv) == "1";
}

#define TERN_REQUIRE_GPU()                                                                     \
  if (!::tern::test::have_gpu()) {                                                             \
    if (::tern::test::gpu_required()) GTEST_FAIL() << "no CUDA device and TERN_REQUIRE_GPU=1"; \
    GTEST_SKIP() << "no CUDA device: GPU test skipped";                                        \
  }

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
template <typename T>
using DevPtr = std::unique_ptr<T, CudaFree>;

template <typename T>
DevPtr<T> to_dev(const std::vector<T>& v) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(1, v.size()) * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return DevPtr<T>(static_cast<T*>(p));
}

template <typename T>
std::vector<T> to_host(const T* d, size_t n) {
  std::vector<T> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

inline std::vector<float> randn(size_t n, std::mt19937& g, float sd = 1.0f) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// A random rows x cols matrix quantised with the project's quantiser, on both sides.
struct TestMat {
  QuantBuffer qb;
  QTensor host;
  DevPtr<uint32_t> w;
  DevPtr<uint32_t> sb;
  cuda::DMat dev;

  TestMat(int rows, int cols, int bits, std::mt19937& g, float sd = 1.0f) {
    const auto dense = randn(size_t(rows) * cols, g, sd);
    const size_t words = size_t(cols) * bits / 32, groups = size_t(cols / 64);
    qb.packed.resize(words * rows);
    qb.scales.resize(groups * rows);
    qb.biases.resize(groups * rows);
    for (int r = 0; r < rows; ++r)
      quantize_row(&dense[size_t(r) * cols], cols, bits, 64, &qb.packed[r * words],
                   &qb.scales[r * groups], &qb.biases[r * groups]);
    host = qb.view(rows, cols, bits, 64);
    std::vector<uint32_t> packed_sb(qb.scales.size());
    for (size_t i = 0; i < packed_sb.size(); ++i)
      packed_sb[i] = cuda::scale_bias(qb.scales[i], qb.biases[i]);
    w = to_dev(qb.packed), sb = to_dev(packed_sb);
    dev = cuda::DMat{.w = w.get(), .sb = sb.get(), .rows = rows, .cols = cols, .bits = bits};
  }

  // Moves the device copy into the tile layout (layout.h) where the shape has
  // one, as the backend does, so the GEMVs take their tensor-core path. pair:
  // the expert width of a gate/up stack.
  void tile(int pair = 0) {
    if (!cuda::tileable(dev)) return;
    void* p = nullptr;
    ASSERT_EQ(cudaMalloc(&p, cuda::tiled_bytes(dev)), cudaSuccess);
    tiles.reset(static_cast<uint8_t*>(p));
    ASSERT_EQ(cuda::to_tiles(dev, tiles.get(), pair, nullptr), cudaSuccess);
    dev.tiles = tiles.get(), dev.w = nullptr, dev.sb = nullptr;
  }
  DevPtr<uint8_t> tiles;
};

// The GEMVs' and MoE kernels' bound, of the output's max |value|: fp32
// accumulation in another order (the GPU sums s*sum(q*x) + b*sum(x) per group
// where the CPU dots dequantised rows).
constexpr float kSumOrderRel = 2e-5f;

// Prints the error a test measured against the scale of its reference.
inline void report_measured(const char* what, float diff, float scale) {
  std::printf("[measured] %s: max|diff| = %.3g of max|ref| %.3g (%.2e relative)\n", what, diff,
              scale, double(diff / scale));
}

inline float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::abs(x));
  return m;
}

inline float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// Where the KV cache's chunked layout (layout.h) keeps dims 8q..8q+7 of row
// r (kv head times capacity plus position; capacity a multiple of 16): the
// index of the first, in bf16 elements.
inline size_t kv_chunked_at(size_t r, int q, bool v) {
  const int o = int(r % cuda::kKvChunk);
  return (r - size_t(o)) * cuda::kHeadDim +
         size_t(v ? cuda::v_piece(o, q) : cuda::k_piece(o, q)) * 8;
}

// A dummy checkpoint of a preset (seed 11) for the end-to-end GPU tests,
// written afresh once per test process; and its weights, loaded 4-bit once.
inline std::string dummy_dir(const std::string& preset) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tern_cuda_" + preset + "_" + std::to_string(getpid()));
  if (!std::filesystem::exists(dir / "config.json")) {
    std::filesystem::remove_all(dir);
    DummyOptions o;
    o.preset = preset;
    o.seed = 11;
    o.out_dir = dir.string();
    make_dummy(o);
  }
  return dir.string();
}

inline std::shared_ptr<const ModelWeights> dummy_weights(const std::string& preset) {
  static std::map<std::string, std::shared_ptr<const ModelWeights>> loaded;
  auto& w = loaded[preset];
  if (!w) w = load_model(dummy_dir(preset), WeightMode::q4);
  return w;
}

// n greedy tokens after `prompt` by forward() alone (the reference the CUDA
// generate() is held to).
inline std::vector<int32_t> greedy_by_forward(Backend& be, std::span<const int32_t> prompt, int n) {
  std::vector<int32_t> ids;
  auto s = be.new_sequence();
  std::vector<float> logits;
  be.forward(*s, prompt, Logits::last, logits);
  for (int i = 0; i < n; ++i) {
    ids.push_back(argmax(logits));
    be.forward(*s, std::span(&ids.back(), 1), Logits::last, logits);
  }
  return ids;
}

inline std::shared_ptr<const ModelWeights> tiny_dummy_weights() {
  return dummy_weights("tiny");
}

}  // namespace tern::test
