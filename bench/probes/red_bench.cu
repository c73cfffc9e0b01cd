// Split-K's reduction by atomics, alone: B blocks of 512 threads each add a
// 2048-float partial vector (an MoE layer's h, as blocks that each own some of
// the experts' features would) into one vector in global memory by red.add
// (fp32, or 64-bit fixed point for a deterministic sum), against the same
// blocks storing their partials to distinct rows (no reduction). Time of a
// launch from the first block's start to the last block's end (globaltimer:
// the issue of the reductions; when they land is bench/probes/handoff.cu's "2K red"
// cases), median over 200 launches, nothing else on the GPU.
//
//   (-DTERN_PROBES=ON) cmake --build build --target red_bench && build/red_bench
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "backends/cuda/common.cuh"

namespace {

constexpr int kD = 2048, kThreads = 512, kLaunches = 200;

__device__ __forceinline__ unsigned long long now() {
  return tern::cuda::global_ns();
}

// mode 0: stores to the block's own row; 1: red.add.f32; 2: red.add.u64 of
// the value in 2^-32 units.
__global__ void reduce(float* h, unsigned long long* fixed, float* rows, int mode,
                       unsigned long long* stamps) {
  const unsigned long long t0 = now();
  for (int d = int(threadIdx.x); d < kD; d += kThreads) {
    const float v = 0.001f * float(d % 7) + 1e-3f * float(blockIdx.x);
    if (mode == 0)
      rows[size_t(blockIdx.x) * kD + d] = v;
    else if (mode == 1)
      atomicAdd(h + d, v);
    else
      atomicAdd(fixed + d, static_cast<unsigned long long>(__float2ll_rn(v * 0x1p32f)));
  }
  __syncthreads();
  if (threadIdx.x == 0) stamps[2 * blockIdx.x] = t0, stamps[2 * blockIdx.x + 1] = now();
}

}  // namespace

int main() {
  float *h, *rows;
  unsigned long long *fixed, *stamps;
  cudaMalloc(&h, sizeof(float) * kD);
  cudaMalloc(&fixed, sizeof(unsigned long long) * kD);
  cudaMalloc(&rows, sizeof(float) * kD * 264);
  cudaMalloc(&stamps, sizeof(unsigned long long) * 2 * 264);
  const char* names[] = {"stores, own rows", "red.add.f32", "red.add.u64 (fixed point)"};
  std::printf("blocks  partials                    first start to last end (us, median)\n");
  for (const int blocks : {66, 132, 264})
    for (int mode = 0; mode < 3; ++mode) {
      std::vector<double> t;
      for (int l = 0; l < kLaunches; ++l) {
        reduce<<<blocks, kThreads>>>(h, fixed, rows, mode, stamps);
        std::vector<unsigned long long> s(2 * size_t(blocks));
        cudaMemcpy(s.data(), stamps, s.size() * sizeof(s[0]), cudaMemcpyDeviceToHost);
        unsigned long long a = ~0ull, b = 0;
        for (int i = 0; i < blocks; ++i)
          a = std::min(a, s[2 * size_t(i)]), b = std::max(b, s[2 * size_t(i) + 1]);
        t.push_back(double(b - a) / 1e3);
      }
      std::sort(t.begin(), t.end());
      std::printf("%6d  %-26s  %8.3f\n", blocks, names[mode], t[t.size() / 2]);
    }
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) std::printf("error: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
