// The prefill's MoE (moe_prefill.cu: router logits, routing, combine; the
// grouped GEMMs between them, prefill_gemm.cu) against their CPU twins on
// fresh random inputs, outputs poisoned first: the router GEMM against the
// exact sum, and the routing, grouped gate/up + down and combine (1 row, 1
// row an expert, an expert with every row) against model::route_token and
// the experts' rows. The GEMMs' bounds are test_prefill_gemm.cpp's.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "backends/cuda/moe_prefill.h"
#include "backends/cuda/prefill_gemm.h"
#include "core/bf16.h"
#include "gpu_test_util.h"
#include "model/moe.h"
#include "model/ops.h"
#include "staged_rows.h"

namespace tern::test {
namespace {

// The router GEMM (8-bit weights, bf16-split tensor-core sums) against the
// exact sum of x (s q + b) in double: within 1e-5 of sum |x| (|s| |q - 128| +
// |b + 128 s|), the magnitude its fp32 sums round at (measured ~1e-7; a code
// or activation in the wrong place is off by ~1 of it), for the 16- and
// 32-token blocks, at chunk and row-block edges, a single token and a short K.
TEST(PrefillRouter, MatchesTheExactSum) {
  TERN_REQUIRE_GPU();
  std::mt19937 g(23);
  const int rows = 257;
  for (auto [K, Ts] : {std::pair{2048, std::vector<int>{1, 15, 16, 17, 300, 1025, 2048}},
                       std::pair{192, std::vector<int>{17, 520, 1100}}}) {
    TestMat W(rows, K, 8, g, 0.05f);
    for (int T : Ts) {
      const auto x = randn(size_t(T) * K, g);
      auto dx = to_dev(x);
      // In one part and in the parts the prefill would use (or 3), summed in order.
      const int parts = std::max(3, cuda::router_parts(T, rows, K));
      auto dl = to_dev(std::vector<float>(size_t(parts) * T * rows, NAN));
      ASSERT_EQ(cuda::router_logits(W.dev, dx.get(), T, 1, dl.get(), nullptr), cudaSuccess);
      const auto one = to_host(dl.get(), size_t(T) * rows);
      ASSERT_EQ(cuda::router_logits(W.dev, dx.get(), T, parts, dl.get(), nullptr), cudaSuccess);
      auto got = to_host(dl.get(), size_t(parts) * T * rows);
      for (int p = 1; p < parts; ++p)
        for (size_t i = 0; i < size_t(T) * rows; ++i) got[i] += got[size_t(p) * T * rows + i];
      double worst_one = 0.0;
      const size_t words = size_t(K) / 4, groups = size_t(K) / 64;
      double worst = 0.0;
      for (int t = 0; t < T; ++t)
        for (int r = 0; r < rows; ++r) {
          double sum = 0.0, mag = 0.0;
          for (int k = 0; k < K; ++k) {
            const uint32_t w = W.qb.packed[size_t(r) * words + size_t(k) / 4];
            const double sc = bf16_to_f32(W.qb.scales[size_t(r) * groups + size_t(k) / 64]);
            const double bi = bf16_to_f32(W.qb.biases[size_t(r) * groups + size_t(k) / 64]);
            const double q = double((w >> (8 * (k % 4))) & 0xFFu), xk = x[size_t(t) * K + k];
            sum += xk * (sc * q + bi);
            mag += std::abs(xk) * (std::abs(sc) * std::abs(q - 128) + std::abs(bi + 128 * sc));
          }
          worst = std::max(worst, std::abs(got[size_t(t) * rows + r] - sum) / mag);
          worst_one = std::max(worst_one, std::abs(one[size_t(t) * rows + r] - sum) / mag);
        }
      EXPECT_LT(worst_one, 1e-5) << T << " tokens, K " << K << ", one part";
      EXPECT_LT(worst, 1e-5) << T << " tokens, K " << K << ", " << parts << " parts";
      std::printf("router %d tokens K %d: worst error %.2e (one part), %.2e (%d parts)\n", T, K,
                  worst_one, worst, parts);
    }
  }
}

// The MoE of T tokens from given router logits in `parts` partial sums
// ([parts][T][E + 1], as router_logits writes them): route_tokens, the grouped
// gate/up (SwiGLU) and down (routing weights) GEMMs and the combine, against
// model::route_token (on the parts summed in order, as route_tokens sums them)
// and the experts' rows on the CPU.
void check_moe(const std::vector<float>& part_logits, int parts, int T, int E, int top_k, int D,
               int I, bool tiles, int bn, int bm, std::mt19937& g) {
  const int K1 = top_k + 1, A = T * K1;
  const size_t n = size_t(T) * (E + 1);
  std::vector<float> logits(part_logits.begin(), part_logits.begin() + std::ptrdiff_t(n));
  for (int p = 1; p < parts; ++p)
    for (size_t i = 0; i < n; ++i) logits[i] += part_logits[size_t(p) * n + i];
  TestMat up((E + 1) * 2 * I, D, 4, g, 0.05f), down((E + 1) * D, I, 4, g, 0.05f);
  if (tiles) up.tile(I), down.tile();
  const auto x = randn(size_t(T) * D, g), h0 = randn(size_t(T) * D, g);
  // CPU: the routed experts in choice order, then the shared one.
  std::vector<float> want = h0;
  std::vector<model::Route> routes;
  for (int t = 0; t < T; ++t) {
    routes.push_back(model::route_token(&logits[size_t(t) * (E + 1)], E, top_k, true));
    model::Route r = routes.back();
    r.experts.push_back(E);
    r.weights.push_back(model::sigmoid(logits[size_t(t) * (E + 1) + E]));
    for (int k = 0; k < K1; ++k) {
      const int e = r.experts[size_t(k)];
      std::vector<float> gt(static_cast<size_t>(I)), ut(static_cast<size_t>(I)),
          yt(static_cast<size_t>(D));
      model::matmul(up.host.row_slice(int64_t(e) * 2 * I, I), &x[size_t(t) * D], 1, gt.data());
      model::matmul(up.host.row_slice(int64_t(e) * 2 * I + I, I), &x[size_t(t) * D], 1, ut.data());
      for (int f = 0; f < I; ++f) gt[size_t(f)] = model::silu(gt[size_t(f)]) * ut[size_t(f)];
      model::matmul(down.host.row_slice(int64_t(e) * D, D), gt.data(), 1, yt.data());
      for (int d = 0; d < D; ++d) want[size_t(t) * D + d] += r.weights[size_t(k)] * yt[size_t(d)];
    }
  }
  Staged s = stage_plain(x, T, D);
  auto dl = to_dev(part_logits), dh = to_dev(h0);
  auto counts = to_dev(std::vector<int>(size_t(E + 1), 0)),
       offsets = to_dev(std::vector<int>(size_t(E + 2), -1));
  auto cursor = to_dev(std::vector<int>(size_t(E + 1), -1)),
       ids = to_dev(std::vector<int>(size_t(T * top_k), -1));
  auto wts = to_dev(std::vector<float>(size_t(A), NAN)),
       slot_w = to_dev(std::vector<float>(size_t(A), NAN));
  auto slot_row = to_dev(std::vector<int>(size_t(A), -1)),
       token_slot = to_dev(std::vector<int>(size_t(A), -1));
  const int max_tiles = cuda::route_max_tiles(T, E, top_k, bn);
  auto map = to_dev(std::vector<cuda::GemmTile>(size_t(max_tiles), cuda::GemmTile{-1, -1, -1, 0}));
  auto map_count = to_dev(std::vector<int>(1, -1));
  auto act = to_dev(std::vector<uint16_t>(size_t(A) * I, 0xFFFF));
  auto y16 = to_dev(std::vector<uint16_t>(size_t(A) * D, 0x7E00));  // fp16 NaN
  const cuda::RouteArgs ra{.logits = dl.get(),
                           .T = T,
                           .E = E,
                           .top_k = top_k,
                           .parts = parts,
                           .counts = counts.get(),
                           .offsets = offsets.get(),
                           .cursor = cursor.get(),
                           .ids = ids.get(),
                           .wts = wts.get(),
                           .slot_row = slot_row.get(),
                           .slot_w = slot_w.get(),
                           .token_slot = token_slot.get(),
                           .map = map.get(),
                           .map_count = map_count.get(),
                           .bn = bn};
  ASSERT_EQ(cuda::route_tokens(ra, nullptr), cudaSuccess);
  cuda::GemmArgs ga;
  ga.W = up.dev, ga.group_rows = 2 * I, ga.pair = tiles ? 0 : I, ga.x = s.x.get();
  ga.xrow = slot_row.get(), ga.xscale = s.scale.get(), ga.map = map.get();
  ga.map_count = map_count.get(), ga.max_tiles = max_tiles, ga.out = cuda::GemmOut::swiglu;
  ga.act = act.get(), ga.bn = bn, ga.bm = bm;
  ASSERT_EQ(cuda::prefill_gemm(ga, nullptr), cudaSuccess);
  cuda::GemmArgs gd;
  gd.W = down.dev, gd.group_rows = D, gd.x = act.get(), gd.map = map.get();
  gd.map_count = map_count.get(), gd.max_tiles = max_tiles, gd.out = cuda::GemmOut::weighted;
  gd.y16 = y16.get(), gd.ldy = D, gd.row_w = slot_w.get(), gd.bn = bn, gd.bm = bm;
  ASSERT_EQ(cuda::prefill_gemm(gd, nullptr), cudaSuccess);
  ASSERT_EQ(cuda::moe_combine(y16.get(), token_slot.get(), T, K1, D, dh.get(), nullptr),
            cudaSuccess);

  // The routing: every slot once, each token's slots hold its experts' rows.
  const auto ts = to_host(token_slot.get(), size_t(A)), sr = to_host(slot_row.get(), size_t(A));
  const auto sw = to_host(slot_w.get(), size_t(A));
  const auto off = to_host(offsets.get(), size_t(E + 2));
  std::vector<int> seen(size_t(A), 0);
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < K1; ++k) {
      const int slot = ts[size_t(t * K1 + k)];
      ASSERT_GE(slot, 0);
      ASSERT_LT(slot, A);
      seen[size_t(slot)]++;
      EXPECT_EQ(sr[size_t(slot)], t);
      const int e = k < top_k ? routes[size_t(t)].experts[size_t(k)] : E;
      EXPECT_GE(slot, off[size_t(e)]) << "token " << t << " choice " << k;
      EXPECT_LT(slot, off[size_t(e) + 1]) << "token " << t << " choice " << k;
      const float w = k < top_k ? routes[size_t(t)].weights[size_t(k)]
                                : model::sigmoid(logits[size_t(t) * (E + 1) + E]);
      EXPECT_NEAR(sw[size_t(slot)], w, 1e-5f);
    }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), A);
  EXPECT_EQ(off[size_t(E + 1)], A);
  EXPECT_EQ(to_host(counts.get(), size_t(E + 1)), std::vector<int>(size_t(E + 1), 0))
      << "counts left zero";
  const auto got = to_host(dh.get(), want.size());
  std::vector<float> delta(want.size());
  for (size_t i = 0; i < want.size(); ++i) delta[i] = want[i] - h0[i];
  EXPECT_LE(max_diff(got, want), 2e-3f * max_abs(delta));
}

struct MoeCase {
  const char* routing;  // "random", "one expert", "spread"
  int T, E, top_k, D, I;
  bool tiles;
  int bn, bm;
  int parts = 1;  // the router's partial sums
};
class PrefillMoe : public ::testing::TestWithParam<MoeCase> {};

TEST_P(PrefillMoe, MatchesTheCpu) {
  TERN_REQUIRE_GPU();
  const MoeCase p = GetParam();
  std::mt19937 g(uint32_t(p.T * 3 + p.E + p.bn));
  // Parts after the first: small terms, as the router's later K ranges may be.
  auto logits = randn(size_t(p.parts) * p.T * (p.E + 1), g);
  for (size_t i = size_t(p.T) * (p.E + 1); i < logits.size(); ++i) logits[i] *= 0.25f;
  const std::string r = p.routing;
  for (int t = 0; t < p.T; ++t) {
    float* l = &logits[size_t(t) * (p.E + 1)];
    if (r == "one expert") l[3] = 30.0f;  // expert 3 takes every row
    if (r == "spread")                    // token t's first choice is expert t: one row an expert
      l[t % p.E] = 30.0f;
  }
  check_moe(logits, p.parts, p.T, p.E, p.top_k, p.D, p.I, p.tiles, p.bn, p.bm, g);
}

INSTANTIATE_TEST_SUITE_P(
    Routings, PrefillMoe,
    ::testing::Values(MoeCase{"random", 1, 8, 2, 256, 128, true, 64, 256},
                      MoeCase{"random", 300, 16, 4, 256, 128, true, 128, 256},
                      MoeCase{"random", 300, 16, 4, 256, 128, true, 128, 128},
                      MoeCase{"one expert", 200, 16, 4, 256, 128, true, 64, 256},
                      MoeCase{"spread", 16, 16, 1, 256, 128, true, 128, 256},
                      MoeCase{"random", 150, 16, 8, 2048, 512, true, 128, 256},
                      MoeCase{"random", 400, 256, 8, 128, 64, true, 64, 128},
                      MoeCase{"random", 70, 16, 4, 128, 64, false, 64, 256},
                      MoeCase{"random", 128, 256, 8, 2048, 512, true, 16, 256},
                      MoeCase{"one expert", 40, 16, 4, 256, 128, true, 16, 256},
                      MoeCase{"spread", 16, 16, 1, 256, 128, true, 16, 128},
                      MoeCase{"random", 300, 16, 4, 256, 128, true, 32, 256},
                      MoeCase{"random", 70, 16, 4, 128, 64, false, 16, 256},
                      MoeCase{"random", 256, 256, 8, 2048, 512, true, 16, 256, 7},
                      MoeCase{"random", 1000, 64, 4, 256, 128, true, 96, 128},
                      MoeCase{"one expert", 200, 16, 4, 256, 128, true, 96, 128},
                      MoeCase{"random", 300, 16, 4, 128, 64, false, 96, 128},
                      MoeCase{"random", 600, 64, 4, 256, 128, true, 48, 128},
                      MoeCase{"spread", 16, 16, 1, 256, 128, true, 48, 128},
                      MoeCase{"random", 70, 16, 4, 128, 64, false, 48, 128},
                      MoeCase{"one expert", 40, 16, 4, 256, 128, true, 16, 256, 2}));

}  // namespace
}  // namespace tern::test
