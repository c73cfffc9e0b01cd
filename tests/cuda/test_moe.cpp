// The MoE decode kernels (moe.cu) against their CPU twins (model::route_token,
// the SwiGLU experts), on fresh random inputs: routing and gate/up, fed by
// the GEMV that finishes h or not, down, and the expert choice alone.
// Tolerance: kSumOrderRel (gpu_test_util.h) of the output's max |value|.
#include <cmath>

#include "backends/cuda/gemv.h"
#include "backends/cuda/moe.h"
#include "gpu_test_util.h"
#include "model/moe.h"
#include "model/ops.h"

namespace tern::test {
namespace {

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
  EXPECT_LE(max_diff(to_host(dh.get(), size_t(D)), h), kSumOrderRel * max_abs(h));
  const auto ids = to_host(dids.get(), size_t(k));
  EXPECT_EQ(ids, route.experts);
  EXPECT_LE(max_diff(to_host(dwts.get(), size_t(k + 1)), wts), 1e-5f);
  EXPECT_LE(max_diff(to_host(dact.get(), act.size()), act), kSumOrderRel * 4 * max_abs(act));
  // An L2 prefetch of a later GEMV's tiles changes nothing; its addresses
  // must stay in bounds.
  ASSERT_EQ(cuda::experts_down({DN.dev, dact.get(), dids.get(), dwts.get(), dh.get(), E, k,
                                cuda::gemv_ahead(O.dev)},
                               nullptr),
            cudaSuccess);
  EXPECT_LE(max_diff(to_host(dh.get(), size_t(D)), out), kSumOrderRel * 4 * max_abs(out));
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
