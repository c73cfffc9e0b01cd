// The decode GEMVs (gemv.cu) against their CPU twin (model::matmul), on
// fresh random inputs: store, norm and add on the tile and SIMT paths, the
// GDN out-projection's gated norm and the in-projection's conv epilogue.
// Tolerance: kSumOrderRel (gpu_test_util.h) of the output's max |value|.
#include <cmath>

#include "backends/cuda/gemv.h"
#include "gpu_test_util.h"
#include "model/ops.h"

namespace tern::test {
namespace {

struct GemvCase {
  int rows, cols, bits;
};

class Gemv : public ::testing::TestWithParam<GemvCase> {};

TEST_P(Gemv, StoreNormAndAddMatchCpu) {
  TERN_REQUIRE_GPU();
  const auto [rows, cols, bits] = GetParam();
  std::mt19937 g(uint32_t(rows * 7 + cols + bits));
  TestMat W(rows, cols, bits, g, 0.05f);
  W.tile();
  const auto x = randn(size_t(cols), g), nw = randn(size_t(cols), g, 0.1f),
             y0 = randn(size_t(rows), g);
  std::vector<float> normw(nw.size());
  for (size_t i = 0; i < nw.size(); ++i) normw[i] = 1.0f + nw[i];
  auto dx = to_dev(x), dn = to_dev(normw), dy = to_dev(y0);

  std::vector<float> ref(static_cast<size_t>(rows)), xn(static_cast<size_t>(cols));
  model::matmul(W.host, x.data(), 1, ref.data());
  ASSERT_EQ(cuda::gemv({.W = W.dev, .x = dx.get(), .y = dy.get()}, nullptr), cudaSuccess);
  auto got = to_host(dy.get(), size_t(rows));
  EXPECT_LE(max_diff(got, ref), kSumOrderRel * max_abs(ref)) << "store";

  model::rms_norm(x.data(), normw.data(), cols, 1e-6f, xn.data());
  model::matmul(W.host, xn.data(), 1, ref.data());
  for (size_t i = 0; i < ref.size(); ++i) ref[i] += got[i];
  ASSERT_EQ(cuda::gemv({.W = W.dev,
                        .x = dx.get(),
                        .norm = dn.get(),
                        .eps = 1e-6f,
                        .y = dy.get(),
                        .out = cuda::GemvOut::add},
                       nullptr),
            cudaSuccess);
  got = to_host(dy.get(), size_t(rows));
  EXPECT_LE(max_diff(got, ref), kSumOrderRel * max_abs(ref)) << "norm + add";
}

// Tile paths: 12352 x 2048 one batch of 6 tiles a block, 40000 x 2048 batches
// of 3 through the ring, 2500 x 4096 two tiles a block through a ring of two.
INSTANTIATE_TEST_SUITE_P(Shapes, Gemv,
                         ::testing::Values(GemvCase{37, 64, 4}, GemvCase{300, 512, 4},
                                           GemvCase{1001, 2048, 4}, GemvCase{129, 4096, 4},
                                           GemvCase{100, 1152, 4}, GemvCase{12352, 2048, 4},
                                           GemvCase{2048, 4096, 4}, GemvCase{40000, 2048, 4},
                                           GemvCase{2500, 4096, 4}, GemvCase{17, 128, 8},
                                           GemvCase{257, 2048, 8}));

// The GDN out_proj's staging: every `group` columns (128 in the model)
// RMS-normed on their own, times the norm weight and the gate (SiLU-ed, as
// the in-projection stores it), then the GEMV with a residual add. Groups
// wider than a round (128) are refused.
class GemvGatedNorm : public ::testing::TestWithParam<int> {};

TEST_P(GemvGatedNorm, MatchesCpu) {
  TERN_REQUIRE_GPU();
  constexpr int rows = 2048, cols = 4096;
  const int group = GetParam();
  std::mt19937 g(7);
  TestMat W(rows, cols, 4, g, 0.05f);
  W.tile();
  const auto x = randn(size_t(cols), g), z = randn(size_t(cols), g), y0 = randn(size_t(rows), g),
             nw = randn(size_t(group), g, 0.1f);
  std::vector<float> normw(nw.size()), xn(static_cast<size_t>(cols)),
      ref(static_cast<size_t>(rows));
  for (size_t i = 0; i < nw.size(); ++i) normw[i] = 1.0f + nw[i];
  for (int h = 0; h < cols / group; ++h)
    model::rms_norm(&x[size_t(h * group)], normw.data(), group, 1e-6f, &xn[size_t(h * group)]);
  std::vector<float> gate(static_cast<size_t>(cols));
  for (int i = 0; i < cols; ++i) xn[size_t(i)] *= gate[size_t(i)] = model::silu(z[size_t(i)]);
  model::matmul(W.host, xn.data(), 1, ref.data());
  for (int r = 0; r < rows; ++r) ref[size_t(r)] += y0[size_t(r)];
  auto dx = to_dev(x), dz = to_dev(gate), dn = to_dev(normw), dy = to_dev(y0);
  const cuda::GemvArgs args{.W = W.dev,
                            .x = dx.get(),
                            .norm = dn.get(),
                            .eps = 1e-6f,
                            .y = dy.get(),
                            .out = cuda::GemvOut::add,
                            .norm_group = group,
                            .gate = dz.get()};
  if (group > 128) {
    EXPECT_EQ(cuda::gemv(args, nullptr), cudaErrorInvalidValue);
    return;
  }
  ASSERT_EQ(cuda::gemv(args, nullptr), cudaSuccess);
  const auto got = to_host(dy.get(), size_t(rows));
  EXPECT_LE(max_diff(got, ref), kSumOrderRel * max_abs(ref));
}

INSTANTIATE_TEST_SUITE_P(Groups, GemvGatedNorm, ::testing::Values(32, 128, 256));

// The GDN in-projection's epilogue: rows < channels conv-ed with the carried
// state (SiLU into `out`, the state shifted by one), the next gate_rows rows
// stored SiLU-ed, the rest as they are; on the tile path and the SIMT one.
class GemvConv : public ::testing::TestWithParam<bool> {};

TEST_P(GemvConv, ConvAndGateRowsMatchCpu) {
  TERN_REQUIRE_GPU();
  const bool tiled = GetParam();
  constexpr int ch = 96, gated = 64, rows = ch + gated + 40, cols = 2048, Kc = 4;
  std::mt19937 g(tiled ? 5 : 6);
  TestMat W(rows, cols, 4, g, 0.05f);
  if (tiled) W.tile();
  const auto x = randn(size_t(cols), g), cw = randn(size_t(ch) * Kc, g, 0.5f),
             state = randn(size_t(Kc - 1) * ch, g);
  std::vector<float> acc(static_cast<size_t>(rows)), y(static_cast<size_t>(rows)),
      out(static_cast<size_t>(ch)), next(state.size());
  model::matmul(W.host, x.data(), 1, acc.data());
  for (int r = 0; r < rows; ++r)
    y[size_t(r)] = r >= ch && r < ch + gated ? model::silu(acc[size_t(r)]) : acc[size_t(r)];
  for (int c = 0; c < ch; ++c) {
    float s = cw[size_t(c) * Kc + Kc - 1] * acc[size_t(c)];
    for (int j = 0; j < Kc - 1; ++j) s += cw[size_t(c) * Kc + j] * state[size_t(j) * ch + c];
    out[size_t(c)] = model::silu(s);
    for (int j = 0; j + 1 < Kc - 1; ++j) next[size_t(j) * ch + c] = state[size_t(j + 1) * ch + c];
    next[size_t(Kc - 2) * ch + c] = acc[size_t(c)];
  }
  auto dx = to_dev(x), dcw = to_dev(cw), dst = to_dev(state);
  auto dy = to_dev(std::vector<float>(static_cast<size_t>(rows))),
       dout = to_dev(std::vector<float>(static_cast<size_t>(ch)));
  ASSERT_EQ(cuda::gemv({.W = W.dev,
                        .x = dx.get(),
                        .y = dy.get(),
                        .out = cuda::GemvOut::conv,
                        .conv = {dcw.get(), dst.get(), dout.get(), ch, Kc, gated}},
                       nullptr),
            cudaSuccess);
  const float tol = kSumOrderRel * max_abs(acc);
  EXPECT_LE(max_diff(to_host(dy.get(), y.size()), y), tol) << "stored rows";
  EXPECT_LE(max_diff(to_host(dout.get(), out.size()), out), 4 * tol) << "conv out";
  EXPECT_LE(max_diff(to_host(dst.get(), next.size()), next), tol) << "conv state";
}

INSTANTIATE_TEST_SUITE_P(Paths, GemvConv, ::testing::Bool());

}  // namespace
}  // namespace tern::test
