// The attention decode kernels (attention.cu) against their CPU twins
// (model::apply_rope, RMSNorm and softmax attention over a bf16 cache), on
// fresh random inputs; the KV cache's chunked layout (layout.h); the prep's
// rotation at long context; the attention of several rows against each row
// alone.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "backends/cuda/attention.h"
#include "checkpoint/config.h"
#include "core/bf16.h"
#include "gpu_test_util.h"
#include "model/attention.h"
#include "model/ops.h"
#include "model/rope.h"

namespace tern::test {
namespace {

// The KV cache's chunk layout (layout.h) of row-major bf16 [rows][256], rows
// a multiple of 16.
std::vector<uint16_t> to_chunks(const std::vector<uint16_t>& rows, bool v) {
  constexpr int hd = 256, piece = 8;
  std::vector<uint16_t> out(rows.size());
  for (size_t r = 0; r < rows.size() / hd; ++r)
    for (int q = 0; q < hd / piece; ++q)
      std::copy_n(&rows[r * hd + size_t(q) * piece], piece, &out[kv_chunked_at(r, q, v)]);
  return out;
}

// One decode attention's device buffers (its qkv, bf16 caches of `cap`
// positions, position, partials and output) and its arguments over them.
struct AttnRow {
  DevPtr<float> qkv, part, out;
  DevPtr<uint16_t> k, v;
  DevPtr<int> pos;
  cuda::AttnDecodeArgs args;
  AttnRow(const std::vector<float>& qkv_h, const std::vector<uint16_t>& kc,
          const std::vector<uint16_t>& vc, int position, int H, int KV, int rot, int cap,
          const float* q_norm, const float* k_norm, const float* inv_freq)
      : qkv(to_dev(qkv_h)),
        out(to_dev(std::vector<float>(size_t(H) * 256))),
        k(to_dev(to_chunks(kc, false))),
        v(to_dev(to_chunks(vc, true))),
        pos(to_dev(std::vector<int>{position})) {
    const int splits = cuda::attn_splits(position + 1, KV);
    part = to_dev(std::vector<float>(size_t(H) * splits * (256 + 2)));
    args = {.qkv = qkv.get(),
            .q_norm = q_norm,
            .k_norm = k_norm,
            .eps = 1e-6f,
            .k_cache = k.get(),
            .v_cache = v.get(),
            .pos = pos.get(),
            .part = part.get(),
            .out = out.get(),
            .heads = H,
            .kv_heads = KV,
            .rotary = rot,
            .capacity = cap,
            .splits = splits,
            .inv_freq = inv_freq};
  }
};

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
  auto dqn = to_dev(qn), dkn = to_dev(kn);
  auto dinv = to_dev(rope_inv_freqs(theta, rot));
  AttnRow row(qkv, kc, vc, pos, H, KV, rot, cap, dqn.get(), dkn.get(), dinv.get());
  const cuda::AttnDecodeArgs& d = row.args;
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
  EXPECT_LE(max_diff(to_host(row.out.get(), ref.size()), ref), 1e-4f * max_abs(ref));
  EXPECT_EQ(to_host(row.k.get(), kc.size()), to_chunks(kc, false));
  EXPECT_EQ(to_host(row.v.get(), vc.size()), to_chunks(vc, true));
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttnDecode,
                         ::testing::Values(AttnCase{4, 2, 0}, AttnCase{4, 2, 77},
                                           AttnCase{8, 8, 40}, AttnCase{16, 2, 15},
                                           AttnCase{16, 2, 16}, AttnCase{16, 2, 300},
                                           AttnCase{16, 2, 5000}, AttnCase{16, 2, 70000},
                                           AttnCase{16, 2, 131071}, AttnCase{16, 2, 262143}));

// attn_decode_rows (a decode step over several sequences, rows.h): rows at
// different positions, so with different split tiers, each with its own
// cache, against attn_decode on each row alone, bit for bit: the output and
// the appended key and value.
TEST(AttnDecodeRows, EachRowIsItsLaunchAlone) {
  TERN_REQUIRE_GPU();
  constexpr int H = 16, KV = 2, hd = 256, rot = 64;
  const std::vector<int> positions = {15, 5000, 300, 70};
  std::mt19937 g(17);
  auto dinv = to_dev(rope_inv_freqs(1e7f, rot));
  auto dqn = to_dev(randn(hd, g, 0.1f)), dkn = to_dev(randn(hd, g, 0.1f));
  // Row r's buffers from the same random values for both runs.
  auto make = [&](int pos, uint32_t seed) {
    std::mt19937 rg(seed);
    const int cap = (pos + 5 + cuda::kKvChunk - 1) / cuda::kKvChunk * cuda::kKvChunk;
    std::vector<uint16_t> kc(size_t(KV) * cap * hd), vc(kc.size());
    const auto kr = randn(kc.size(), rg), vr = randn(kc.size(), rg);
    for (size_t i = 0; i < kc.size(); ++i) kc[i] = f32_to_bf16(kr[i]), vc[i] = f32_to_bf16(vr[i]);
    return std::make_unique<AttnRow>(randn(size_t(2 * H * hd + 2 * KV * hd), rg), kc, vc, pos, H,
                                     KV, rot, cap, dqn.get(), dkn.get(), dinv.get());
  };
  std::vector<std::unique_ptr<AttnRow>> alone, together;
  std::vector<cuda::AttnDecodeArgs> rows;
  for (size_t r = 0; r < positions.size(); ++r) {
    alone.push_back(make(positions[r], uint32_t(100 + r)));
    ASSERT_EQ(cuda::attn_decode(alone.back()->args, nullptr), cudaSuccess);
    together.push_back(make(positions[r], uint32_t(100 + r)));
    rows.push_back(together.back()->args);
  }
  EXPECT_NE(rows[0].splits, rows[1].splits);
  ASSERT_EQ(cuda::attn_decode_rows(rows.data(), int(rows.size()), nullptr), cudaSuccess);
  for (size_t r = 0; r < positions.size(); ++r) {
    const AttnRow &a = *alone[r], &b = *together[r];
    const size_t kv = size_t(KV) * a.args.capacity * hd;
    const auto oa = to_host(a.out.get(), size_t(H * hd)), ob = to_host(b.out.get(), size_t(H * hd));
    EXPECT_EQ(std::memcmp(oa.data(), ob.data(), oa.size() * sizeof(float)), 0) << "row " << r;
    EXPECT_GT(max_abs(oa), 0.0f) << "row " << r;
    EXPECT_EQ(to_host(a.k.get(), kv), to_host(b.k.get(), kv)) << "K of row " << r;
    EXPECT_EQ(to_host(a.v.get(), kv), to_host(b.v.get(), kv)) << "V of row " << r;
  }
}

// The prep's rotation at long context: cos and sin of the CPU's fp32 angle
// pos * inv_freq[i] (model/rope.h's table), against the same angle's cos and
// sin in double precision. sincosf is within 2 ulp over any argument; a
// different inv_freq (one ulp at 262,143) would turn the angle by up to ~0.03.
TEST(CudaRope, RotationAtLongContextMatchesDoublePrecision) {
  TERN_REQUIRE_GPU();
  const ModelConfig c = parse_config(preset_config("35b-a3b"), "35b");
  const std::vector<float> f = rope_inv_freqs(c.rope_theta, c.rotary_dim);
  auto dinv = to_dev(f);
  auto dcs = to_dev(std::vector<float>(f.size())), dsn = to_dev(std::vector<float>(f.size()));
  for (int pos : {0, 1, 70000, 131071, 262143}) {
    ASSERT_EQ(cuda::rotation_table(dinv.get(), c.rotary_dim, pos, dcs.get(), dsn.get(), nullptr),
              cudaSuccess);
    const auto cs = to_host(dcs.get(), f.size()), sn = to_host(dsn.get(), f.size());
    for (size_t i = 0; i < f.size(); ++i) {
      const double angle = double(float(pos) * f[i]);  // the fp32 angle, exactly
      EXPECT_NEAR(cs[i], std::cos(angle), 3e-7) << "pos " << pos << " i " << i;
      EXPECT_NEAR(sn[i], std::sin(angle), 3e-7) << "pos " << pos << " i " << i;
    }
  }
}

}  // namespace
}  // namespace tern::test
