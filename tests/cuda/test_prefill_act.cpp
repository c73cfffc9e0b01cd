// The prefill's staging (prefill_act.cu) against its CPU twins
// (model::rms_norm, the gated norm, the attention gate) on fresh random
// inputs, outputs poisoned first: every mode, rows from tiny to past fp16's
// range, the staged order (staged_col), the power-of-two row factor and the
// fp32 copy.
#include <algorithm>
#include <cmath>

#include "backends/cuda/prefill_act.h"
#include "core/bf16.h"
#include "gpu_test_util.h"
#include "model/ops.h"

namespace tern::test {
namespace {

constexpr float kStagedBound = 1.0f / 2048.0f;  // fp16's half ulp over [2^14, 2^15)

// Row t of a staged matrix back in column order, times its scale.
std::vector<float> unstage(const std::vector<uint16_t>& s, const std::vector<float>& xs, int T,
                           int K) {
  std::vector<float> x(size_t(T) * K);
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < K; ++k)
      x[size_t(t) * K + k] = f16_to_f32(s[size_t(t) * K + cuda::staged_col(k, K)]) * xs[size_t(t)];
  return x;
}

class PrefillStage : public ::testing::TestWithParam<std::pair<cuda::StageMode, int>> {};

TEST_P(PrefillStage, MatchesTheCpu) {
  TERN_REQUIRE_GPU();
  const auto [mode, K] = GetParam();
  constexpr int T = 4;
  std::mt19937 g(uint32_t(K) + uint32_t(mode));
  auto x = randn(size_t(T) * K, g);
  const float row_sd[T] = {1e-3f, 1.0f, 37.0f, 3e4f};  // tiny to past fp16's range
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < K; ++k) x[size_t(t) * K + k] *= row_sd[t];
  const int nw = mode == cuda::StageMode::gated ? 128 : K;
  auto w = randn(size_t(nw), g, 0.3f);
  for (float& v : w) v += 1.0f;
  const int gate_ld = mode == cuda::StageMode::gate ? 2 * K : K + 17;
  auto gate = randn(size_t(T) * gate_ld, g, 2.0f);
  std::vector<float> y(x.size());
  for (int t = 0; t < T; ++t) {
    const float* xt = &x[size_t(t) * K];
    float* yt = &y[size_t(t) * K];
    const float* gt = &gate[size_t(t) * gate_ld];
    switch (mode) {
      case cuda::StageMode::plain:
        std::copy(xt, xt + K, yt);
        break;
      case cuda::StageMode::norm:
        model::rms_norm(xt, w.data(), K, 1e-6f, yt);
        break;
      case cuda::StageMode::gated:
        for (int h = 0; h < K / 128; ++h) {
          model::rms_norm(xt + 128 * h, w.data(), 128, 1e-6f, yt + 128 * h);
          for (int i = 0; i < 128; ++i) yt[128 * h + i] *= model::silu(gt[128 * h + i]);
        }
        break;
      case cuda::StageMode::gate:
        for (int k = 0; k < K; ++k)
          yt[k] = xt[k] * model::sigmoid(gt[(k / 256) * 512 + 256 + k % 256]);
        break;
    }
  }
  auto dx = to_dev(x), dw = to_dev(w), dg = to_dev(gate);
  auto out = to_dev(std::vector<uint16_t>(x.size(), 0xFFFF));
  auto xs = to_dev(std::vector<float>(size_t(T), NAN)),
       o32 = to_dev(std::vector<float>(x.size(), NAN));
  ASSERT_EQ(cuda::stage_rows({.x = dx.get(),
                              .T = T,
                              .K = K,
                              .mode = mode,
                              .norm = dw.get(),
                              .gate = dg.get(),
                              .gate_ld = gate_ld,
                              .out = out.get(),
                              .xscale = xs.get(),
                              .out32 = o32.get()},
                             nullptr),
            cudaSuccess);
  const auto hs = to_host(out.get(), x.size());
  const auto hx = to_host(xs.get(), size_t(T));
  const auto back = unstage(hs, hx, T, K), h32 = to_host(o32.get(), x.size());
  for (int t = 0; t < T; ++t) {
    const std::vector<float> ref(&y[size_t(t) * K], &y[size_t(t) * K + K]);
    const std::vector<float> got(&back[size_t(t) * K], &back[size_t(t) * K + K]);
    const std::vector<float> g32(&h32[size_t(t) * K], &h32[size_t(t) * K + K]);
    const float mx = max_abs(ref);
    int ex = 0;
    EXPECT_EQ(std::frexp(hx[size_t(t)], &ex), 0.5f) << "row " << t << ": not a power of two";
    float smax = 0;
    for (int k = 0; k < K; ++k) smax = std::max(smax, std::abs(f16_to_f32(hs[size_t(t) * K + k])));
    EXPECT_GE(smax, 16384.0f) << "row " << t;
    EXPECT_LE(smax, 32768.0f) << "row " << t;  // may round up to 2^15
    EXPECT_LE(max_diff(got, ref), kStagedBound * mx + 2e-5f * mx) << "row " << t;
    EXPECT_LE(max_diff(g32, ref), 2e-5f * mx) << "row " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, PrefillStage,
                         ::testing::Values(std::pair{cuda::StageMode::plain, 64},
                                           std::pair{cuda::StageMode::norm, 2048},
                                           std::pair{cuda::StageMode::norm, 192},
                                           std::pair{cuda::StageMode::gated, 4096},
                                           std::pair{cuda::StageMode::gated, 512},
                                           std::pair{cuda::StageMode::gate, 4096},
                                           std::pair{cuda::StageMode::gate, 1024}));

}  // namespace
}  // namespace tern::test
