// End to end: the CUDA backend against the transformers golden logits (q4
// weights, both checkpoint layouts) with the foundation bars (top-1 100%,
// max|diff| <= 1e-3 * max|logit|: activations are fp32 on the GPU too, so the
// exact bars apply), and greedy generation of 256 tokens equal on CPU and CUDA
// for a tiny random checkpoint.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"
#include "core/error.h"
#include "core/npy.h"
#include "engine/sampler.h"
#include "engine/score.h"
#include "gpu_test_util.h"
#include "model/dummy.h"

namespace tern::test {
namespace {

const std::string kGolden = std::string(TERN_SOURCE_DIR) + "/tests/data/golden";

void check_golden(const std::string& dir) {
  auto w = load_model(dir, WeightMode::q4);
  cuda::CudaBackend be(w);
  std::ifstream f(kGolden + "/tokens.json");
  const auto seqs = nlohmann::json::parse(f);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto tokens = seqs[i].get<std::vector<int32_t>>();
    const auto logits = score_tokens(be, tokens, 0);
    const NpyArray ref = read_npy_f32(kGolden + "/logits_q4_" + std::to_string(i) + ".npy");
    const ScoreReport r = compare_logits(logits.data(), ref.data.data(), int64_t(tokens.size()),
                                         be.config().vocab, tokens);
    float mx = 0;
    for (float x : ref.data) mx = std::max(mx, std::abs(x));
    EXPECT_EQ(r.top1_agreement, 1.0) << dir << " sequence " << i;
    EXPECT_LE(r.max_abs_diff, 1e-3 * mx) << dir << " sequence " << i;
  }
}

TEST(CudaBackend, GoldenMlx4) {
  TERN_REQUIRE_GPU();
  check_golden(kGolden + "/mlx4");
}

TEST(CudaBackend, GoldenHfQuantisedAtLoad) {
  TERN_REQUIRE_GPU();
  check_golden(kGolden + "/hf");
}

TEST(CudaBackend, Greedy256EqualsCpu) {
  TERN_REQUIRE_GPU();
  auto w = tiny_dummy_weights();
  CpuBackend cpu(w);
  cuda::CudaBackend gpu(w);
  const std::vector<int32_t> prompt = {1, 7, 42, 99, 3};
  constexpr int kN = 256;
  std::vector<int32_t> want;
  {
    auto s = cpu.new_sequence();
    std::vector<float> logits;
    cpu.forward(*s, prompt, Logits::last, logits);
    for (int i = 0; i < kN; ++i) {
      want.push_back(argmax(logits));
      cpu.forward(*s, std::span(&want.back(), 1), Logits::last, logits);
    }
  }
  auto s = gpu.new_sequence();
  std::vector<float> logits;
  gpu.forward(*s, prompt, Logits::last, logits);
  std::vector<int32_t> got = {argmax(logits)};
  const auto rest = gpu.generate_greedy(*s, got[0], kN - 1);
  got.insert(got.end(), rest.begin(), rest.end());
  EXPECT_EQ(got, want);
}

// tern bench --leave-out: the named kernels leave the step graph (one per
// layer for down, one for lm_head), and unknown names are refused.
TEST(CudaBackend, LeaveOutDropsKernelsAndRejectsUnknownNames) {
  TERN_REQUIRE_GPU();
  auto w = tiny_dummy_weights();
  cuda::CudaBackend full(w), part(w);
  EXPECT_THROW(part.leave_out({"lm_head", "no_such_kernel"}), Error);
  part.leave_out({"lm_head", "down"});
  auto a = full.new_sequence(), b = part.new_sequence();
  EXPECT_EQ(full.step_kernels(*a) - part.step_kernels(*b), 1 + w->cfg.n_layers);
}

}  // namespace
}  // namespace tern::test
