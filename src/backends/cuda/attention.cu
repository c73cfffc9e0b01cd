// Gated attention decode: prep (q/k RMSNorm, partial rotate-half RoPE, KV
// append in bf16), split-K GQA attention (each CTA takes one KV head and one
// range of positions; each KV row is read once for all G query heads of the
// group) and the combine, which also applies sigmoid(gate).
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"

namespace tern::cuda {

namespace {

constexpr int kD = kHeadDim;

__global__ void __launch_bounds__(kD) attn_prep_kernel(AttnPrepArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ float x[kD], red[32];
  const int h = blockIdx.x, d = threadIdx.x, pos = *a.pos;
  const bool is_q = h < a.heads;
  const int kvh = h - a.heads;
  const float in = is_q ? a.qkv[h * 2 * kD + d] : a.qkv[a.heads * 2 * kD + kvh * kD + d];
  const float ss = block_sum(in * in, red);
  x[d] = in * (1.0f / sqrtf(ss / float(kD) + a.eps)) * (is_q ? a.q_norm[d] : a.k_norm[d]);
  __syncthreads();
  float r = x[d];
  const int half = a.rotary / 2;
  if (d < a.rotary) {
    const int i = d % half;
    const float inv_freq = 1.0f / powf(a.theta, float(2 * i) / float(a.rotary));
    const float ang = float(pos) * inv_freq, cs = cosf(ang), sn = sinf(ang);
    r = d < half ? x[d] * cs - x[d + half] * sn : x[d] * cs + x[d - half] * sn;
  }
  if (is_q) {
    a.q[h * kD + d] = r;
    return;
  }
  const size_t row = (size_t(kvh) * a.capacity + pos) * kD + d;
  a.k_cache[row] = __bfloat16_as_ushort(__float2bfloat16_rn(r));
  const float v = a.qkv[a.heads * 2 * kD + a.kv_heads * kD + kvh * kD + d];
  a.v_cache[row] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

constexpr int kWarps = 4;

__device__ __forceinline__ void unpack8(const uint4 u, float* f) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// Sums G per-lane partial values over the warp, leaving lane l with the total
// of value l >> (5 - log2 G) (its "own" head): halving exchanges (each lane sends
// the half it gives up) then a butterfly, 2G - 1 + 5 - log2 G shuffles instead
// of 5G, and afterwards only one lane group per head does the softmax.
template <int G>
__device__ __forceinline__ float reduce_scatter(float (&v)[G], int lane) {
  int o = 16;
#pragma unroll
  for (int n = G; n > 1; n /= 2, o /= 2) {
    const bool up = (lane & o) != 0;
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const float send = up ? v[i] : v[i + n / 2], keep = up ? v[i + n / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(kFull, send, o);
    }
  }
  float r = v[0];
  for (; o > 0; o /= 2) r += __shfl_xor_sync(kFull, r, o);
  return r;
}

// Lane l holds dims 8l..8l+7 of every row; warps take every kWarps-th position.
template <int G>
__global__ void __launch_bounds__(kWarps * 32) attn_split_kernel(AttnDecodeArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ float sm_m[kWarps][G], sm_l[kWarps][G], sm_o[kWarps][G][kD];
  const int kvh = blockIdx.x, split = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n = *a.pos + 1, chunk = (n + a.splits - 1) / a.splits;
  const int start = split * chunk, end = min(n, start + chunk);
  // Lanes own heads for the softmax: head `mine` is summed into lanes
  // mine << shift ... and its running max m and sum l live there.
  constexpr int shift = G == 1 ? 5 : G == 2 ? 4 : G == 4 ? 3 : 2;
  const int mine = lane >> shift;
  float q[G][8], acc[G][8], m = -INFINITY, l = 0.0f;
  const float scale = rsqrtf(float(kD));
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      q[g][i] = a.q[(kvh * G + g) * kD + lane * 8 + i] * scale;
      acc[g][i] = 0.0f;
    }
  const uint4* K = reinterpret_cast<const uint4*>(a.k_cache + size_t(kvh) * a.capacity * kD);
  const uint4* V = reinterpret_cast<const uint4*>(a.v_cache + size_t(kvh) * a.capacity * kD);
  // kAhead positions' K and V rows in flight per warp: the loads of the next
  // positions go out before the current ones are used.
  constexpr int kAhead = 4;
  uint4 kr[kAhead], vr[kAhead];
#pragma unroll
  for (int j = 0; j < kAhead; ++j) {
    const int p = start + warp + j * kWarps;
    if (p < end) {
      kr[j] = __ldcs(K + size_t(p) * (kD / 8) + lane);
      vr[j] = __ldcs(V + size_t(p) * (kD / 8) + lane);
    }
  }
  for (int p0 = start + warp; p0 < end; p0 += kAhead * kWarps) {
#pragma unroll
    for (int j = 0; j < kAhead; ++j) {
      const int p = p0 + j * kWarps;
      if (p >= end) break;
      float kf[8], vf[8];
      unpack8(kr[j], kf);
      unpack8(vr[j], vf);
      const int next = p + kAhead * kWarps;
      if (next < end) {
        kr[j] = __ldcs(K + size_t(next) * (kD / 8) + lane);
        vr[j] = __ldcs(V + size_t(next) * (kD / 8) + lane);
      }
      float sc[G];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        sc[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) sc[g] += q[g][i] * kf[i];
      }
      const float s = reduce_scatter<G>(sc, lane);
      const float mn = fmaxf(m, s), c = expf(m - mn), e = expf(s - mn);
      l = l * c + e;
      m = mn;
      // The running max rarely moves after the first positions: rescale only
      // when it did for some head.
      if (__any_sync(kFull, c != 1.0f))
#pragma unroll
        for (int g = 0; g < G; ++g) {
          const float cg = __shfl_sync(kFull, c, g << shift);
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[g][i] *= cg;
        }
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float eg = __shfl_sync(kFull, e, g << shift);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] = fmaf(eg, vf[i], acc[g][i]);
      }
    }
  }
  if ((lane & ((1 << shift) - 1)) == 0) sm_m[warp][mine] = m, sm_l[warp][mine] = l;
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int i = 0; i < 8; ++i) sm_o[warp][g][lane * 8 + i] = acc[g][i];
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * kD; idx += kWarps * 32) {
    const int g = idx / kD, d = idx % kD;
    float M = -INFINITY;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm_m[w][g]);
    float L = 0.0f, O = 0.0f;
    if (M != -INFINITY)
      for (int w = 0; w < kWarps; ++w) {
        const float c = expf(sm_m[w][g] - M);
        L += sm_l[w][g] * c;
        O += sm_o[w][g][d] * c;
      }
    float* part = a.part + (size_t(kvh * G + g) * a.splits + split) * (kD + 2);
    part[d] = O;
    if (d == 0) part[kD] = M, part[kD + 1] = L;
  }
}

constexpr int kMaxSplits = 128;

// Merges the splits of one query head: the per-split weights exp(m_s - M) are
// computed once, in parallel, then every thread (one output dim) sums its
// column with independent loads.
__global__ void __launch_bounds__(kD) attn_combine_kernel(AttnDecodeArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ float w[kMaxSplits], red[32];
  const int h = blockIdx.x, d = threadIdx.x, n = a.splits;
  const float* part = a.part + size_t(h) * n * (kD + 2);
  const bool mine = d < n && part[d * (kD + 2) + kD + 1] != 0.0f;
  const float m = mine ? part[d * (kD + 2) + kD] : -INFINITY;
  // Block max through the scratch (block_sum's pattern, with max).
  float M = warp_max(m);
  if ((d & 31) == 0) red[d >> 5] = M;
  __syncthreads();
  M = red[0];
  for (int i = 1; i < kD / 32; ++i) M = fmaxf(M, red[i]);
  __syncthreads();
  const float c = mine ? expf(m - M) : 0.0f;
  if (d < n) w[d] = c;
  const float L = block_sum(mine ? part[d * (kD + 2) + kD + 1] * c : 0.0f, red);
  // Eight independent loads in flight per step.
  float o[8] = {};
  int s = 0;
  for (; s + 8 <= n; s += 8)
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] += part[(s + i) * (kD + 2) + d] * w[s + i];
  for (; s < n; ++s) o[0] += part[s * (kD + 2) + d] * w[s];
  const float O = ((o[0] + o[1]) + (o[2] + o[3])) + ((o[4] + o[5]) + (o[6] + o[7]));
  a.out[h * kD + d] = O / L * sigmoidf(a.qkv[h * 2 * kD + kD + d]);
}

}  // namespace

cudaError_t attn_prep(const AttnPrepArgs& a, cudaStream_t st) {
  return launch_pdl(attn_prep_kernel, dim3(a.heads + a.kv_heads), dim3(kD), 0, st, a);
}

int attn_splits(int64_t n) {
  int64_t tier = 64;
  while (tier < n) tier *= 2;
  return int(std::min<int64_t>(kMaxSplits, std::max<int64_t>(1, tier / 64)));
}

cudaError_t attn_decode(const AttnDecodeArgs& a, cudaStream_t st) {
  void (*split)(AttnDecodeArgs) = nullptr;
  switch (a.heads / a.kv_heads) {  // query heads per KV head
    case 1:
      split = &attn_split_kernel<1>;
      break;
    case 2:
      split = &attn_split_kernel<2>;
      break;
    case 4:
      split = &attn_split_kernel<4>;
      break;
    case 8:
      split = &attn_split_kernel<8>;
      break;
    default:
      return cudaErrorInvalidValue;
  }
  const dim3 grid(a.kv_heads, a.splits);
  if (cudaError_t e = launch_pdl(split, grid, dim3(kWarps * 32), 0, st, a); e != cudaSuccess)
    return e;
  return launch_pdl(attn_combine_kernel, dim3(a.heads), dim3(kD), 0, st, a);
}

}  // namespace tern::cuda
