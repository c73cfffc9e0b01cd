// The prefill's staging, 4-bit GEMM and MoE kernels (prefill_kernels.h)
// against their CPU twins on fresh random inputs, outputs poisoned first: the
// staging modes (model::rms_norm, the gated norm, the attention gate), the GEMM
// in both weight layouts, both tile widths and every epilogue at real and odd
// sizes, and the MoE's routing, grouped gate/up + down and combine (1 row, 1
// row an expert, an expert with every row).
//
// Bounds: the GEMM multiplies fp16 weights (s q + b rounded once) by fp16
// activations (each row scaled into [2^14, 2^15) first), both within 2^-11
// relative of their fp32 values, with fp32 sums: the error of a K-term dot
// product is a random walk of those roundings, ~2e-4 of the sums' RMS at
// these sizes, so 1e-3 of the largest reference value holds with margin.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "backends/cuda/prefill_kernels.h"
#include "core/bf16.h"
#include "gpu_test_util.h"
#include "model/moe.h"
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

// Stages x ([T][K]) as it is on the device; returns the staged buffer and scales.
struct Staged {
  DevPtr<uint16_t> x;
  DevPtr<float> scale;
};
Staged stage_plain(const std::vector<float>& x, int T, int K) {
  auto dx = to_dev(x);
  Staged s{to_dev(std::vector<uint16_t>(size_t(T) * K, 0xFFFF)),
           to_dev(std::vector<float>(size_t(T), NAN))};
  EXPECT_EQ(
      cuda::stage_rows({.x = dx.get(), .T = T, .K = K, .out = s.x.get(), .xscale = s.scale.get()},
                       nullptr),
      cudaSuccess);
  return s;
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

struct GemmCase {
  int rows, K, n;
  bool tiles;
  int bn, bm;
  cuda::GemmOut out;
  bool split = false;  // a work area: few blocks split K
};

class PrefillGemm : public ::testing::TestWithParam<GemmCase> {};

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
