// misc.cu's constrained-decoding mask against its CPU twin (apply_mask). (Its
// other kernels, the embedding, the arg-max and the tile layout's writer, run
// in every backend test, against the CPU's logits and tokens.)
#include <random>

#include "backend/constraint.h"
#include "backends/cuda/misc.h"
#include "gpu_test_util.h"

namespace tern::test {
namespace {

// The constrained-decoding mask on the device against apply_mask: random
// logits and random masks (about a third of the bits set) at the real vocab.
TEST(CudaSampler, MaskLogitsMatchesCpuTwin) {
  TERN_REQUIRE_GPU();
  std::mt19937 g(5);
  for (int n : {1, 33, 248320}) {
    std::vector<float> logits(static_cast<size_t>(n));
    std::normal_distribution<float> z(0.f, 3.f);
    for (float& x : logits) x = z(g);
    std::vector<uint32_t> words(mask_words(n));
    for (uint32_t& w : words) w = uint32_t(g()) & uint32_t(g());
    auto d_logits = to_dev(logits);
    auto d_words = to_dev(words);
    ASSERT_EQ(cuda::mask_logits(d_logits.get(), d_words.get(), n, nullptr), cudaSuccess);
    apply_mask(logits, words);
    EXPECT_EQ(to_host(d_logits.get(), size_t(n)), logits) << "vocab " << n;
  }
}

}  // namespace
}  // namespace tern::test
