// The CPU kernels against plain double-precision references on fresh random
// inputs: matmul over packed weights, the two delta-rule forms, RoPE, routing.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/bf16.h"
#include "model/attention.h"
#include "model/delta_reference.h"
#include "model/gdn.h"
#include "model/moe.h"
#include "model/ops.h"
#include "model/rope.h"
#include "test_util.h"

namespace tern::model {

// T = 1 takes the decode path (packed rows never expanded), T = 5 the block path.
class CpuMatmul : public testing::TestWithParam<int64_t> {};

TEST_P(CpuMatmul, MatchesDoubleReferenceForEachFormat) {
  const int64_t rows = 37, cols = 192, T = GetParam();
  std::vector<uint16_t> storage;
  QTensor d = test::random_bf16_matrix(rows, cols, 1, 0.1f, storage);
  QuantBuffer q4 = quantize_matrix(d, 4, 64), q8 = quantize_matrix(d, 8, 64);
  std::vector<float> x = test::random_vector(size_t(T * cols), 2);
  for (QTensor m : {d, q4.view(rows, cols, 4, 64), q8.view(rows, cols, 8, 64)}) {
    std::vector<float> y(size_t(T * rows)), row(static_cast<size_t>(cols));
    matmul(m, x.data(), T, y.data());
    for (int64_t r = 0; r < rows; ++r) {
      m.dequant_row(r, row.data());
      for (int64_t t = 0; t < T; ++t) {
        double ref = 0;
        for (int64_t i = 0; i < cols; ++i) ref += double(row[size_t(i)]) * x[size_t(t * cols + i)];
        EXPECT_NEAR(y[size_t(t * rows + r)], ref, 1e-4 * (1 + std::abs(ref)));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, CpuMatmul, testing::Values(1, 3, 5));

TEST(CpuDeltaRule, RecurrentAndChunkedMatchReference) {
  const int dk = 128, dv = 128;
  for (int64_t T : {1, 5, 64, 65, 150}) {
    DeltaInputs in = delta_inputs(T, dk, dv, uint64_t(T));
    std::vector<float> S0 = test::random_vector(size_t(dk * dv), 99, 0.1f);
    std::vector<double> Sref(S0.begin(), S0.end());
    std::vector<double> ref = delta_reference(in, T, dk, dv, Sref);
    for (bool chunked : {false, true}) {
      std::vector<float> S = S0, o(size_t(T * dv));
      if (chunked)
        delta_rule_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), T,
                           dk, dv, S.data(), o.data(), 16);
      else
        delta_rule_recurrent(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), T,
                             dk, dv, S.data(), o.data());
      double err = 0, scale = 0;
      for (size_t i = 0; i < o.size(); ++i) {
        err = std::max(err, std::abs(o[i] - ref[i]));
        scale = std::max(scale, std::abs(ref[i]));
      }
      for (size_t i = 0; i < S.size(); ++i) err = std::max(err, std::abs(S[i] - Sref[i]));
      EXPECT_LT(err, 1e-4 * (1 + scale)) << "T=" << T << (chunked ? " chunked" : " recurrent");
    }
  }
}

TEST(CpuRope, RotatesPairsHalfApartAndKeepsTheRest) {
  std::vector<float> x = test::random_vector(256, 5), y = x;
  const int64_t pos = 1234;
  apply_rope(y.data(), 64, 1e7f, pos);
  for (int i = 0; i < 32; ++i) {
    const double th = double(pos) * std::pow(1e7, -double(2 * i) / 64);
    EXPECT_NEAR(y[size_t(i)], x[size_t(i)] * std::cos(th) - x[size_t(i + 32)] * std::sin(th), 2e-3);
    EXPECT_NEAR(y[size_t(i + 32)], x[size_t(i + 32)] * std::cos(th) + x[size_t(i)] * std::sin(th),
                2e-3);
  }
  for (int i = 64; i < 256; ++i) EXPECT_EQ(y[size_t(i)], x[size_t(i)]);
}

// At long context the angle pos * inv_freq is the fp32 product of the fp32
// inverse frequency (model/rope.h, the reference's arithmetic); cos and sin of
// that angle against double precision, to within a few ulp of 1.
TEST(CpuRope, LongContextAnglesMatchDoublePrecision) {
  const float theta = 1e7f;
  const int rot = 64;
  const auto f = rope_inv_freqs(theta, rot);
  for (int64_t pos : {131071, 262143}) {
    for (int i = 0; i < rot / 2; ++i) {
      std::vector<float> x(size_t(rot), 0.0f);
      x[size_t(i)] = 1.0f;
      model::apply_rope(x.data(), rot, theta, pos);
      const double angle = double(float(pos) * f[size_t(i)]);
      EXPECT_NEAR(x[size_t(i)], std::cos(angle), 3e-7) << pos << " " << i;
      EXPECT_NEAR(x[size_t(i + rot / 2)], std::sin(angle), 3e-7) << pos << " " << i;
    }
  }
}

TEST(CpuMoe, RouteIsSoftmaxTopKRenormalised) {
  std::vector<float> logits = test::random_vector(256, 8, 2.0f);
  Route r = route_token(logits.data(), 256, 8, true);
  std::vector<int> order(256);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return logits[size_t(a)] > logits[size_t(b)]; });
  double total = 0;
  for (int i = 0; i < 8; ++i) total += std::exp(double(logits[size_t(order[size_t(i)])]));
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(r.experts[size_t(i)], order[size_t(i)]);
    EXPECT_NEAR(r.weights[size_t(i)], std::exp(double(logits[size_t(order[size_t(i)])])) / total,
                1e-6);
  }
  Route raw = route_token(logits.data(), 256, 8, false);
  EXPECT_LT(std::accumulate(raw.weights.begin(), raw.weights.end(), 0.0f), 1.0f);
}

}  // namespace tern::model
