// GEMV and MoE kernels against their CPU twins (model::matmul, model::route_token,
// the SwiGLU experts), on fresh random inputs. Tolerance: 2e-5 of the output's
// max |value| (fp32 accumulation in another order; the GPU sums s*sum(q*x) +
// b*sum(x) per group where the CPU dots dequantised rows).
#include <cmath>

#include "gpu_test_util.h"
#include "model/moe.h"
#include "model/ops.h"

namespace tern::test {
namespace {

constexpr float kRel = 2e-5f;

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
  EXPECT_LE(max_diff(got, ref), kRel * max_abs(ref)) << "store";

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
  EXPECT_LE(max_diff(got, ref), kRel * max_abs(ref)) << "norm + add";
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
  EXPECT_LE(max_diff(got, ref), kRel * max_abs(ref));
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
  const float tol = kRel * max_abs(acc);
  EXPECT_LE(max_diff(to_host(dy.get(), y.size()), y), tol) << "stored rows";
  EXPECT_LE(max_diff(to_host(dout.get(), out.size()), out), 4 * tol) << "conv out";
  EXPECT_LE(max_diff(to_host(dst.get(), next.size()), next), tol) << "conv state";
}

INSTANTIATE_TEST_SUITE_P(Paths, GemvConv, ::testing::Bool());

struct MoeCase {
  int hidden, experts, top_k, inter;
  bool fed;  // the router logits fed by the GEMV that finishes h
};

class Moe : public ::testing::TestWithParam<MoeCase> {};

// h = h0 + O x (the GEMV that finishes h, feeding the router or not), the
// routing, the experts' gate/up and down, against the CPU.
TEST_P(Moe, RouterExpertsMatchCpu) {
  TERN_REQUIRE_GPU();
  const auto [D, E, k, I, fed] = GetParam();
  constexpr int Dx = 256;
  std::mt19937 g(uint32_t(D + E + k + fed));
  TestMat O(D, Dx, 4, g, 1.0f / std::sqrt(float(Dx)));
  TestMat R(E + 1, D, 8, g, 1.0f / std::sqrt(float(D)));
  TestMat GU((E + 1) * 2 * I, D, 4, g, 1.0f / std::sqrt(float(D)));
  TestMat DN((E + 1) * D, I, 4, g, 1.0f / std::sqrt(float(I)));
  O.tile(), GU.tile(I), DN.tile();
  const auto h0 = randn(size_t(D), g), x = randn(size_t(Dx), g);
  std::vector<float> normw(static_cast<size_t>(D));
  for (float& w : normw) w = 1.0f + 0.1f * randn(1, g)[0];
  auto dh = to_dev(h0), dx = to_dev(x), dn = to_dev(normw);
  auto da = to_dev(std::vector<float>(static_cast<size_t>(D))),
       dl = to_dev(std::vector<float>(size_t(E + 1)));
  auto dwts = to_dev(std::vector<float>(size_t(k + 1))),
       dact = to_dev(std::vector<float>(size_t((k + 1) * I)));
  auto dids = to_dev(std::vector<int>(static_cast<size_t>(k)));
  auto dcnt = to_dev(std::vector<unsigned>(1, 0u));
  const size_t feed_words = size_t(cuda::kFeedCopies) * (E + 1);
  auto dfeed = to_dev(std::vector<unsigned long long>(2 * feed_words, 0ull));

  // CPU twin.
  std::vector<float> h(static_cast<size_t>(D)), a(static_cast<size_t>(D)), logits(size_t(E + 1));
  model::matmul(O.host, x.data(), 1, h.data());
  for (int d = 0; d < D; ++d) h[size_t(d)] += h0[size_t(d)];
  model::rms_norm(h.data(), normw.data(), D, 1e-6f, a.data());
  model::matmul(R.host, a.data(), 1, logits.data());
  const model::Route route = model::route_token(logits.data(), E, k, true);
  std::vector<float> wts = route.weights;
  wts.push_back(model::sigmoid(logits[size_t(E)]));
  std::vector<float> act(size_t((k + 1) * I)),
      out = h, y(static_cast<size_t>(D)), gg(static_cast<size_t>(I)), uu(static_cast<size_t>(I));
  for (int s = 0; s <= k; ++s) {
    const int e = s < k ? route.experts[size_t(s)] : E;
    model::matmul(GU.host.row_slice(int64_t(e) * 2 * I, I), a.data(), 1, gg.data());
    model::matmul(GU.host.row_slice(int64_t(e) * 2 * I + I, I), a.data(), 1, uu.data());
    for (int f = 0; f < I; ++f) act[size_t(s * I + f)] = model::silu(gg[size_t(f)]) * uu[size_t(f)];
    model::matmul(DN.host.row_slice(int64_t(e) * D, D), &act[size_t(s * I)], 1, y.data());
    for (int d = 0; d < D; ++d) out[size_t(d)] += wts[size_t(s)] * y[size_t(d)];
  }

  cuda::RouterArgs ra{R.dev,      dh.get(),   dn.get(),   1e-6f, da.get(), dl.get(),
                      dcnt.get(), dids.get(), dwts.get(), k,     nullptr};
  const cuda::ExpertsUpArgs up{GU.dev, da.get(), dids.get(), dact.get(), E, k, I};
  if (fed) {
    ASSERT_TRUE(cuda::router_fed(O.dev, ra, up));
  }
  // Three tokens, the feeds in turn as the backend's layers take them: the
  // later ones check that the feeds and the counter reset.
  for (int rep = 0; rep < 3; ++rep) {
    if (fed) {
      ra.fed = dfeed.get() + size_t(rep % 2) * feed_words;
      ra.spent = dfeed.get() + size_t(1 - rep % 2) * feed_words;
    }
    const cuda::RouterFeed feed{R.dev, dn.get(), ra.fed};
    ASSERT_EQ(cudaMemcpy(dh.get(), h0.data(), h0.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(
        cuda::gemv(
            {.W = O.dev, .x = dx.get(), .y = dh.get(), .out = cuda::GemvOut::add, .feed = feed},
            nullptr),
        cudaSuccess);
    ASSERT_EQ(cuda::route_experts_up(ra, up, nullptr), cudaSuccess);
  }
  EXPECT_LE(max_diff(to_host(dh.get(), size_t(D)), h), kRel * max_abs(h));
  const auto ids = to_host(dids.get(), size_t(k));
  EXPECT_EQ(ids, route.experts);
  EXPECT_LE(max_diff(to_host(dwts.get(), size_t(k + 1)), wts), 1e-5f);
  EXPECT_LE(max_diff(to_host(dact.get(), act.size()), act), kRel * 4 * max_abs(act));
  // An L2 prefetch of a later GEMV's tiles changes nothing; its addresses
  // must stay in bounds.
  ASSERT_EQ(cuda::experts_down({DN.dev, dact.get(), dids.get(), dwts.get(), dh.get(), E, k,
                                cuda::gemv_ahead(O.dev)},
                               nullptr),
            cudaSuccess);
  EXPECT_LE(max_diff(to_host(dh.get(), size_t(D)), out), kRel * 4 * max_abs(out));
}

// The expert choice alone against the CPU's, on logits with many exact ties
// (values from a small set, so the lower index must win within and across
// lanes) and on distinct ones, for each keys-a-lane width the kernels use.
TEST(MoePick, TopKMatchesCpuWithTies) {
  TERN_REQUIRE_GPU();
  std::mt19937 g(7);
  for (const int E : {16, 100, 256, 512, 1024})
    for (const int k : {1, 8, 10})
      for (const bool tied : {true, false}) {
        std::vector<float> l = randn(size_t(E), g);
        if (tied)
          for (float& v : l) v = std::round(v * 2.0f) / 2.0f;  // ~9 distinct values
        auto dl = to_dev(l);
        auto dids = to_dev(std::vector<int>(size_t(k), -1));
        ASSERT_EQ(cuda::pick_top_k(dl.get(), E, k, dids.get(), nullptr), cudaSuccess);
        EXPECT_EQ(to_host(dids.get(), size_t(k)), model::route_token(l.data(), E, k, true).experts)
            << "E " << E << " k " << k << (tied ? " tied" : "");
      }
  EXPECT_EQ(cuda::pick_top_k(nullptr, 16, 17, nullptr, nullptr), cudaErrorInvalidValue);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Moe,
    ::testing::Values(MoeCase{64, 16, 4, 64, false}, MoeCase{128, 16, 4, 64, false},
                      MoeCase{128, 16, 4, 64, true}, MoeCase{1024, 128, 8, 256, true},
                      MoeCase{2048, 256, 8, 512, false}, MoeCase{2048, 256, 8, 512, true}));

}  // namespace
}  // namespace tern::test
