// How long a warp stalls issuing bulk copies (cp.async.bulk, the TMA engine)
// into shared memory, by copies and bytes: 132 blocks of 512 threads (one an
// SM, as the tile GEMVs), lanes 0..n-1 of warp 0 each issue one copy of S bytes
// of DRAM-cold weights, all completing on one mbarrier. Stamps (globaltimer) at
// the start, after the issuing instruction, and when the bytes have landed;
// medians over blocks and 20 launches.
//
//   (-DTERN_PROBES=ON) cmake --build build --target tma_issue && build/tma_issue (or nvcc -O3
//   -std=c++17 -arch=sm_90a -I src bench/probes/tma_issue.cu -o tma_issue)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "backends/cuda/common.cuh"

namespace {

constexpr int kBlocks = 132, kThreads = 512, kLaunches = 20;
constexpr size_t kSmem = 200 * 1024;

__device__ __forceinline__ unsigned long long now() {
  return tern::cuda::global_ns();
}

__global__ void issue(const uint8_t* src, size_t stride, int n, uint32_t bytes,
                      unsigned long long* out) {
  using namespace tern::cuda;
  extern __shared__ __align__(128) uint8_t sm[];
  __shared__ __align__(8) uint64_t bar;
  if (threadIdx.x == 0) mbar_init(&bar), mbar_init_fence();
  __syncthreads();
  const uint8_t* base = src + blockIdx.x * stride;
  unsigned long long t0 = 0, t1 = 0, t2 = 0;
  if (threadIdx.x < 32) {
    t0 = now();
    if (threadIdx.x == 0) mbar_arrive_expect(&bar, n * bytes);
    __syncwarp();
    // The kernels' own bulk copy (evict-first), a lane a copy.
    if (int(threadIdx.x) < n)
      bulk_copy(sm + threadIdx.x * bytes, base + threadIdx.x * size_t(bytes), bytes, &bar);
    t1 = now();
    mbar_wait(&bar, 0);
    t2 = now();
  }
  if (threadIdx.x == 0) {
    out[blockIdx.x * 2] = t1 - t0;
    out[blockIdx.x * 2 + 1] = t2 - t0;
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  const size_t stride = 256 * 1024, per_launch = stride * kBlocks;
  uint8_t* src;
  unsigned long long* out;
  cudaMalloc(&src, per_launch * kLaunches);
  cudaMemset(src, 1, per_launch * kLaunches);
  cudaMalloc(&out, sizeof(unsigned long long) * 2 * kBlocks);
  cudaFuncSetAttribute(issue, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem));
  std::printf("copies x bytes     issue (us)  landed (us)\n");
  const struct {
    int n;
    uint32_t bytes;
  } cases[] = {{1, 18432}, {2, 18432},  {3, 18432}, {4, 18432}, {6, 18432},     {1, 36864},
               {1, 73728}, {1, 110592}, {3, 4608},  {9, 4608},  {9, 18432 / 4}, {2, 55296}};
  for (const auto& c : cases) {
    std::vector<double> is, ld;
    for (int l = 0; l < kLaunches; ++l) {
      issue<<<kBlocks, kThreads, kSmem>>>(src + l * per_launch, stride, c.n, c.bytes, out);
      std::vector<unsigned long long> h(2 * kBlocks);
      cudaMemcpy(h.data(), out, h.size() * sizeof(h[0]), cudaMemcpyDeviceToHost);
      for (int b = 0; b < kBlocks; ++b)
        is.push_back(h[2 * b] / 1e3), ld.push_back(h[2 * b + 1] / 1e3);
    }
    std::printf("%d x %6u      %8.3f  %8.3f\n", c.n, c.bytes, median(is), median(ld));
  }
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) std::printf("error: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
