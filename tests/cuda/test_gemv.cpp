// The decode GEMVs (gemv.cu) against their CPU twin (model::matmul), on
// fresh random inputs: store, norm and add on the tile and SIMT paths, the
// GDN out-projection's gated norm and the in-projection's conv epilogue; and
// the GEMV over several rows (gemv_rows) against each row alone.
// Tolerance: kSumOrderRel (gpu_test_util.h) of the output's max |value|.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>

#include "backends/cuda/gemv.h"
#include "backends/cuda/host_state.h"
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

// gemv_rows (a decode step over several sequences, rows.h): R rows, each with
// its own input, output, gate, conv state and router feed, against gemv() on
// each row alone, bit for bit (nothing is summed across rows), for every
// epilogue the step's tile GEMVs use, a long ring (the output head's) and a
// SIMT shape (a launch a row).
struct RowsCase {
  const char* name;
  int rows, cols;
  bool norm, gated, add, feed, conv;
};

// One row's vectors on the device.
struct RowBufs {
  DevPtr<float> x, y, gate, state, out;
  DevPtr<unsigned long long> acc;
};

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

class GemvRows : public ::testing::TestWithParam<std::tuple<RowsCase, int>> {};

TEST_P(GemvRows, EachRowIsItsLaunchAlone) {
  TERN_REQUIRE_GPU();
  const auto [c, R] = GetParam();
  constexpr int experts = 256, Kc = 4;
  const int ch = c.conv ? 8192 : 0, gated_rows = c.conv ? 4096 : 0;  // the model's
  std::mt19937 g(uint32_t(c.rows * 3 + c.cols + 131 * R));
  TestMat W(c.rows, c.cols, 4, g, 0.05f);
  W.tile();
  const bool tiled = W.dev.tiles != nullptr;
  TestMat router(experts + 1, c.feed ? c.rows : 64, 8, g, 0.05f);
  auto norm = to_dev(randn(size_t(c.gated ? 128 : c.cols), g, 0.5f));
  auto feed_norm = to_dev(randn(size_t(c.rows), g, 0.5f));
  auto conv_w = to_dev(randn(size_t(std::max(ch, 1)) * Kc, g, 0.5f));
  const size_t acc_n = size_t(cuda::kFeedCopies) * (experts + 1);
  // Row r's inputs, fresh for each of the two runs.
  std::vector<std::vector<float>> xs, y0s, gates, states;
  for (int r = 0; r < R; ++r) {
    xs.push_back(randn(size_t(c.cols), g));
    y0s.push_back(randn(size_t(c.rows), g));
    gates.push_back(randn(size_t(c.cols), g));
    states.push_back(randn(size_t(Kc - 1) * std::max(ch, 1), g));
  }
  auto make = [&](int r) {
    return RowBufs{to_dev(xs[size_t(r)]),
                   to_dev(y0s[size_t(r)]),
                   to_dev(gates[size_t(r)]),
                   to_dev(states[size_t(r)]),
                   to_dev(std::vector<float>(size_t(std::max(ch, 1)))),
                   to_dev(std::vector<unsigned long long>(acc_n))};
  };
  auto args = [&](const RowBufs& b) {
    cuda::GemvArgs a{.W = W.dev, .x = b.x.get(), .y = b.y.get()};
    if (c.norm || c.gated) a.norm = norm.get(), a.eps = 1e-6f;
    if (c.gated) a.norm_group = 128, a.gate = b.gate.get();
    if (c.add) a.out = cuda::GemvOut::add;
    if (c.feed) a.feed = {router.dev, feed_norm.get(), b.acc.get()};
    if (c.conv)
      a.out = cuda::GemvOut::conv,
      a.conv = {conv_w.get(), b.state.get(), b.out.get(), ch, Kc, gated_rows};
    return a;
  };
  std::vector<RowBufs> alone, together;
  std::vector<cuda::GemvArgs> rows;
  for (int r = 0; r < R; ++r) {
    alone.push_back(make(r));
    ASSERT_EQ(cuda::gemv(args(alone.back()), nullptr), cudaSuccess) << "row " << r;
    together.push_back(make(r));
    rows.push_back(args(together.back()));
  }
  cuda::reset_path_counts();
  ASSERT_EQ(cuda::gemv_rows(rows.data(), R, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cuda::path_counts()[size_t(cuda::KernelPath::gemv_rows)], tiled ? 1 : 0);
  for (int r = 0; r < R; ++r) {
    const RowBufs &a = alone[size_t(r)], &b = together[size_t(r)];
    const auto ya = to_host(a.y.get(), size_t(c.rows));
    EXPECT_TRUE(same_bits(ya, to_host(b.y.get(), size_t(c.rows)))) << "y of row " << r;
    EXPECT_FALSE(same_bits(ya, y0s[size_t(r)])) << "row " << r << " left unwritten";
    if (c.feed) {
      const auto fa = to_host(a.acc.get(), acc_n);
      EXPECT_TRUE(same_bits(fa, to_host(b.acc.get(), acc_n))) << "feed of row " << r;
      EXPECT_NE(std::count(fa.begin(), fa.end(), 0ull), std::ptrdiff_t(acc_n)) << "no feed";
    }
    if (c.conv) {
      const size_t n = states[size_t(r)].size();
      EXPECT_TRUE(same_bits(to_host(a.state.get(), n), to_host(b.state.get(), n)))
          << "conv state of row " << r;
      EXPECT_TRUE(same_bits(to_host(a.out.get(), size_t(ch)), to_host(b.out.get(), size_t(ch))))
          << "conv out of row " << r;
    }
  }
}

// The step's shapes at 35b-a3b's widths: qkv, the GDN in-projection with its
// conv, the out-projections feeding the router, the output head's ring (here
// 20,000 rows: batches of 2 tiles through it), and a SIMT shape.
const RowsCase kRowsCases[] = {{"qkv", 9216, 2048, true, false, false, false, false},
                               {"gdn_in", 12352, 2048, true, false, false, false, true},
                               {"gdn_out", 2048, 4096, false, true, true, true, false},
                               {"o_proj", 2048, 4096, false, false, true, true, false},
                               {"head", 20000, 2048, true, false, false, false, false},
                               {"simt", 37, 64, true, false, true, false, false}};

INSTANTIATE_TEST_SUITE_P(Shapes, GemvRows,
                         ::testing::Combine(::testing::ValuesIn(kRowsCases),
                                            ::testing::Values(1, 2, 3, 8)),
                         [](const auto& p) {
                           return std::string(std::get<0>(p.param).name) + "_" +
                                  std::to_string(std::get<1>(p.param));
                         });

}  // namespace
}  // namespace tern::test
