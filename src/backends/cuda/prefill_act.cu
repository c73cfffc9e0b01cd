// Staging of the prefill GEMMs' inputs (prefill_act.h): one block a row
// of x ([T][K] fp32, K <= 4096), 8 columns a thread at a time. The row is
// prepared (RMSNorm, the GDN gated norm or the attention output gate, in the
// CPU's order of operations), its largest |value| sets a power-of-two factor
// that puts it in [2^14, 2^15), and it is written as fp16 in the staged order
// (staged_col), with the factor's inverse in xscale.
#include "backends/cuda/layout.h"
#include "backends/cuda/prefill_act.h"
#include "backends/cuda/prefill_mma.cuh"

namespace tern::cuda {

namespace {

constexpr int kThreads = 256, kMaxUnits = 2;  // 8-column units a thread: K <= 4096

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? scratch[lane] : 0.0f;
  return warp_max(v);
}

__device__ __forceinline__ void load8(const float* p, float (&x)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}

__global__ void __launch_bounds__(kThreads) stage_kernel(StageArgs a) {
  __shared__ float scratch[32];
  const int t = blockIdx.x, tid = int(threadIdx.x), nu = a.K / 8;
  const float* x = a.x + size_t(t) * a.K;
  float v[kMaxUnits][8];
  float ss = 0.0f;
#pragma unroll
  for (int m = 0; m < kMaxUnits; ++m) {
    const int u = tid + kThreads * m;
    if (u < nu) {
      load8(x + 8 * u, v[m]);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[m][i] = 0.0f;
    }
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) s += v[m][i] * v[m][i];
    if (a.mode == StageMode::gated) {
      // A value head's 128 columns are 16 neighbouring threads' units.
#pragma unroll
      for (int o = 1; o < 16; o <<= 1) s += __shfl_xor_sync(kFull, s, o);
      const float f = rsqrtf(s * (1.0f / 128.0f) + a.eps);
      if (u < nu) {
        const float* z = a.gate + size_t(t) * a.gate_ld + 8 * u;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int k = 8 * u + i;
          v[m][i] = v[m][i] * f * a.norm[k % 128] * siluf(z[i]);
        }
      }
    }
    ss += s;
  }
  if (a.mode == StageMode::norm) {
    const float f = rsqrtf(block_sum(ss, scratch) / float(a.K) + a.eps);
#pragma unroll
    for (int m = 0; m < kMaxUnits; ++m) {
      const int u = tid + kThreads * m;
      if (u < nu)
#pragma unroll
        for (int i = 0; i < 8; ++i) v[m][i] = v[m][i] * f * a.norm[8 * u + i];
    }
  } else if (a.mode == StageMode::gate) {
#pragma unroll
    for (int m = 0; m < kMaxUnits; ++m) {
      const int u = tid + kThreads * m;
      if (u < nu) {
        const int k = 8 * u, h = k / kHeadDim;
        const float* gt =
            a.gate + size_t(t) * a.gate_ld + 2 * kHeadDim * h + kHeadDim + k % kHeadDim;
#pragma unroll
        for (int i = 0; i < 8; ++i) v[m][i] *= sigmoidf(gt[i]);
      }
    }
  }
  float mx = 0.0f;
#pragma unroll
  for (int m = 0; m < kMaxUnits; ++m)
#pragma unroll
    for (int i = 0; i < 8; ++i) mx = fmaxf(mx, fabsf(v[m][i]));
  mx = block_max(mx, scratch);
  int ex = 0;
  if (mx > 0.0f) frexpf(mx, &ex);  // mx in [2^(ex-1), 2^ex)
  const int e = mx > 0.0f ? min(max(15 - ex, -100), 100) : 0;
  const float up = ldexpf(1.0f, e);
  if (tid == 0) a.xscale[t] = ldexpf(1.0f, -e);
#pragma unroll
  for (int m = 0; m < kMaxUnits; ++m) {
    const int u = tid + kThreads * m;
    if (u >= nu) continue;
    const float* y = v[m];
    uint32_t* o = reinterpret_cast<uint32_t*>(a.out + size_t(t) * a.K);
#pragma unroll
    for (int j = 0; j < 4; ++j)  // columns j, j + 4 are neighbours
      o[staged_col(8 * u + j, a.K) / 2] = pf::pack_f16(y[j] * up, y[j + 4] * up);
    if (a.out32 != nullptr) {
      float4* o = reinterpret_cast<float4*>(a.out32 + size_t(t) * a.K + 8 * u);
      o[0] = make_float4(y[0], y[1], y[2], y[3]);
      o[1] = make_float4(y[4], y[5], y[6], y[7]);
    }
  }
}

}  // namespace

cudaError_t stage_rows(const StageArgs& a, cudaStream_t st) {
  if (a.x == nullptr || a.out == nullptr || a.xscale == nullptr || a.K <= 0 || a.K % 64 != 0 ||
      a.K > 8 * kThreads * kMaxUnits || (a.mode == StageMode::gated && a.K % 128 != 0) ||
      (a.mode != StageMode::plain && a.mode != StageMode::gate && a.norm == nullptr) ||
      ((a.mode == StageMode::gated || a.mode == StageMode::gate) && a.gate == nullptr))
    return cudaErrorInvalidValue;
  if (a.T <= 0) return cudaSuccess;
  stage_kernel<<<a.T, kThreads, 0, st>>>(a);
  return cudaGetLastError();
}

}  // namespace tern::cuda
