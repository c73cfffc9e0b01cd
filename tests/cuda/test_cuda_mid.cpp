// End to end at the real widths: the "mid" preset (35b-a3b's hidden 2048, 256
// experts of 512, 16/2 attention heads of 256, 16/32 GDN heads of 128, vocab
// 248,320, in 3 GDN + 1 attention layers), where every tensor-core tile path
// and the router feed run, as on the real model. CUDA logits against the CPU
// reference over a 520-token prefill and 64 decode steps, and 128 greedy
// tokens equal on both; sequences stepped together as alone.
//
// Bound: max|diff| <= 1e-3 * max|logit|, the golden bar of the CUDA backend.
// Activations are fp32 on both sides and the weights are the same 4-bit
// codes; what differs is the order of the fp32 sums (tensor-core fragments,
// split-K), the bf16 KV cache (the CPU keeps fp32) and the fast exp/divide in
// the GPU's gates, each ~1e-6..1e-3 relative; 1e-3 of the largest logit
// leaves top-1 intact except at near-ties, which the check allows for.
#include <gtest/gtest.h>

#include <random>

#include "backend/sampler.h"
#include "backend_checks.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/host_state.h"
#include "backends/reference/reference_backend.h"
#include "gpu_test_util.h"

namespace tern::test {
namespace {

// The largest logit and the gap between the two best.
std::pair<float, float> top_gap(const std::vector<float>& l) {
  float a = -INFINITY, b = -INFINITY;
  for (float x : l) {
    if (x > a)
      b = a, a = x;
    else if (x > b)
      b = x;
  }
  return {a, a - b};
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& where) {
  const float bound = 1e-3f * max_abs(want);
  EXPECT_LE(max_diff(got, want), bound) << where;
  // Top-1 agrees unless the CPU's two best are closer than the bound allows.
  if (top_gap(want).second > 2 * bound) {
    EXPECT_EQ(argmax(got), argmax(want)) << where;
  }
}

TEST(CudaMid, RealWidthsMatchTheCpuAndRunEveryTilePath) {
  TERN_REQUIRE_GPU();
  const auto w = dummy_weights("mid");
  const ModelConfig& c = w->cfg;
  ASSERT_EQ(c.hidden, 2048);
  ASSERT_EQ(c.vocab, 248320);
  ReferenceBackend cpu(w);
  cuda::reset_path_counts();
  cuda::CudaBackend gpu(w);
  std::mt19937 g(31);
  std::vector<int32_t> prompt(520);
  for (int32_t& t : prompt) t = int32_t(g() % uint32_t(c.vocab));

  auto sc = cpu.new_sequence(), sg = gpu.new_sequence();
  std::vector<float> want, got;
  cpu.forward(*sc, prompt, Logits::last, want);
  gpu.forward(*sg, prompt, Logits::last, got);
  expect_close(got, want, "after the 520-token prefill");
  for (int step = 0; step < 64; ++step) {  // both fed the CPU's choice
    const int32_t t = argmax(want);
    cpu.forward(*sc, std::span(&t, 1), Logits::last, want);
    gpu.forward(*sg, std::span(&t, 1), Logits::last, got);
    expect_close(got, want, "decode step " + std::to_string(step));
  }

  // The paths the real model runs: every GEMV, gate/up and down on tensor
  // cores, the gated-norm out-projections and the router fed by the GEMV
  // before it; no SIMT fallback.
  const std::vector<long> n = cuda::path_counts();
  auto at = [&](cuda::KernelPath p) { return n[size_t(p)]; };
  EXPECT_GT(at(cuda::KernelPath::gemv_tile), 0);
  EXPECT_GT(at(cuda::KernelPath::gemv_tile_gated), 0);
  EXPECT_GT(at(cuda::KernelPath::gemv_feed), 0);
  EXPECT_GT(at(cuda::KernelPath::route_fed), 0);
  EXPECT_GT(at(cuda::KernelPath::up_tile), 0);
  EXPECT_GT(at(cuda::KernelPath::down_tile), 0);
  for (auto p : {cuda::KernelPath::gemv_simt, cuda::KernelPath::route_unfed,
                 cuda::KernelPath::up_simt, cuda::KernelPath::down_simt})
    EXPECT_EQ(at(p), 0) << "path " << int(p);
}

TEST(CudaMid, Greedy128EqualsCpu) {
  TERN_REQUIRE_GPU();
  const auto w = dummy_weights("mid");
  ReferenceBackend cpu(w);
  cuda::CudaBackend gpu(w);
  const std::vector<int32_t> prompt = {101, 7, 4242, 99, 31337, 5};
  auto run = [&](Backend& be) {
    auto s = be.new_sequence();
    std::vector<float> logits;
    be.forward(*s, std::span(prompt).first(prompt.size() - 1), Logits::last, logits);
    be.start_sampling(*s, SamplingParams{}, prompt);
    std::vector<int32_t> ids;
    be.generate(*s, prompt.back(), 128, [&](int32_t t) {
      ids.push_back(t);
      return true;
    });
    return ids;
  };
  EXPECT_EQ(run(gpu), run(cpu));
}

// Sequences stepped together at the real widths (tests/backend_checks.h):
// each row's choices and logits are those of the sequence alone, through the
// one graph over the rows, whose dense GEMVs read each tile once for all rows
// and whose MoE kernels route and run every row's experts as alone.
TEST(CudaMid, SequencesSteppedTogetherDecodeAsAlone) {
  TERN_REQUIRE_GPU();
  cuda::CudaBackend gpu(dummy_weights("mid"));
  cuda::reset_path_counts();
  check_step_equals_alone(gpu);
  const std::vector<long> n = cuda::path_counts();
  EXPECT_GT(n[size_t(cuda::KernelPath::gemv_rows)], 0);
  EXPECT_GT(n[size_t(cuda::KernelPath::route_fed)], 0);
  for (auto p : {cuda::KernelPath::gemv_simt, cuda::KernelPath::route_unfed,
                 cuda::KernelPath::up_simt, cuda::KernelPath::down_simt})
    EXPECT_EQ(n[size_t(p)], 0) << "path " << int(p);
}

}  // namespace
}  // namespace tern::test
