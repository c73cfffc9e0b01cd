// GEMV and MoE kernels against their CPU twins (cpu::matmul, cpu::route_token,
// the SwiGLU experts), on fresh random inputs. Tolerance: 2e-5 of the output's
// max |value| (fp32 accumulation in another order; the GPU sums s*sum(q*x) +
// b*sum(x) per group where the CPU dots dequantised rows).
#include <cmath>

#include "backends/cpu/moe.h"
#include "backends/cpu/ops.h"
#include "gpu_test_util.h"

namespace tern::test {
namespace {

constexpr float kRel = 2e-5f;

struct GemvCase {
  int rows, cols, bits;
};

class Gemv : public ::testing::TestWithParam<GemvCase> {};

TEST_P(Gemv, StoreNormAndAddMatchCpu) {
  TERN_REQUIRE_GPU();
  const auto [rows, cols, bits] = GetParam();
  std::mt19937 g(uint32_t(rows * 7 + cols + bits));
  TestMat W(rows, cols, bits, g, 0.05f);
  const auto x = randn(size_t(cols), g), nw = randn(size_t(cols), g, 0.1f),
             y0 = randn(size_t(rows), g);
  std::vector<float> normw(nw.size());
  for (size_t i = 0; i < nw.size(); ++i) normw[i] = 1.0f + nw[i];
  auto dx = to_dev(x), dn = to_dev(normw), dy = to_dev(y0);

  std::vector<float> ref(static_cast<size_t>(rows)), xn(static_cast<size_t>(cols));
  cpu::matmul(W.host, x.data(), 1, ref.data());
  ASSERT_EQ(cuda::gemv({W.dev, dx.get(), nullptr, 0, dy.get(), cuda::GemvOut::store, {}}, nullptr),
            cudaSuccess);
  auto got = to_host(dy.get(), size_t(rows));
  EXPECT_LE(max_diff(got, ref), kRel * max_abs(ref)) << "store";

  cpu::rms_norm(x.data(), normw.data(), cols, 1e-6f, xn.data());
  cpu::matmul(W.host, xn.data(), 1, ref.data());
  for (size_t i = 0; i < ref.size(); ++i) ref[i] += got[i];
  ASSERT_EQ(
      cuda::gemv({W.dev, dx.get(), dn.get(), 1e-6f, dy.get(), cuda::GemvOut::add, {}}, nullptr),
      cudaSuccess);
  got = to_host(dy.get(), size_t(rows));
  EXPECT_LE(max_diff(got, ref), kRel * max_abs(ref)) << "norm + add";
}

INSTANTIATE_TEST_SUITE_P(Shapes, Gemv,
                         ::testing::Values(GemvCase{37, 64, 4}, GemvCase{300, 512, 4},
                                           GemvCase{1001, 2048, 4}, GemvCase{129, 4096, 4},
                                           GemvCase{100, 1152, 4}, GemvCase{12352, 2048, 4},
                                           GemvCase{2048, 4096, 4}, GemvCase{40000, 2048, 4},
                                           GemvCase{17, 128, 8}, GemvCase{257, 2048, 8}));

struct MoeCase {
  int hidden, experts, top_k, inter;
};

class Moe : public ::testing::TestWithParam<MoeCase> {};

TEST_P(Moe, RouterExpertsMatchCpu) {
  TERN_REQUIRE_GPU();
  const auto [D, E, k, I] = GetParam();
  std::mt19937 g(uint32_t(D + E + k));
  TestMat R(E + 1, D, 8, g, 1.0f / std::sqrt(float(D)));
  TestMat GU((E + 1) * 2 * I, D, 4, g, 1.0f / std::sqrt(float(D)));
  TestMat DN((E + 1) * D, I, 4, g, 1.0f / std::sqrt(float(I)));
  auto h = randn(size_t(D), g);
  std::vector<float> normw(static_cast<size_t>(D));
  for (float& w : normw) w = 1.0f + 0.1f * randn(1, g)[0];
  auto dh = to_dev(h), dn = to_dev(normw);
  auto da = to_dev(std::vector<float>(static_cast<size_t>(D))),
       dl = to_dev(std::vector<float>(size_t(E + 1) * std::max(1, D / cuda::kRouterPart)));
  auto dwts = to_dev(std::vector<float>(size_t(k + 1))),
       dact = to_dev(std::vector<float>(size_t((k + 1) * I)));
  auto dids = to_dev(std::vector<int>(static_cast<size_t>(k)));
  auto dcnt = to_dev(std::vector<unsigned>(2, 0u));

  // CPU twin.
  std::vector<float> a(static_cast<size_t>(D)), logits(size_t(E + 1));
  cpu::rms_norm(h.data(), normw.data(), D, 1e-6f, a.data());
  cpu::matmul(R.host, a.data(), 1, logits.data());
  const cpu::Route route = cpu::route_token(logits.data(), E, k, true);
  std::vector<float> wts = route.weights;
  wts.push_back(cpu::sigmoid(logits[size_t(E)]));
  std::vector<float> act(size_t((k + 1) * I)),
      out = h, y(static_cast<size_t>(D)), gg(static_cast<size_t>(I)), uu(static_cast<size_t>(I));
  for (int s = 0; s <= k; ++s) {
    const int e = s < k ? route.experts[size_t(s)] : E;
    cpu::matmul(GU.host.row_slice(int64_t(e) * 2 * I, I), a.data(), 1, gg.data());
    cpu::matmul(GU.host.row_slice(int64_t(e) * 2 * I + I, I), a.data(), 1, uu.data());
    for (int f = 0; f < I; ++f) act[size_t(s * I + f)] = cpu::silu(gg[size_t(f)]) * uu[size_t(f)];
    cpu::matmul(DN.host.row_slice(int64_t(e) * D, D), &act[size_t(s * I)], 1, y.data());
    for (int d = 0; d < D; ++d) out[size_t(d)] += wts[size_t(s)] * y[size_t(d)];
  }

  // Three calls: the later ones check the counters' reset (a generation
  // counter for the fused grid barrier).
  for (int rep = 0; rep < 3; ++rep) {
    cuda::RouterArgs ra{R.dev,    dh.get(),   dn.get(),   1e-6f,      da.get(),
                        dl.get(), dcnt.get(), dids.get(), dwts.get(), k};
    ASSERT_EQ(
        cuda::route_experts_up(ra, {GU.dev, da.get(), dids.get(), dact.get(), E, k, I}, nullptr),
        cudaSuccess);
  }
  const auto ids = to_host(dids.get(), size_t(k));
  EXPECT_EQ(ids, route.experts);
  EXPECT_LE(max_diff(to_host(dwts.get(), size_t(k + 1)), wts), 1e-5f);
  EXPECT_LE(max_diff(to_host(dact.get(), act.size()), act), kRel * 4 * max_abs(act));
  ASSERT_EQ(
      cuda::experts_down({DN.dev, dact.get(), dids.get(), dwts.get(), dh.get(), E, k}, nullptr),
      cudaSuccess);
  EXPECT_LE(max_diff(to_host(dh.get(), size_t(D)), out), kRel * 4 * max_abs(out));
}

INSTANTIATE_TEST_SUITE_P(Shapes, Moe,
                         ::testing::Values(MoeCase{64, 16, 4, 64}, MoeCase{128, 16, 4, 64},
                                           MoeCase{1024, 128, 8, 256}, MoeCase{2048, 256, 8, 512}));

}  // namespace
}  // namespace tern::test
