// The prefill's attention kernels (attn_prefill.cu) against their CPU twins
// on fresh random inputs, outputs poisoned first: attn_prep vs
// model::rms_norm + model::apply_rope; attn_flash vs a double-precision
// softmax attention over the same bf16 cache and bf16 q.
// Bound: attention rounds the probabilities to bf16 (2^-9 relative; q and the
// cache are bf16 already): 2^-9 of max |v|. Each test prints the error it
// measured.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cuda/attn_prefill.h"
#include "core/bf16.h"
#include "gpu_test_util.h"
#include "model/attention.h"
#include "model/ops.h"
#include "model/rope.h"

namespace tern::test {
namespace {

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
  report_measured(("flash T=" + std::to_string(p.T) + " pos0=" + std::to_string(p.pos0) +
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
