// MoE of a prefill chunk on the GPU with no host round trip: the router's
// logits (8-bit weights, near-fp32 tensor-core sums: the expert choice must
// match the CPU's but at near-ties), the top-k choice and weights a warp a token, a
// histogram of rows per expert, a one-warp scan into offsets and the grouped
// GEMMs' tile map (its length stays on the device: the GEMMs launch the upper
// bound and surplus blocks exit), the scatter of the token's slots into expert
// order, and after the grouped GEMMs (prefill_gemm.cu) the combine back into
// token order, each token's slots summed in a fixed order (no float atomics).
// Shapes: T tokens, E experts plus the shared one (group E, every token), A =
// T (top_k + 1) slots.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/host_state.h"
#include "backends/cuda/moe_prefill.h"
#include "backends/cuda/pick.cuh"
#include "backends/cuda/prefill_mma.cuh"

namespace tern::cuda {

namespace {

// Router GEMM on the tensor cores at near fp32 precision. Per group of 64,
// logit += s D + b' X with D = sum (q - 128) x, X = sum x and b' = b + 128 s
// (the signed codes keep D from cancelling against b X). x is split into
// three bf16 terms (hi + mid + lo = x exactly but for subnormals), so every
// product (q - 128) x_i is exact and only the fp32 sums round: ~1e-7 of
// sum |x w|, far below the fp16 GEMMs' error upstream of a32, so the expert
// choice matches the CPU's but at near-ties (the fp32 SIMT kernel this
// replaced took 220 us a layer at 2K tokens, bench/results/prefill-split-bdc4910.txt).
// A block: 4 warps, 64 router rows (warp w rows 16 w..) by kTok tokens; the
// three splits of the group's activations staged in shared memory, the
// weights read from global (L2) straight into A fragments. Within a mma the
// k order is free, so thread quad t takes the contiguous codes 16 t..16 t + 15
// of its two rows (one 16-byte load), step s its word s: logical k (2t, 2t+1)
// is code 16 t + 4 s + (0, 1), (2t + 8, 2t + 9) is 16 t + 4 s + (2, 3), and
// the B fragments take the same activations.
constexpr int kRThreads = 128, kRRows = 64, kXStride = 72;  // bf16 a staged token (+8: banks)

// Codes c, c + 1 (bytes b, b + 1 of w) as the bf16 pair (q - 128): 2^23 + q
// by the magic exponent, then exact subtractions.
__device__ __forceinline__ uint32_t signed_codes(uint32_t w, int b) {
  const float m = __uint_as_float(0x4B000000u) + 128.0f;
  return bf16x2(__uint_as_float(0x4B000000u | ((w >> (8 * b)) & 0xFFu)) - m,
                __uint_as_float(0x4B000000u | ((w >> (8 * b + 8)) & 0xFFu)) - m);
}

// Blocks along z take K in parts (a short chunk's blocks are few, and each
// walks its groups one L2 round trip at a time): part z writes its partial
// logits to logits + z T rows, and pick_kernel sums the parts in order.
template <int kTok>
__global__ void __launch_bounds__(kRThreads)
    router_kernel(DMat W, const float* a32, int T, float* logits) {
  constexpr int kN = kTok / 8;                             // n tiles of 8 tokens
  constexpr int kTpt = kRThreads / kTok, kF4 = 16 / kTpt;  // threads a token, float4s a thread
  __shared__ __align__(16) __nv_bfloat16 xs[3][kTok][kXStride];
  __shared__ float xsum[kTok];
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int K = W.cols, wpr = K / 4, gpr = K / kGroup, t0 = int(blockIdx.y) * kTok;
  const int per = (gpr + int(gridDim.z) - 1) / int(gridDim.z), g0 = int(blockIdx.z) * per;
  const int g1 = min(gpr, g0 + per);
  logits += size_t(blockIdx.z) * T * W.rows;
  const int R0 = int(blockIdx.x) * kRRows + 16 * warp + g, R1 = R0 + 8;
  const bool busy = int(blockIdx.x) * kRRows + 16 * warp < W.rows;  // the warp has a row
  // Staging: thread tid takes token tid / kTpt, float4s kF4 (tid % kTpt).. of the group.
  const int st = tid / kTpt, sq = kF4 * (tid % kTpt);
  float4 xr[kF4];
  auto fetch = [&](int gi) {
    const float4* src = reinterpret_cast<const float4*>(a32 + size_t(t0 + st) * K + gi * kGroup);
#pragma unroll
    for (int n = 0; n < kF4; ++n) xr[n] = t0 + st < T ? src[sq + n] : make_float4(0, 0, 0, 0);
  };
  auto stage = [&] {
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < kF4; ++n) {
      const float v[4] = {xr[n].x, xr[n].y, xr[n].z, xr[n].w};
      uint32_t hi[2], mid[2], lo[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float h[2], m[2], l[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float x = v[2 * j + e];
          sum += x;
          h[e] = __bfloat162float(__float2bfloat16_rn(x));
          m[e] = __bfloat162float(__float2bfloat16_rn(x - h[e]));
          l[e] = x - h[e] - m[e];
        }
        hi[j] = bf16x2(h[0], h[1]), mid[j] = bf16x2(m[0], m[1]), lo[j] = bf16x2(l[0], l[1]);
      }
      const int k = 4 * (sq + n);
      *reinterpret_cast<uint2*>(&xs[0][st][k]) = make_uint2(hi[0], hi[1]);
      *reinterpret_cast<uint2*>(&xs[1][st][k]) = make_uint2(mid[0], mid[1]);
      *reinterpret_cast<uint2*>(&xs[2][st][k]) = make_uint2(lo[0], lo[1]);
    }
#pragma unroll
    for (int o = 1; o < kTpt; o <<= 1) sum += __shfl_xor_sync(kFull, sum, o);
    if (tid % kTpt == 0) xsum[st] = sum;
  };
  auto codes = [&](int R, int gi) {
    return R < W.rows ? *reinterpret_cast<const uint4*>(W.w + size_t(R) * wpr + gi * 16 + 4 * t)
                      : make_uint4(0, 0, 0, 0);
  };
  auto sbw = [&](int R, int gi) { return R < W.rows ? W.sb[size_t(R) * gpr + gi] : 0u; };
  float acc[kN][4] = {};
  uint4 c0 = codes(R0, g0), c1 = codes(R1, g0);
  uint32_t sb0 = sbw(R0, g0), sb1 = sbw(R1, g0);
  if (g0 < g1) fetch(g0);
  for (int gi = g0; gi < g1; ++gi) {
    __syncthreads();  // every warp is done with the last group's tiles
    stage();
    __syncthreads();
    if (gi + 1 < g1) fetch(gi + 1);
    if (!busy) continue;
    uint32_t a[4][4];  // [step][fragment]
    const uint32_t w0[4] = {c0.x, c0.y, c0.z, c0.w}, w1[4] = {c1.x, c1.y, c1.z, c1.w};
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      a[s][0] = signed_codes(w0[s], 0);
      a[s][1] = signed_codes(w1[s], 0);
      a[s][2] = signed_codes(w0[s], 2);
      a[s][3] = signed_codes(w1[s], 2);
    }
    const float s0 = sb_scale(sb0), s1 = sb_scale(sb1);
    const float o0 = fmaf(128.0f, s0, sb_bias(sb0)), o1 = fmaf(128.0f, s1, sb_bias(sb1));
    if (gi + 1 < g1) {  // the next group's weights load under this one's products
      c0 = codes(R0, gi + 1), c1 = codes(R1, gi + 1);
      sb0 = sbw(R0, gi + 1), sb1 = sbw(R1, gi + 1);
    }
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      float d[4] = {};
#pragma unroll
      for (int p = 0; p < 3; ++p) {
        const uint4 lo = *reinterpret_cast<const uint4*>(&xs[p][8 * n + g][16 * t]);
        const uint4 hi = *reinterpret_cast<const uint4*>(&xs[p][8 * n + g][16 * t + 8]);
        mma_bf16(d, a[0], lo.x, lo.y);
        mma_bf16(d, a[1], lo.z, lo.w);
        mma_bf16(d, a[2], hi.x, hi.y);
        mma_bf16(d, a[3], hi.z, hi.w);
      }
      const float x0 = xsum[8 * n + 2 * t], x1 = xsum[8 * n + 2 * t + 1];
      acc[n][0] = fmaf(s0, d[0], fmaf(o0, x0, acc[n][0]));
      acc[n][1] = fmaf(s0, d[1], fmaf(o0, x1, acc[n][1]));
      acc[n][2] = fmaf(s1, d[2], fmaf(o1, x0, acc[n][2]));
      acc[n][3] = fmaf(s1, d[3], fmaf(o1, x1, acc[n][3]));
    }
  }
  if (!busy) return;
#pragma unroll
  for (int n = 0; n < kN; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int tok = t0 + 8 * n + 2 * t + (i & 1), R = i < 2 ? R0 : R1;
      if (tok < T && R < W.rows) logits[size_t(tok) * W.rows + R] = acc[n][i];
    }
}

// Tokens a router block (16 to 1K tokens, else 32), and the grid: row blocks
// by token blocks by K parts.
int router_tokens(int T) {
  return T <= 1024 ? 16 : 32;
}
dim3 router_grid(int rows, int T, int parts) {
  const int tok = router_tokens(T);
  return dim3(unsigned((rows + kRRows - 1) / kRRows), unsigned((T + tok - 1) / tok),
              unsigned(parts));
}

constexpr int kPickWarps = 8, kMaxE = 1024;

// A warp a token: the choice (pick.cuh, ties to the lower id), the weights
// (softmax over the chosen logits: the full softmax renormalised over them),
// the shared gate, and the histogram.
template <int N>
__global__ void __launch_bounds__(kPickWarps * 32) pick_kernel(RouteArgs a) {
  __shared__ float l[kPickWarps][32 * N];
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int t = int(blockIdx.x) * kPickWarps + warp;
  if (t >= a.T) return;
  const size_t part = size_t(a.T) * (a.E + 1);
  const float* row = a.logits + size_t(t) * (a.E + 1);
  auto logit = [&](int e) {  // the router's K parts summed in order, loaded at once
    float v[kRouterMaxParts];
#pragma unroll
    for (int p = 0; p < kRouterMaxParts; ++p) v[p] = p < a.parts ? row[p * part + e] : 0.0f;
    float sum = v[0];
#pragma unroll
    for (int p = 1; p < kRouterMaxParts; ++p)
      if (p < a.parts) sum += v[p];
    return sum;
  };
  for (int e = lane; e < a.E; e += 32) l[warp][e] = logit(e);
  __syncwarp();
  const Choice c = pick_experts<N>(l[warp], a.E, a.top_k);
  const bool mine = lane < a.top_k;
  const float m = warp_max(mine ? c.logit : -INFINITY);
  const float p = mine ? expf(c.logit - m) : 0.0f;
  const float w = p / warp_sum(p);
  if (mine) {
    a.ids[size_t(t) * a.top_k + lane] = c.id;
    a.wts[size_t(t) * (a.top_k + 1) + lane] = w;
    atomicAdd(a.counts + c.id, 1);
  }
  if (lane == 0) a.wts[size_t(t) * (a.top_k + 1) + a.top_k] = 1.0f / (1.0f + expf(-logit(a.E)));
}

// One warp: offsets and tile counts by a warp scan (lane l takes groups
// l per .. l per + per - 1), the map, the cursors; the counts are zeroed for
// the next call.
__global__ void scan_kernel(RouteArgs a) {
  const int lane = int(threadIdx.x), G = a.E + 1, per = (G + 31) / 32;
  const int g0 = min(G, lane * per), g1 = min(G, g0 + per);
  auto count = [&](int e) { return e == a.E ? a.T : __ldcg(a.counts + e); };
  int rows = 0, tiles = 0;
  for (int e = g0; e < g1; ++e) rows += count(e), tiles += (count(e) + a.bn - 1) / a.bn;
  int rx = rows, tx = tiles;  // inclusive scans
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int r = __shfl_up_sync(kFull, rx, o), q = __shfl_up_sync(kFull, tx, o);
    if (lane >= o) rx += r, tx += q;
  }
  int off = rx - rows, toff = tx - tiles;
  for (int e = g0; e < g1; ++e) {
    const int n = count(e);
    a.offsets[e] = off, a.cursor[e] = off;
    for (int i = 0; i * a.bn < n; ++i)
      a.map[toff++] = GemmTile{e, off + i * a.bn, min(a.bn, n - i * a.bn), 0};
    off += n;
    if (e < a.E) a.counts[e] = 0;
  }
  if (lane == 31) a.offsets[G] = off, *a.map_count = toff;
}

// A thread a (token, choice): the slot in its expert's rows (the order
// within an expert is the atomics', but every slot's arithmetic is its own,
// so results do not depend on it); the shared expert's slot is fixed.
__global__ void scatter_kernel(RouteArgs a) {
  const int K1 = a.top_k + 1;
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= a.T * K1) return;
  const int t = i / K1, k = i % K1;
  int slot;
  if (k < a.top_k)
    slot = atomicAdd(a.cursor + a.ids[size_t(t) * a.top_k + k], 1);
  else
    slot = a.offsets[a.E] + t;
  a.slot_row[slot] = t;
  a.slot_w[slot] = a.wts[size_t(t) * K1 + k];
  a.token_slot[i] = slot;
}

// h[t] += the token's slot rows (fp16), summed in slot order: 8 columns a thread.
__global__ void combine_kernel(const uint16_t* y16, const int* token_slot, int T, int slots, int D,
                               float* h) {
  const int t = int(blockIdx.x);
  const int* ts = token_slot + size_t(t) * slots;
  for (int d = int(threadIdx.x) * 8; d < D; d += int(blockDim.x) * 8) {
    float s[8] = {};
    for (int k = 0; k < slots; ++k) {
      const uint4 v = *reinterpret_cast<const uint4*>(y16 + size_t(ts[k]) * D + d);
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = __half22float2(pf::u2h(w[j]));
        s[2 * j] += f.x, s[2 * j + 1] += f.y;
      }
    }
    float4* o = reinterpret_cast<float4*>(h + size_t(t) * D + d);
    float4 a = o[0], b = o[1];
    a.x += s[0], a.y += s[1], a.z += s[2], a.w += s[3];
    b.x += s[4], b.y += s[5], b.z += s[6], b.w += s[7];
    o[0] = a, o[1] = b;
  }
}

}  // namespace

int router_parts(int T, int rows, int K) {
  if (T <= 0 || T > kRouterPartTokens) return 1;
  const dim3 g = router_grid(rows, T, 1);
  const int blocks = int(g.x * g.y);
  // About four blocks an SM, each of at least four groups.
  const int want = (4 * sm_count() + blocks - 1) / blocks;
  return std::clamp(std::min({want, K / kGroup / 4, kRouterPartTokens / T}), 1, kRouterMaxParts);
}

cudaError_t router_logits(const DMat& W, const float* a32, int T, int parts, float* logits,
                          cudaStream_t st) {
  if (W.bits != 8 || W.w == nullptr || W.cols % kGroup != 0 || parts < 1 ||
      parts > std::min(kRouterMaxParts, W.cols / kGroup))
    return cudaErrorInvalidValue;
  if (T <= 0) return cudaSuccess;
  const dim3 grid = router_grid(W.rows, T, parts);
  if (router_tokens(T) == 16)
    router_kernel<16><<<grid, kRThreads, 0, st>>>(W, a32, T, logits);
  else
    router_kernel<32><<<grid, kRThreads, 0, st>>>(W, a32, T, logits);
  return cudaGetLastError();
}

int route_max_tiles(int T, int E, int top_k, int bn) {
  return (T * (top_k + 1) + bn - 1) / bn + E + 1;
}

cudaError_t route_tokens(const RouteArgs& a, cudaStream_t st) {
  if (a.E < 1 || a.E > kMaxE || a.top_k < 1 || a.top_k > std::min(a.E, 32) || a.bn <= 0 ||
      a.parts < 1 || a.parts > kRouterMaxParts)
    return cudaErrorInvalidValue;
  if (a.T <= 0) return cudaSuccess;
  const dim3 pick_grid((a.T + kPickWarps - 1) / kPickWarps);
  if (a.E <= 256)
    pick_kernel<8><<<pick_grid, kPickWarps * 32, 0, st>>>(a);
  else
    pick_kernel<kMaxE / 32><<<pick_grid, kPickWarps * 32, 0, st>>>(a);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  scan_kernel<<<1, 32, 0, st>>>(a);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const int n = a.T * (a.top_k + 1);
  scatter_kernel<<<(n + 255) / 256, 256, 0, st>>>(a);
  return cudaGetLastError();
}

cudaError_t moe_combine(const uint16_t* y16, const int* token_slot, int T, int slots, int D,
                        float* h, cudaStream_t st) {
  if (D % 8 != 0) return cudaErrorInvalidValue;
  if (T <= 0) return cudaSuccess;
  combine_kernel<<<T, 256, 0, st>>>(y16, token_slot, T, slots, D, h);
  return cudaGetLastError();
}

}  // namespace tern::cuda
