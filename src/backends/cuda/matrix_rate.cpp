// The GPU's bf16 matrix rate as tern bench --prefill reports it: an 8192^3
// bf16 GEMM (fp32 sums) through cuBLAS, loaded at run time (dlopen) so that
// tern neither links nor carries it; 0 when no cuBLAS is found.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_bench.h"
#include "backends/cuda/misc.h"

namespace tern::cuda {

namespace {

// The few cuBLAS entry points and constants used (cublas_api.h, CUDA 12/13).
using Handle = void*;
using CreateFn = int (*)(Handle*);
using DestroyFn = int (*)(Handle);
using GemmExFn = int (*)(Handle, int, int, int, int, int, const void*, const void*, int, int,
                         const void*, int, int, const void*, void*, int, int, int, int);
constexpr int kOpN = 0, kBf16 = 14, kF32 = 0, kCompute32F = 68, kGemmDefault = -1;

void* open_cublas() {
  for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so",
                           "/usr/local/cuda/lib64/libcublas.so.13"})
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return h;
  return nullptr;
}

}  // namespace

double bf16_matrix_rate() {
  void* lib = open_cublas();
  if (lib == nullptr) return 0.0;
  auto create = reinterpret_cast<CreateFn>(dlsym(lib, "cublasCreate_v2"));
  auto destroy = reinterpret_cast<DestroyFn>(dlsym(lib, "cublasDestroy_v2"));
  auto gemm = reinterpret_cast<GemmExFn>(dlsym(lib, "cublasGemmEx"));
  Handle h = nullptr;
  if (create == nullptr || destroy == nullptr || gemm == nullptr || create(&h) != 0) return 0.0;
  constexpr int n = 8192, kWarm = 3, kReps = 10;
  constexpr size_t elems = size_t(n) * n;
  uint16_t *a = nullptr, *b = nullptr;
  float* c = nullptr;
  check(cudaMalloc(&a, elems * 2), "GEMM buffers");
  check(cudaMalloc(&b, elems * 2), "GEMM buffers");
  check(cudaMalloc(&c, elems * 4), "GEMM buffers");
  check(fill_bf16(a, elems, -1.0f, 1.0f, 1, nullptr), "fill");  // random data, not zeros
  check(fill_bf16(b, elems, -1.0f, 1.0f, 2, nullptr), "fill");
  const float one = 1.0f, zero = 0.0f;
  auto run = [&] {
    return gemm(h, kOpN, kOpN, n, n, n, &one, a, kBf16, n, b, kBf16, n, &zero, c, kF32, n,
                kCompute32F, kGemmDefault);
  };
  double rate = 0.0;
  bool ok = true;
  for (int i = 0; i < kWarm; ++i) ok = ok && run() == 0;
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  for (int round = 0; ok && round < 3; ++round) {  // the best of three rounds
    check(cudaEventRecord(e0, nullptr), "event");
    for (int i = 0; i < kReps; ++i) ok = ok && run() == 0;
    check(cudaEventRecord(e1, nullptr), "event");
    check(cudaEventSynchronize(e1), "event");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, e0, e1), "event");
    rate = std::max(rate, 2.0 * double(n) * n * n * kReps / (double(ms) / 1e3));
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  destroy(h);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return ok ? rate : 0.0;
}

}  // namespace tern::cuda
