// The Gated DeltaNet decode step (gdn.cu) against its CPU twin
// (model::delta_rule_recurrent + q/k norms + gates), on fresh random inputs.
// (The gated RMSNorm after the step is the out_proj GEMV's, tested with the
// GEMVs.)
#include <cmath>

#include "backends/cuda/gdn.h"
#include "gpu_test_util.h"
#include "model/gdn.h"
#include "model/ops.h"

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

}  // namespace
}  // namespace tern::test
