// The prefill's 4-bit GEMM (prefill_gemm.cu) against model::matmul on fresh
// random inputs, outputs poisoned first: both weight layouts, every tile
// width and every epilogue at real and odd sizes, with and without split K.
//
// Bounds: the GEMM multiplies fp16 weights (s q + b rounded once) by fp16
// activations (each row scaled into [2^14, 2^15) first), both within 2^-11
// relative of their fp32 values, with fp32 sums: the error of a K-term dot
// product is a random walk of those roundings, ~2e-4 of the sums' RMS at
// these sizes, so 1e-3 of the largest reference value holds with margin.
#include <cmath>

#include "backends/cuda/prefill_gemm.h"
#include "core/bf16.h"
#include "gpu_test_util.h"
#include "model/ops.h"
#include "staged_rows.h"

namespace tern::test {
namespace {

struct GemmCase {
  int rows, K, n;
  bool tiles;
  int bn, bm;
  cuda::GemmOut out;
  bool split = false;  // a work area: few blocks split K
};

class PrefillGemm : public ::testing::TestWithParam<GemmCase> {};

TEST_P(PrefillGemm, MatchesCpuMatmul) {
  TERN_REQUIRE_GPU();
  const GemmCase p = GetParam();
  std::mt19937 g(uint32_t(p.rows * 7 + p.K + p.n * 13 + p.bn));
  TestMat M(p.rows, p.K, 4, g, 0.05f);
  if (p.tiles) {
    M.tile();
    ASSERT_NE(M.dev.tiles, nullptr);
  }
  const auto x = randn(size_t(p.n) * p.K, g);
  std::vector<float> ref(size_t(p.n) * p.rows);
  model::matmul(M.host, x.data(), p.n, ref.data());
  const auto y0 = randn(ref.size(), g), wts = randn(size_t(p.n), g);
  auto want = ref;
  for (int t = 0; t < p.n; ++t)
    for (int r = 0; r < p.rows; ++r) {
      float& v = want[size_t(t) * p.rows + r];
      if (p.out == cuda::GemmOut::add) v += y0[size_t(t) * p.rows + r];
      if (p.out == cuda::GemmOut::weighted) v *= wts[size_t(t)];
    }
  Staged s = stage_plain(x, p.n, p.K);
  auto y = to_dev(p.out == cuda::GemmOut::add ? y0 : std::vector<float>(ref.size(), NAN));
  auto y16 = to_dev(std::vector<uint16_t>(ref.size(), 0x7E00));  // fp16 NaN
  auto dw = to_dev(wts);
  cuda::GemmArgs a;
  a.W = M.dev, a.group_rows = p.rows, a.x = s.x.get(), a.xscale = s.scale.get(), a.n = p.n;
  a.out = p.out, a.y = y.get(), a.y16 = y16.get(), a.ldy = p.rows, a.row_w = dw.get();
  a.bn = p.bn, a.bm = p.bm;
  auto work = to_dev(std::vector<float>(p.split ? cuda::gemm_work_floats() : 1, NAN));
  if (p.split) a.work = work.get(), a.work_floats = cuda::gemm_work_floats();
  ASSERT_EQ(cuda::prefill_gemm(a, nullptr), cudaSuccess);
  // weighted: fp16 outputs, which add at most 2^-11 of a value to the error,
  // so the bounds are against the weighted values.
  const bool half = p.out == cuda::GemmOut::weighted;
  std::vector<float> got = to_host(y.get(), ref.size());
  if (half) {
    const auto h = to_host(y16.get(), ref.size());
    for (size_t i = 0; i < h.size(); ++i) got[i] = f16_to_f32(h[i]);
  }
  const std::vector<float>& scale = half ? want : ref;
  EXPECT_LE(max_diff(got, want), (half ? 1.5e-3f : 1e-3f) * max_abs(scale));
  double e2 = 0, r2 = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    e2 += double(got[i] - want[i]) * (got[i] - want[i]), r2 += double(scale[i]) * scale[i];
  EXPECT_LE(std::sqrt(e2 / r2), 1e-3) << "relative RMS error";
}

using O = cuda::GemmOut;
INSTANTIATE_TEST_SUITE_P(Shapes, PrefillGemm,
                         ::testing::Values(GemmCase{272, 2048, 1, true, 128, 256, O::store},
                                           GemmCase{272, 2048, 77, true, 64, 128, O::store},
                                           GemmCase{1040, 2048, 200, true, 128, 256, O::add},
                                           GemmCase{1040, 2048, 200, true, 128, 128, O::add},
                                           GemmCase{300, 2048, 90, true, 64, 256, O::store},
                                           GemmCase{128, 4096, 130, true, 128, 256, O::weighted},
                                           GemmCase{40, 192, 33, false, 64, 256, O::store},
                                           GemmCase{100, 64, 129, false, 128, 128, O::add},
                                           GemmCase{48, 128, 5, true, 64, 256, O::store},
                                           GemmCase{1040, 2048, 7, true, 16, 256, O::add},
                                           GemmCase{272, 2048, 45, true, 16, 128, O::store},
                                           GemmCase{300, 2048, 70, true, 32, 256, O::weighted},
                                           GemmCase{40, 192, 33, false, 16, 256, O::store},
                                           GemmCase{100, 64, 29, false, 32, 128, O::add},
                                           GemmCase{2048, 4096, 32, true, 32, 256, O::add, true},
                                           GemmCase{272, 2048, 1, true, 16, 256, O::store, true},
                                           GemmCase{1040, 2048, 7, true, 16, 256, O::add, true},
                                           GemmCase{200, 1024, 17, false, 16, 128, O::store, true},
                                           GemmCase{300, 2048, 90, true, 64, 256, O::store, true},
                                           GemmCase{100, 64, 29, false, 32, 128, O::add, true}));

}  // namespace
}  // namespace tern::test
