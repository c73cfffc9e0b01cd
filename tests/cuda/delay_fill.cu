// A test kernel: waits about `ns` on the GPU, then fills p[0, n) with v. Work
// on a stream that later calls must be ordered after (test_cuda_session.cpp).
#include <cuda_runtime.h>

#include <cstddef>

namespace tern::test {

__global__ void delay_fill_kernel(float* p, size_t n, float v, long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  while (t - t0 < (unsigned long long)ns);
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) p[i] = v;
}

cudaError_t delay_fill(float* p, size_t n, float v, long long ns, cudaStream_t st) {
  delay_fill_kernel<<<1, 256, 0, st>>>(p, n, v, ns);
  return cudaGetLastError();
}

}  // namespace tern::test
