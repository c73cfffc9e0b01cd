// The prefill's Gated DeltaNet and attention kernels against their CPU twins
// on fresh random inputs, outputs poisoned first:
//   gdn_prep + gdn_conv_state vs the conv, SiLU, L2 norms and gates written
//   out here as model::gdn_forward computes them; the delta rule, scan and
//   chunked, vs model::delta_rule_recurrent at chunk-edge and odd lengths and in
//   two calls; attn_prep vs model::rms_norm + model::apply_rope; attn_flash vs a
//   double-precision softmax attention over the same bf16 cache and bf16 q.
// Bounds: the scan is fp32 (the order of its sums differs): 5e-5 of the
// largest value. The chunked form rounds its tensor-core operands to tf32
// (2^-11 relative) with fp32 sums: 4e-3 (a few roundings stack in V', O
// and the state). Attention rounds the probabilities to bf16 (2^-9
// relative; q and the cache are bf16 already): 2^-9 of max |v|.
// Each test prints the error it measured.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "backends/cuda/prefill_kernels.h"
#include "core/bf16.h"
#include "gpu_test_util.h"
#include "model/attention.h"
#include "model/gdn.h"
#include "model/ops.h"
#include "model/rope.h"

namespace tern::test {
namespace {

constexpr int kD = 128;

void report(const char* what, float diff, float scale) {
  std::printf("[measured] %s: max|diff| = %.3g of max|ref| %.3g (%.2e relative)\n", what, diff,
              scale, double(diff / scale));
}

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
  for (float& x : g) x = -std::exp(x - 1.0f);
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
  auto scratch = to_dev(std::vector<float>(cuda::delta_scratch_floats(max_call, p.Hv), NAN));
  int t0 = 0;
  for (int n : p.calls) {
    const size_t qo = size_t(t0) * p.Hk * kD, vo = size_t(t0) * p.Hv * kD, go = size_t(t0) * p.Hv;
    const cuda::DeltaArgs a{
        dq.get() + qo, dk.get() + qo, dv.get() + vo, db.get() + go,   dg.get() + go, n,
        p.Hk,          p.Hv,          dS.get(),      dout.get() + vo, scratch.get()};
    ASSERT_EQ(p.chunked ? cuda::gdn_delta_chunked(a, nullptr) : cuda::gdn_delta_scan(a, nullptr),
              cudaSuccess);
    t0 += n;
  }
  const float bound = p.chunked ? 4e-3f : 5e-5f;
  const float dout_err = max_diff(to_host(dout.get(), o.size()), o);
  const float ds_err = max_diff(to_host(dS.get(), S.size()), S);
  const std::string what = std::string(p.chunked ? "chunked" : "scan") + " T=" + std::to_string(T);
  report((what + " o").c_str(), dout_err, max_abs(o));
  report((what + " S").c_str(), ds_err, max_abs(S));
  EXPECT_LE(dout_err, bound * max_abs(o));
  EXPECT_LE(ds_err, bound * max_abs(S));
}

INSTANTIATE_TEST_SUITE_P(
    Lengths, PrefillDelta,
    ::testing::Values(DeltaCase{2, 4, {1}, false}, DeltaCase{2, 4, {37}, false},
                      DeltaCase{16, 32, {5, 30, 1}, false}, DeltaCase{2, 4, {1}, true},
                      DeltaCase{2, 4, {64}, true}, DeltaCase{2, 4, {65}, true},
                      DeltaCase{16, 32, {300}, true}, DeltaCase{16, 32, {100, 77}, true},
                      DeltaCase{2, 4, {2000}, true}));

// Where dims 8q.. of position p of KV head h lie in a cache of `cap` positions.
size_t kv_at(int h, int cap, int p, int q, bool v) {
  return kv_chunked_at(size_t(h) * cap + size_t(p), q, v);
}

TEST(PrefillAttention, PrepMatchesTheCpu) {
  TERN_REQUIRE_GPU();
  constexpr int H = 16, KV = 2, T = 37, pos0 = 130, cap = 176, R = 64, hd = 256;
  constexpr float theta = 1e7f;
  std::mt19937 g(3);
  const int width = (2 * H + 2 * KV) * hd;
  const auto qkv = randn(size_t(T) * width, g);
  auto qn = randn(hd, g, 0.2f), kn = randn(hd, g, 0.2f);
  for (float& x : qn) x += 1.0f;
  for (float& x : kn) x += 1.0f;
  const auto freqs = rope_inv_freqs(theta, R);
  auto dqkv = to_dev(qkv), dqn = to_dev(qn), dkn = to_dev(kn), df = to_dev(freqs);
  auto q16 = to_dev(std::vector<uint16_t>(size_t(H) * T * hd, 0xFFFF));
  const std::vector<uint16_t> poison(size_t(KV) * cap * hd, 0x7FC1);
  auto kc = to_dev(poison), vc = to_dev(poison);
  ASSERT_EQ(cuda::attn_prep({.qkv = dqkv.get(),
                             .T = T,
                             .pos0 = pos0,
                             .q_norm = dqn.get(),
                             .k_norm = dkn.get(),
                             .heads = H,
                             .kv_heads = KV,
                             .rotary = R,
                             .capacity = cap,
                             .inv_freq = df.get(),
                             .q16 = q16.get(),
                             .k_cache = kc.get(),
                             .v_cache = vc.get()},
                            nullptr),
            cudaSuccess);
  const auto hq = to_host(q16.get(), size_t(H) * T * hd);
  const auto hk = to_host(kc.get(), poison.size()), hv = to_host(vc.get(), poison.size());
  float qerr = 0, kerr = 0, verr = 0;
  for (int t = 0; t < T; ++t) {
    const float* row = &qkv[size_t(t) * width];
    for (int h = 0; h < H; ++h) {
      std::vector<float> x(static_cast<size_t>(hd));
      model::rms_norm(row + h * 2 * hd, qn.data(), hd, 1e-6f, x.data());
      model::apply_rope(x.data(), R, theta, pos0 + t);
      for (int d = 0; d < hd; ++d) {
        const float want = x[size_t(d)] * 1.4426950408889634f / 16.0f;
        const float got = bf16_to_f32(hq[(size_t(h) * T + t) * hd + d]);
        qerr = std::max(qerr, std::abs(got - want) / (std::abs(want) + 1e-3f));
      }
    }
    for (int h = 0; h < KV; ++h) {
      std::vector<float> x(static_cast<size_t>(hd));
      model::rms_norm(row + 2 * H * hd + h * hd, kn.data(), hd, 1e-6f, x.data());
      model::apply_rope(x.data(), R, theta, pos0 + t);
      const float* vr = row + 2 * H * hd + KV * hd + h * hd;
      for (int d = 0; d < hd; ++d) {
        const float gk = bf16_to_f32(hk[kv_at(h, cap, pos0 + t, d / 8, false) + size_t(d % 8)]);
        const float gv = bf16_to_f32(hv[kv_at(h, cap, pos0 + t, d / 8, true) + size_t(d % 8)]);
        kerr = std::max(kerr, std::abs(gk - x[size_t(d)]) / (std::abs(x[size_t(d)]) + 1e-3f));
        verr = std::max(verr, std::abs(gv - vr[d]) / (std::abs(vr[d]) + 1e-3f));
      }
    }
  }
  std::printf("[measured] attention prep relative errors: q %.2e, k %.2e, v %.2e\n", qerr, kerr,
              verr);
  EXPECT_LE(qerr, 1.0f / 256 + 1e-5f);  // bf16
  EXPECT_LE(kerr, 1.0f / 256 + 1e-5f);
  EXPECT_LE(verr, 1.0f / 256 + 1e-5f);
  // Positions before pos0 are untouched.
  for (int q = 0; q < hd / 8; ++q) EXPECT_EQ(hk[kv_at(1, cap, pos0 - 1, q, false)], 0x7FC1);
}

struct FlashCase {
  int H, KV, T, pos0;
  bool split = false;  // a work area: short chunks over long caches split their keys
};
class PrefillFlash : public ::testing::TestWithParam<FlashCase> {};

TEST_P(PrefillFlash, MatchesDoublePrecision) {
  TERN_REQUIRE_GPU();
  const FlashCase p = GetParam();
  constexpr int hd = 256;
  const int n = p.pos0 + p.T, cap = (n + 15) / 16 * 16 + 16, G = p.H / p.KV;
  std::mt19937 g(uint32_t(p.T * 11 + p.pos0 + p.H));
  std::vector<uint16_t> kc(size_t(p.KV) * cap * hd), vc(kc.size());  // zeros
  std::vector<float> K(size_t(p.KV) * n * hd), V(K.size());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int h = 0; h < p.KV; ++h)
    for (int pos = 0; pos < n; ++pos)
      for (int d = 0; d < hd; ++d) {
        const uint16_t kb = f32_to_bf16(u(g)), vb = f32_to_bf16(u(g));
        kc[kv_at(h, cap, pos, d / 8, false) + size_t(d % 8)] = kb;
        vc[kv_at(h, cap, pos, d / 8, true) + size_t(d % 8)] = vb;
        K[(size_t(h) * n + pos) * hd + d] = bf16_to_f32(kb);
        V[(size_t(h) * n + pos) * hd + d] = bf16_to_f32(vb);
      }
  std::vector<uint16_t> q16(size_t(p.H) * p.T * hd);
  std::normal_distribution<float> nd(0.0f, 0.25f);
  for (uint16_t& x : q16) x = f32_to_bf16(nd(g));
  std::vector<float> ref(size_t(p.T) * p.H * hd);
  for (int t = 0; t < p.T; ++t)
    for (int h = 0; h < p.H; ++h) {
      const int kvh = h / G, keys = p.pos0 + t + 1;
      std::vector<double> s(static_cast<size_t>(keys));
      double mx = -1e300;
      for (int j = 0; j < keys; ++j) {
        double acc = 0;
        for (int d = 0; d < hd; ++d)
          acc += double(bf16_to_f32(q16[(size_t(h) * p.T + t) * hd + d])) *
                 K[(size_t(kvh) * n + j) * hd + d];
        s[size_t(j)] = acc, mx = std::max(mx, acc);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp2(x - mx));
      for (int d = 0; d < hd; ++d) {
        double o = 0;
        for (int j = 0; j < keys; ++j) o += s[size_t(j)] * V[(size_t(kvh) * n + j) * hd + d];
        ref[(size_t(t) * p.H + h) * hd + d] = float(o / sum);
      }
    }
  auto dq = to_dev(q16), dk = to_dev(kc), dv = to_dev(vc);
  auto out = to_dev(std::vector<float>(ref.size(), NAN));
  const size_t work_floats = p.split ? cuda::flash_work_floats(p.H, p.KV) : 0;
  auto work = to_dev(std::vector<float>(std::max<size_t>(work_floats, 1), NAN));
  ASSERT_EQ(cuda::attn_flash({dq.get(), dk.get(), dv.get(), p.T, p.pos0, p.H, p.KV, cap, out.get(),
                              p.split ? work.get() : nullptr, work_floats},
                             nullptr),
            cudaSuccess);
  const float err = max_diff(to_host(out.get(), ref.size()), ref);
  report(("flash T=" + std::to_string(p.T) + " pos0=" + std::to_string(p.pos0) +
          (p.split ? " split" : ""))
             .c_str(),
         err, max_abs(ref));
  // Each probability is rounded to bf16 (2^-9 relative) and they weigh the
  // values (|v| <= 1) with weights summing to 1: |err| <= 2^-9, plus fp32 sums.
  EXPECT_LE(err, 1.0f / 512 + 1e-5f);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PrefillFlash,
    ::testing::Values(FlashCase{16, 2, 1, 0}, FlashCase{16, 2, 37, 300}, FlashCase{16, 2, 200, 0},
                      FlashCase{4, 2, 70, 33}, FlashCase{16, 2, 129, 1000},
                      FlashCase{16, 2, 1, 0, true}, FlashCase{16, 2, 5, 3000, true},
                      FlashCase{16, 2, 37, 2000, true}, FlashCase{4, 2, 70, 900, true},
                      FlashCase{16, 2, 129, 1000, true}, FlashCase{16, 2, 64, 4000}));

}  // namespace
}  // namespace tern::test
