// The disk cache's transfers through two pinned buffers: stretches of odd
// sizes, longer and shorter than a buffer, arrive whole and in order.
#include <gtest/gtest.h>

#include <random>

#include "backends/cuda/check.h"
#include "backends/cuda/staging.h"
#include "gpu_test_util.h"

namespace tern::test {
namespace {

TEST(Staging, StretchesRoundTripThroughSmallBuffersInOrder) {
  TERN_REQUIRE_GPU();
  std::mt19937 rng(std::random_device{}());
  const size_t sizes[] = {1, 999, 1000, 1001, 4567, 3};  // around the 1000-byte slice
  size_t total = 0;
  for (size_t n : sizes) total += n;
  std::vector<std::byte> file(total), back;
  for (std::byte& b : file) b = std::byte(rng());
  std::byte* dev = nullptr;
  cuda::check(cudaMalloc(reinterpret_cast<void**>(&dev), 2 * total), "test buffer");
  cudaStream_t stream = nullptr;
  cuda::check(cudaStreamCreate(&stream), "stream");
  // Every other stretch of the device buffer, so that the order on the device
  // is not the file's order read straight.
  std::vector<cuda::DeviceBytes> spans;
  size_t at = 0;
  for (size_t n : sizes) spans.push_back({dev + 2 * at + n % 7, n}), at += n;
  cuda::Staging staging(1000);
  size_t read = 0;
  staging.upload(
      spans,
      [&](std::span<std::byte> b) {
        ASSERT_LE(b.size(), 1000u);
        std::copy_n(file.begin() + long(read), b.size(), b.begin());
        read += b.size();
      },
      stream);
  EXPECT_EQ(read, total);
  staging.download(
      spans,
      [&](std::span<const std::byte> b) {
        ASSERT_LE(b.size(), 1000u);
        back.insert(back.end(), b.begin(), b.end());
      },
      stream);
  EXPECT_EQ(back, file);
  // Each stretch is where it was put: read back directly.
  at = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    std::vector<std::byte> one(spans[i].bytes);
    cuda::check(cudaMemcpy(one.data(), spans[i].dev, one.size(), cudaMemcpyDeviceToHost), "read");
    EXPECT_TRUE(std::equal(one.begin(), one.end(), file.begin() + long(at))) << "stretch " << i;
    at += spans[i].bytes;
  }
  cudaStreamDestroy(stream);
  cudaFree(dev);
}

}  // namespace
}  // namespace tern::test
