// bf16 rounding, the thread pool and .npy round trips.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
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
