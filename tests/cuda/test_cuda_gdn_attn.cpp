// The Gated DeltaNet step and attention decode kernels against their CPU
// twins (model::delta_rule_recurrent + q/k norms + gates; model::apply_rope, RMSNorm
// and softmax attention over a bf16 cache), on fresh random inputs. (The
// gated RMSNorm after the step is the out_proj GEMV's, tested with the GEMVs.)
#include <algorithm>
#include <cmath>

#include "core/bf16.h"
#include "gpu_test_util.h"
#include "model/attention.h"
#include "model/gdn.h"
#include "model/ops.h"
#include "model/rope.h"

namespace tern::test {
namespace {

class GdnStep : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(GdnStep, MatchesCpuRecurrence) {
  TERN_REQUIRE_GPU();
  const auto [Hk, Hv] = GetParam();
  constexpr int d = 128;
  std::mt19937 g(uint32_t(Hk * 31 + Hv));
  const int key_dim = Hk * d, C = 2 * key_dim + Hv * d;
  std::vector<float> a_log(static_cast<size_t>(Hv)), dt(static_cast<size_t>(Hv));
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int n = 0; n < Hv; ++n)
    a_log[size_t(n)] = std::log(1.0f + 15.0f * u(g)), dt[size_t(n)] = 2 * u(g) - 1;
  auto S = randn(size_t(Hv) * d * d, g, 0.1f);
  auto dal = to_dev(a_log), ddt = to_dev(dt), dS = to_dev(S),
       dy = to_dev(std::vector<float>(size_t(Hv * d)));

  // Two steps on fresh inputs, the state carried over.
  for (int step = 0; step < 2; ++step) {
    const auto conv = randn(size_t(C), g), b = randn(size_t(Hv), g), a = randn(size_t(Hv), g);
    auto dconv = to_dev(conv), db = to_dev(b), da = to_dev(a);
    cuda::GdnStepArgs args{dconv.get(), db.get(), da.get(), dal.get(), ddt.get(),
                           dS.get(),    dy.get(), Hk,       Hv};
    ASSERT_EQ(cuda::gdn_step(args, nullptr), cudaSuccess);

    std::vector<float> y(size_t(Hv * d));
    for (int n = 0; n < Hv; ++n) {
      const int m = n / (Hv / Hk);
      std::vector<float> q(&conv[size_t(m * d)], &conv[size_t(m * d + d)]);
      std::vector<float> k(&conv[size_t(key_dim + m * d)], &conv[size_t(key_dim + m * d + d)]);
      const float* v = &conv[size_t(2 * key_dim + n * d)];
      model::l2_normalize(q.data(), d, 1.0f / std::sqrt(float(d)));
      model::l2_normalize(k.data(), d, 1.0f);
      const float beta = model::sigmoid(b[size_t(n)]);
      const float gg = -std::exp(a_log[size_t(n)]) * model::softplus(a[size_t(n)] + dt[size_t(n)]);
      model::delta_rule_recurrent(q.data(), k.data(), v, &gg, &beta, 1, d, d, &S[size_t(n) * d * d],
                                  &y[size_t(n * d)]);
    }
    EXPECT_LE(max_diff(to_host(dy.get(), y.size()), y), 1e-5f * max_abs(y)) << "step " << step;
    EXPECT_LE(max_diff(to_host(dS.get(), S.size()), S), 1e-5f * max_abs(S)) << "step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(Heads, GdnStep, ::testing::Values(std::pair{2, 4}, std::pair{16, 32}));

// The KV cache's chunk layout (kernels.h) of row-major bf16 [rows][256], rows
// a multiple of 16.
std::vector<uint16_t> to_chunks(const std::vector<uint16_t>& rows, bool v) {
  constexpr int hd = 256, piece = 8;
  std::vector<uint16_t> out(rows.size());
  for (size_t r = 0; r < rows.size() / hd; ++r)
    for (int q = 0; q < hd / piece; ++q)
      std::copy_n(&rows[r * hd + size_t(q) * piece], piece, &out[kv_chunked_at(r, q, v)]);
  return out;
}

TEST(KvChunks, EveryPieceOfAChunkHasOnePlace) {
  for (const bool v : {false, true}) {
    std::vector<int> seen(cuda::kKvChunk * 32, 0);
    for (int o = 0; o < cuda::kKvChunk; ++o)
      for (int q = 0; q < 32; ++q) {
        const int p = v ? cuda::v_piece(o, q) : cuda::k_piece(o, q);
        ASSERT_GE(p, 0);
        ASSERT_LT(p, int(seen.size()));
        ++seen[size_t(p)];
      }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), int(seen.size())) << (v ? "V" : "K");
  }
}

struct AttnCase {
  int heads, kv, pos;
};
class AttnDecode : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttnDecode, FusedPrepAndSplitAttentionMatchCpu) {
  TERN_REQUIRE_GPU();
  const auto [H, KV, pos] = GetParam();
  constexpr int hd = 256, rot = 64;
  const float theta = 1e7f;
  const int cap = (pos + 5 + cuda::kKvChunk - 1) / cuda::kKvChunk * cuda::kKvChunk, n = pos + 1;
  std::mt19937 g(uint32_t(H + KV * 3 + pos));
  const auto qkv = randn(size_t(2 * H * hd + 2 * KV * hd), g);
  std::vector<float> qn(hd), kn(hd);
  for (int i = 0; i < hd; ++i)
    qn[size_t(i)] = 1 + 0.1f * randn(1, g)[0], kn[size_t(i)] = 1 + 0.1f * randn(1, g)[0];
  std::vector<uint16_t> kc(size_t(KV) * cap * hd), vc(kc.size());
  {
    const auto kr = randn(kc.size(), g), vr = randn(kc.size(), g);
    for (size_t i = 0; i < kc.size(); ++i) kc[i] = f32_to_bf16(kr[i]), vc[i] = f32_to_bf16(vr[i]);
  }
  auto dqkv = to_dev(qkv), dqn = to_dev(qn), dkn = to_dev(kn);
  auto dinv = to_dev(rope_inv_freqs(theta, rot));
  auto dk = to_dev(to_chunks(kc, false)), dv = to_dev(to_chunks(vc, true));
  auto dout = to_dev(std::vector<float>(size_t(H * hd)));
  const int splits = cuda::attn_splits(n, KV);
  auto dpart = to_dev(std::vector<float>(size_t(H) * splits * (hd + 2)));
  auto dpos = to_dev(std::vector<int>{pos});
  const cuda::AttnDecodeArgs d{.qkv = dqkv.get(),
                               .q_norm = dqn.get(),
                               .k_norm = dkn.get(),
                               .eps = 1e-6f,
                               .k_cache = dk.get(),
                               .v_cache = dv.get(),
                               .pos = dpos.get(),
                               .part = dpart.get(),
                               .out = dout.get(),
                               .heads = H,
                               .kv_heads = KV,
                               .rotary = rot,
                               .capacity = cap,
                               .splits = splits,
                               .inv_freq = dinv.get()};
  ASSERT_EQ(cuda::attn_decode(d, nullptr), cudaSuccess);

  // CPU twin: new k, v rounded to bf16 as the cache stores them.
  for (int h = 0; h < KV; ++h) {
    std::vector<float> k(&qkv[size_t(2 * H * hd + h * hd)], &qkv[size_t(2 * H * hd + h * hd + hd)]);
    model::rms_norm(k.data(), kn.data(), hd, 1e-6f, k.data());
    model::apply_rope(k.data(), rot, theta, pos);
    for (int i = 0; i < hd; ++i) {
      kc[(size_t(h) * cap + pos) * hd + i] = f32_to_bf16(k[size_t(i)]);
      vc[(size_t(h) * cap + pos) * hd + i] =
          f32_to_bf16(qkv[size_t(2 * H * hd + KV * hd + h * hd + i)]);
    }
  }
  std::vector<float> ref(size_t(H * hd));
  for (int h = 0; h < H; ++h) {
    const int kvh = h / (H / KV);
    std::vector<float> q(&qkv[size_t(2 * h * hd)], &qkv[size_t(2 * h * hd + hd)]);
    model::rms_norm(q.data(), qn.data(), hd, 1e-6f, q.data());
    model::apply_rope(q.data(), rot, theta, pos);
    std::vector<double> s(static_cast<size_t>(n));
    double mx = -1e30, sum = 0;
    for (int j = 0; j < n; ++j) {
      double dot = 0;
      for (int i = 0; i < hd; ++i)
        dot += q[size_t(i)] * bf16_to_f32(kc[(size_t(kvh) * cap + j) * hd + i]);
      s[size_t(j)] = dot / 16.0;
      mx = std::max(mx, s[size_t(j)]);
    }
    for (double& x : s) sum += (x = std::exp(x - mx));
    for (int i = 0; i < hd; ++i) {
      double o = 0;
      for (int j = 0; j < n; ++j)
        o += s[size_t(j)] * bf16_to_f32(vc[(size_t(kvh) * cap + j) * hd + i]);
      ref[size_t(h * hd + i)] = float(o / sum) * model::sigmoid(qkv[size_t(2 * h * hd + hd + i)]);
    }
  }
  EXPECT_LE(max_diff(to_host(dout.get(), ref.size()), ref), 1e-4f * max_abs(ref));
  EXPECT_EQ(to_host(dk.get(), kc.size()), to_chunks(kc, false));
  EXPECT_EQ(to_host(dv.get(), vc.size()), to_chunks(vc, true));
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttnDecode,
                         ::testing::Values(AttnCase{4, 2, 0}, AttnCase{4, 2, 77},
                                           AttnCase{8, 8, 40}, AttnCase{16, 2, 15},
                                           AttnCase{16, 2, 16}, AttnCase{16, 2, 300},
                                           AttnCase{16, 2, 5000}, AttnCase{16, 2, 70000},
                                           AttnCase{16, 2, 131071}, AttnCase{16, 2, 262143}));

}  // namespace
}  // namespace tern::test
