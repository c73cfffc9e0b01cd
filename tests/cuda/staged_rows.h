// Activations staged on the device as the prefill GEMMs take them
// (prefill_act.h), for the GEMM and MoE tests.
#pragma once

#include <cmath>
#include <vector>

#include "backends/cuda/prefill_act.h"
#include "gpu_test_util.h"

namespace tern::test {

// Stages x ([T][K]) as it is on the device; returns the staged buffer and scales.
struct Staged {
  DevPtr<uint16_t> x;
  DevPtr<float> scale;
};
inline Staged stage_plain(const std::vector<float>& x, int T, int K) {
  auto dx = to_dev(x);
  Staged s{to_dev(std::vector<uint16_t>(size_t(T) * K, 0xFFFF)),
           to_dev(std::vector<float>(size_t(T), NAN))};
  EXPECT_EQ(
      cuda::stage_rows({.x = dx.get(), .T = T, .K = K, .out = s.x.get(), .xscale = s.scale.get()},
                       nullptr),
      cudaSuccess);
  return s;
}

}  // namespace tern::test
