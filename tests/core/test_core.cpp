// bf16 rounding, the thread pool and .npy round trips.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/npy.h"
#include "core/rng.h"
#include "core/thread_pool.h"

namespace tern {

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is half-way between two bf16 values: ties go to the even mantissa.
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
  CounterRng rng(7);
  for (int i = 0; i < 10000; ++i) {
    float x = rng.normal() * 100.0f;
    float r = round_bf16(x);
    EXPECT_LE(std::fabs(r - x), std::fabs(x) * (1.0f / 256) + 1e-30f);
  }
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(Bf16, HalfToFloat) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
}

// xxHash's published XXH64 values; streamed in pieces equals at once.
TEST(Hash64, MatchesXxh64) {
  EXPECT_EQ(hash64("", 0), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(hash64("a", 1), 0xD24EC4F1A98C6E5BULL);
  EXPECT_EQ(hash64("abc", 3), 0x44BC2CF5AD770999ULL);
  const std::string s = "Nobody inspects the spammish repetition";
  EXPECT_EQ(hash64(s.data(), s.size()), 0xFBCEA83C8A378BF1ULL);
  std::vector<unsigned char> b(1000);
  CounterRng rng(3);
  for (auto& c : b) c = static_cast<unsigned char>(rng.normal() * 64);
  for (size_t n : {0, 7, 31, 32, 33, 64, 100, 1000}) {
    Hash64 h(99);
    for (size_t at = 0; at < n; at += 13) h.update(b.data() + at, std::min<size_t>(13, n - at));
    EXPECT_EQ(h.digest(), hash64(b.data(), n, 99)) << n;
  }
  EXPECT_EQ(hex64(0xabc), "0000000000000abc");
}

TEST(ThreadPool, CoversRangeOnce) {
  ThreadPool pool(3);
  for (size_t n : {1u, 7u, 1000u, 12345u}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, 5, [&](size_t b, size_t e, int) {
      for (size_t i = b; i < e; ++i) hits[i]++;
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << "n=" << n << " i=" << i;
  }
}

TEST(Npy, RoundTrip) {
  std::vector<float> v(6 * 7);
  CounterRng rng(3);
  for (float& x : v) x = rng.normal();
  std::string path = testing::TempDir() + "/rt.npy";
  write_npy_f32(path, {6, 7}, v.data());
  NpyArray a = read_npy_f32(path);
  ASSERT_EQ(a.shape, (std::vector<size_t>{6, 7}));
  EXPECT_EQ(a.data, v);
  EXPECT_THROW(read_npy_f32(path + ".missing"), Error);
}

}  // namespace tern
