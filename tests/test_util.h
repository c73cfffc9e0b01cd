// Helpers shared by the tests: scratch folders, tiny checkpoints, comparisons.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/dummy.h"
#include "checkpoint/quant.h"
#include "core/bf16.h"
#include "core/rng.h"

namespace tern::test {

// A fresh empty folder under the test temp dir.
inline std::string scratch_dir(const std::string& name) {
  auto p = std::filesystem::path(testing::TempDir()) / ("tern_" + name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

// A dummy checkpoint shared by the test processes under one name: written into
// a folder of this process' own and renamed into place whole, so that a test
// running beside the writer (ctest -j) never reads a half-written one, and
// the suite leaves one folder per name however many processes ask for it.
inline std::string shared_dummy(const std::string& name, DummyOptions o) {
  auto p = std::filesystem::path(testing::TempDir()) / ("tern_ckpt_" + name);
  if (!std::filesystem::exists(p / "config.json")) {
    std::string tmp = p.string();
    tmp.append(".").append(std::to_string(::getpid()));
    std::filesystem::remove_all(tmp);
    o.out_dir = tmp;
    make_dummy(o);
    std::error_code ec;
    std::filesystem::rename(tmp, p, ec);  // another process may have won: keep its folder
    if (ec) std::filesystem::remove_all(tmp);
  }
  return p.string();
}

// A tiny random checkpoint.
inline std::string tiny_checkpoint(Layout layout, uint64_t seed = 1) {
  DummyOptions o;
  o.preset = "tiny";
  o.layout = layout;
  o.seed = seed;
  return shared_dummy(
      std::string(layout == Layout::hf ? "tiny_hf_" : "tiny_mlx4_") + std::to_string(seed), o);
}

// n token ids below vocab, deterministic for a seed.
inline std::vector<int32_t> random_tokens(size_t n, int vocab, uint64_t seed) {
  CounterRng rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng.next_u64() % uint64_t(vocab));
  return t;
}

inline std::vector<float> random_vector(size_t n, uint64_t seed, float scale = 1.0f) {
  CounterRng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.normal() * scale;
  return v;
}

// A random bf16 matrix [rows, cols] and its dense QTensor view (of `storage`).
inline QTensor random_bf16_matrix(int64_t rows, int64_t cols, uint64_t seed, float scale,
                                  std::vector<uint16_t>& storage) {
  std::vector<float> w = random_vector(size_t(rows * cols), seed, scale);
  storage.resize(w.size());
  for (size_t i = 0; i < w.size(); ++i) storage[i] = f32_to_bf16(w[i]);
  QTensor d;
  d.rows = rows;
  d.cols = cols;
  d.data = reinterpret_cast<const uint8_t*>(storage.data());
  return d;
}

inline float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::abs(x));
  return m;
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

}  // namespace tern::test
