// The prefill's Gated DeltaNet kernels (gdn_prefill.cu, gdn_chunk_prep.cu,
// gdn_chunk_state.cu)
// against their CPU twins on fresh random inputs, outputs poisoned first:
// gdn_prep + gdn_conv_state vs the conv, SiLU, L2 norms and gates written out
// here as model::gdn_forward computes them; the delta rule, scan and chunked,
// vs model::delta_rule_recurrent at chunk-edge and odd lengths and in two
// calls, with fast decays (the state's memory a few tokens) and slow ones
// (hundreds of tokens: what the pass over the chunks carries matters).
// Bounds: the scan is fp32 (the order of its sums differs): 5e-5 of the
// largest value. The chunked form rounds its tensor-core operands to tf32
// (2^-11 relative) with fp32 sums: 4e-3 (a few roundings stack in V', O
// and the state). Each test prints the error it measured.
#include <algorithm>
#include <cmath>

#include "backends/cuda/gdn_prefill.h"
#include "gpu_test_util.h"
#include "model/gdn.h"
#include "model/ops.h"

namespace tern::test {
namespace {

constexpr int kD = 128;

// (Hk, Hv, T, conv kernel): kernel 4 (the model's) takes the 16-byte weight loads.
class PrefillGdnPrep : public ::testing::TestWithParam<std::tuple<int, int, int, int>> {};

TEST_P(PrefillGdnPrep, MatchesTheCpu) {
  TERN_REQUIRE_GPU();
  const auto [Hk, Hv, T, Kc] = GetParam();
  std::mt19937 g(uint32_t(Hk + 7 * T));
  const int C = 2 * Hk * kD + Hv * kD, ld = C + Hv * kD + 2 * Hv + 4;  // rows 16-byte aligned
  const auto proj = randn(size_t(T) * ld, g), w = randn(size_t(C) * Kc, g, 0.5f);
  auto state = randn(size_t(Kc - 1) * C, g);
  const auto a_log = randn(size_t(Hv), g, 0.5f), dt = randn(size_t(Hv), g);
  // CPU: the conv over [state; rows], SiLU, norms, gates.
  std::vector<float> all(state);
  for (int t = 0; t < T; ++t)
    all.insert(all.end(), &proj[size_t(t) * ld], &proj[size_t(t) * ld + C]);
  std::vector<float> q(size_t(T) * Hk * kD), k(q.size()), v(size_t(T) * Hv * kD),
      beta(size_t(T) * Hv), gg(beta.size());
  for (int t = 0; t < T; ++t) {
    std::vector<float> y(static_cast<size_t>(C));
    for (int c = 0; c < C; ++c) {
      float s = 0;
      for (int j = 0; j < Kc; ++j) s += w[size_t(c) * Kc + j] * all[size_t(t + j) * C + c];
      y[size_t(c)] = model::silu(s);
    }
    for (int m = 0; m < Hk; ++m) {
      model::l2_normalize(&y[size_t(m) * kD], kD, 1.0f / std::sqrt(float(kD)));
      model::l2_normalize(&y[size_t(Hk + m) * kD], kD, 1.0f);
    }
    std::copy_n(&y[0], Hk * kD, &q[size_t(t) * Hk * kD]);
    std::copy_n(&y[size_t(Hk) * kD], Hk * kD, &k[size_t(t) * Hk * kD]);
    std::copy_n(&y[size_t(2 * Hk) * kD], Hv * kD, &v[size_t(t) * Hv * kD]);
    for (int n = 0; n < Hv; ++n) {
      const float* row = &proj[size_t(t) * ld + C + Hv * kD];
      beta[size_t(t) * Hv + n] = model::sigmoid(row[n]);
      gg[size_t(t) * Hv + n] =
          -std::exp(a_log[size_t(n)]) * model::softplus(row[Hv + n] + dt[size_t(n)]);
    }
  }
  const std::vector<float> new_state(all.end() - (Kc - 1) * C, all.end());
  auto dp = to_dev(proj), dw = to_dev(w), ds = to_dev(state), dal = to_dev(a_log), ddt = to_dev(dt);
  auto dq = to_dev(std::vector<float>(q.size(), NAN)),
       dk = to_dev(std::vector<float>(k.size(), NAN));
  auto dv = to_dev(std::vector<float>(v.size(), NAN)),
       db = to_dev(std::vector<float>(beta.size(), NAN));
  auto dg = to_dev(std::vector<float>(gg.size(), NAN));
  ASSERT_EQ(cuda::gdn_prep({.proj = dp.get(),
                            .T = T,
                            .ld = ld,
                            .conv_w = dw.get(),
                            .conv_state = ds.get(),
                            .kernel = Kc,
                            .a_log = dal.get(),
                            .dt_bias = ddt.get(),
                            .k_heads = Hk,
                            .v_heads = Hv,
                            .q = dq.get(),
                            .k = dk.get(),
                            .v = dv.get(),
                            .beta = db.get(),
                            .g = dg.get()},
                           nullptr),
            cudaSuccess);
  ASSERT_EQ(cuda::gdn_conv_state(dp.get(), T, ld, C, Kc, ds.get(), nullptr), cudaSuccess);
  EXPECT_LE(max_diff(to_host(dq.get(), q.size()), q), 2e-6f * max_abs(q));
  EXPECT_LE(max_diff(to_host(dk.get(), k.size()), k), 2e-6f * max_abs(k));
  EXPECT_LE(max_diff(to_host(dv.get(), v.size()), v), 2e-6f * max_abs(v));
  EXPECT_LE(max_diff(to_host(db.get(), beta.size()), beta), 1e-6f);
  EXPECT_LE(max_diff(to_host(dg.get(), gg.size()), gg), 2e-6f * max_abs(gg));
  EXPECT_EQ(to_host(ds.get(), new_state.size()), new_state);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PrefillGdnPrep,
                         ::testing::Values(std::tuple{2, 4, 1, 4}, std::tuple{2, 4, 2, 4},
                                           std::tuple{16, 32, 70, 4}, std::tuple{16, 32, 3, 4},
                                           std::tuple{2, 4, 9, 3}, std::tuple{2, 4, 5, 2}));

// The delta rule over T tokens in calls of `calls` tokens each.
struct DeltaCase {
  int Hk, Hv;
  std::vector<int> calls;
  bool chunked;
  bool slow = false;  // log-decays ~ -0.007 a token, else ~ -0.4
};
class PrefillDelta : public ::testing::TestWithParam<DeltaCase> {};

TEST_P(PrefillDelta, MatchesTheRecurrence) {
  TERN_REQUIRE_GPU();
  const DeltaCase p = GetParam();
  int T = 0;
  for (int n : p.calls) T += n;
  std::mt19937 gen(uint32_t(T * 5 + p.Hv + p.chunked));
  auto q = randn(size_t(T) * p.Hk * kD, gen), k = randn(q.size(), gen);
  for (int i = 0; i < T * p.Hk; ++i) {
    model::l2_normalize(&q[size_t(i) * kD], kD, 1.0f / std::sqrt(float(kD)));
    model::l2_normalize(&k[size_t(i) * kD], kD, 1.0f);
  }
  const auto v = randn(size_t(T) * p.Hv * kD, gen);
  auto beta = randn(size_t(T) * p.Hv, gen), g = randn(beta.size(), gen, 0.5f);
  for (float& b : beta) b = model::sigmoid(b);
  for (float& x : g) x = -std::exp(x - (p.slow ? 5.0f : 1.0f));
  auto S = randn(size_t(p.Hv) * kD * kD, gen, 0.1f);
  std::vector<float> o(v.size());
  auto dS = to_dev(S);
  for (int n = 0; n < p.Hv; ++n) {
    const int m = n / (p.Hv / p.Hk);
    std::vector<float> qn(size_t(T) * kD), kn(qn.size()), vn(qn.size()), bn(static_cast<size_t>(T)),
        gn(static_cast<size_t>(T)), on(qn.size());
    for (int t = 0; t < T; ++t) {
      std::copy_n(&q[(size_t(t) * p.Hk + m) * kD], kD, &qn[size_t(t) * kD]);
      std::copy_n(&k[(size_t(t) * p.Hk + m) * kD], kD, &kn[size_t(t) * kD]);
      std::copy_n(&v[(size_t(t) * p.Hv + n) * kD], kD, &vn[size_t(t) * kD]);
      bn[size_t(t)] = beta[size_t(t) * p.Hv + n], gn[size_t(t)] = g[size_t(t) * p.Hv + n];
    }
    model::delta_rule_recurrent(qn.data(), kn.data(), vn.data(), gn.data(), bn.data(), T, kD, kD,
                                &S[size_t(n) * kD * kD], on.data());
    for (int t = 0; t < T; ++t)
      std::copy_n(&on[size_t(t) * kD], kD, &o[(size_t(t) * p.Hv + n) * kD]);
  }
  auto dq = to_dev(q), dk = to_dev(k), dv = to_dev(v), db = to_dev(beta), dg = to_dev(g);
  auto dout = to_dev(std::vector<float>(o.size(), NAN));
  int max_call = 0;
  for (int n : p.calls) max_call = std::max(max_call, n);
  auto scratch = to_dev(std::vector<float>(cuda::delta_scratch_floats(max_call, p.Hk, p.Hv), NAN));
  int t0 = 0;
  for (int n : p.calls) {
    const size_t qo = size_t(t0) * p.Hk * kD, vo = size_t(t0) * p.Hv * kD, go = size_t(t0) * p.Hv;
    const cuda::DeltaArgs a{
        dq.get() + qo, dk.get() + qo, dv.get() + vo, db.get() + go,   dg.get() + go, n,
        p.Hk,          p.Hv,          dS.get(),      dout.get() + vo, scratch.get()};
    if (p.chunked) {
      ASSERT_EQ(cuda::gdn_chunk_prep(a, nullptr), cudaSuccess);
      ASSERT_EQ(cuda::gdn_chunk_state(a, nullptr), cudaSuccess);
    } else {
      ASSERT_EQ(cuda::gdn_delta_scan(a, nullptr), cudaSuccess);
    }
    t0 += n;
  }
  const float bound = p.chunked ? 4e-3f : 5e-5f;
  const float dout_err = max_diff(to_host(dout.get(), o.size()), o);
  const float ds_err = max_diff(to_host(dS.get(), S.size()), S);
  const std::string what = std::string(p.chunked ? "chunked" : "scan") + (p.slow ? " slow" : "") +
                           " T=" + std::to_string(T);
  report_measured((what + " o").c_str(), dout_err, max_abs(o));
  report_measured((what + " S").c_str(), ds_err, max_abs(S));
  EXPECT_LE(dout_err, bound * max_abs(o));
  EXPECT_LE(ds_err, bound * max_abs(S));
}

INSTANTIATE_TEST_SUITE_P(
    Lengths, PrefillDelta,
    ::testing::Values(DeltaCase{2, 4, {1}, false}, DeltaCase{2, 4, {37}, false},
                      DeltaCase{16, 32, {5, 30, 1}, false}, DeltaCase{2, 4, {1}, true},
                      DeltaCase{2, 4, {64}, true}, DeltaCase{2, 4, {65}, true},
                      DeltaCase{16, 32, {300}, true}, DeltaCase{16, 32, {100, 77}, true},
                      DeltaCase{2, 4, {2000}, true}, DeltaCase{2, 4, {700, 800}, true, true}));

}  // namespace
}  // namespace tern::test
